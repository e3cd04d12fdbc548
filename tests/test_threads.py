"""rcutil.threads: torch's thread count from $RCUTIL_TORCH_THREADS, bounded to 1 .. four
per core, and the block that runs on a given count."""

import os

import pytest
import torch

from rcutil import env, threads


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    "value", ["abc", "0", "-1", "1.5", "5000", "100000", str(4 * env.cores() + 1)]
)
def test_a_thread_count_outside_1_to_four_per_core_is_refused(
    monkeypatch, value, restore_threads
):
    monkeypatch.setenv(threads.ENV_VAR, value)
    before = torch.get_num_threads()
    with pytest.raises(env.EnvError, match="RCUTIL_TORCH_THREADS") as err:
        threads.apply_environment()
    assert f"'{value}'" in str(err.value)
    assert f"1 to {4 * env.cores()}" in str(err.value)
    assert torch.get_num_threads() == before, "nothing was set"


@pytest.mark.parametrize(
    "value, n", [(" 1 ", 1), (str(4 * env.cores()), 4 * env.cores())]
)
def test_a_thread_count_in_range_is_applied(monkeypatch, value, n, restore_threads):
    monkeypatch.setenv(threads.ENV_VAR, value)
    threads.apply_environment()
    assert torch.get_num_threads() == n


@pytest.mark.parametrize("value", [None, "", "  "])
def test_without_a_count_torch_keeps_its_default(monkeypatch, value, restore_threads):
    if value is None:
        monkeypatch.delenv(threads.ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(threads.ENV_VAR, value)
    torch.set_num_threads(2)
    threads.apply_environment()
    assert threads.from_environment() is None and torch.get_num_threads() == 2


def test_torch_threads_sets_a_count_for_a_block_and_restores_it(restore_threads):
    torch.set_num_threads(2)
    with threads.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with pytest.raises(RuntimeError), threads.torch_threads(1):
        raise RuntimeError("a failing block")
    assert torch.get_num_threads() == 2
    with threads.torch_threads(None):
        assert torch.get_num_threads() == 2


def test_openblas_gets_one_thread_unless_its_variable_says_otherwise(monkeypatch):
    monkeypatch.delenv(threads.BLAS_VAR, raising=False)
    threads.single_threaded_blas()
    assert os.environ[threads.BLAS_VAR] == "1"
    monkeypatch.setenv(threads.BLAS_VAR, "3")
    threads.single_threaded_blas()
    assert os.environ[threads.BLAS_VAR] == "3"
