"""The book's table (rcutil.tables): aligned text when printed, MyST in a chapter."""

import pytest

from rcutil.tables import table


def test_printed_columns_align_text_left_and_numbers_right():
    t = table(
        ["scaling", "smin", "rank"],
        [["tau=d_qk", 9.27e-4, 1.069], ["tau=1", 0.582, 4.864]],
        [".2e", ".2e", ".3f"],
    )
    lines = str(t).splitlines()
    assert lines == [
        "scaling       smin   rank",
        "tau=d_qk  9.27e-04  1.069",
        "tau=1     5.82e-01  4.864",
    ]
    assert len({len(line) for line in lines}) == 1


def test_formats_apply_to_numbers_only_and_bools_stay_words():
    t = table(["block", "error", "ok"], [["W_Q", 1.5e-9, True]], ["", ".1e", ""])
    assert str(t).splitlines()[1] == "W_Q    1.5e-09  True"
    assert t.markdown().splitlines()[2] == "| W_Q | 1.5e-09 | True |"


def test_in_a_chapter_it_is_a_myst_table_with_pipes_escaped():
    t = table(["$\\beta$", "x"], [[0.5, "a | b"], [1, "c"]], [".2f", ""])
    assert (
        t._repr_markdown_()
        == t.markdown()
        == ("| $\\beta$ | x |\n|---|---|\n| 0.50 | a \\| b |\n| 1.00 | c |")
    )
    assert table(["a"], [["x \\| y"]]).markdown().endswith("| x \\| y |")


@pytest.mark.parametrize(
    "header, rows, formats, match",
    [
        (["a", "b"], [[1, 2]], [".1f"], "formats has 1 entries for 2 columns"),
        (["a", "b"], [[1]], None, "row 0 has 1 entries for 2 columns"),
    ],
)
def test_mismatched_shapes_are_named(header, rows, formats, match):
    with pytest.raises(ValueError, match=match):
        table(header, rows, formats)
