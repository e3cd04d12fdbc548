"""Plain-text tables of the chapters' outputs (rcutil.tables)."""

import pytest

from rcutil.tables import text_table


def test_columns_align_text_left_and_numbers_right():
    table = text_table(
        ["scaling", "smin", "rank"],
        [["tau=d_qk", 9.27e-4, 1.069], ["tau=1", 0.582, 4.864]],
        [".2e", ".2e", ".3f"],
    )
    lines = table.splitlines()
    assert lines == [
        "scaling       smin   rank",
        "tau=d_qk  9.27e-04  1.069",
        "tau=1     5.82e-01  4.864",
    ]
    assert len({len(line) for line in lines}) == 1


def test_formats_apply_to_numbers_only_and_bools_stay_words():
    table = text_table(
        ["block", "error", "ok"], [["W_Q", 1.5e-9, True]], ["", ".1e", ""]
    )
    assert table.splitlines()[1] == "W_Q    1.5e-09  True"


@pytest.mark.parametrize(
    "header, rows, formats, match",
    [
        (["a", "b"], [[1, 2]], [".1f"], "formats has 1 entries for 2 columns"),
        (["a", "b"], [[1]], None, "row 0 has 1 entries for 2 columns"),
    ],
)
def test_mismatched_shapes_are_named(header, rows, formats, match):
    with pytest.raises(ValueError, match=match):
        text_table(header, rows, formats)
