"""Pieces of a run in worker processes: results in order, errors raised here."""

import math

import pytest

from rcutil.parallel import parallel_map


def test_two_workers_return_the_results_in_the_order_of_the_items():
    items = [9.0, 1.0, 16.0, 4.0]
    got = parallel_map(math.sqrt, items, workers=2, cost=lambda x: x)
    assert got == [3.0, 1.0, 4.0, 2.0]
    assert parallel_map(math.sqrt, items, workers=1) == got


def test_a_piece_that_raises_raises_here():
    with pytest.raises(ValueError, match="math domain error"):
        parallel_map(math.sqrt, [4.0, -1.0], workers=2)


def test_workers_must_be_a_positive_count():
    with pytest.raises(ValueError, match="workers must be a positive integer"):
        parallel_map(math.sqrt, [4.0], workers=0)
