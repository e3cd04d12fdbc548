"""scripts/word_count.py: what counts as a chapter's rendered prose, and what not."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location(
    "word_count", ROOT / "scripts" / "word_count.py"
)
word_count = importlib.util.module_from_spec(spec)
sys.modules["word_count"] = word_count  # dataclasses look their module up there
spec.loader.exec_module(word_count)

FRONT = """---
jupytext:
  text_representation:
    format_name: myst
kernelspec:
  name: python3
---
"""


def prose(text: str) -> int:
    return word_count.count(text).prose


def test_plain_paragraphs_and_headings_are_counted():
    assert prose("# One title\n\nthree more words.\n") == 5


def test_front_matter_is_not_counted():
    assert prose(FRONT + "\nfour words of prose\n") == 4


@pytest.mark.parametrize(
    "tags", ["", ":tags: [hide-input]\n", ":tags: [remove-cell]\n"]
)
def test_code_cells_are_not_counted_whatever_their_tags(tags):
    cell = f"```{{code-cell}} ipython3\n{tags}\nx = some words here\nprint(x)\n```\n"
    assert prose("two words\n\n" + cell + "\nand three more\n") == 5


def test_other_code_is_not_counted():
    text = (
        "one\n\n"
        "```{literalinclude} ../rcutil/model.py\n:pyobject: ffn\n"
        ":caption: a cap\n```\n\n"
        "```bash\nmake test please now\n```\n\n"
        "two words\n\n"
        "    python -m rcutil model --profile book\n\n"
        "three more words\n"
    )
    assert prose(text) == 6


def test_labels_options_comments_and_display_math_are_not_counted():
    text = (
        "(model)=\n# Title\n\n% a comment line\n<!-- an html comment -->\n"
        ":::{prf:lemma} Softmax Jacobian\n:label: lip-lem-softmax\n:nonumber:\n\n"
        "For every vector.\n:::\n\n"
        "$$\na + b = c \\quad \\text{with words}\n$$ (model-attn)\n\n"
        "$$ x = y $$\n\nend\n"
    )
    # Title, the lemma's title "Softmax Jacobian", "For every vector.", "end"
    assert prose(text) == 1 + 2 + 3 + 1


def test_roles_and_inline_math_count_one_word_each():
    text = (
        "See {glue:text}`conv_s0:.3f` and {eq}`model-z` and $\\sigma_{\\min}(Z)$ "
        "and {cite}`qin2025convergence` and $a\nb$ and {math}`\\beta X + A`.\n"
    )
    # See, and x5, six units
    assert prose(text) == 1 + 5 + 6


def test_a_role_with_explicit_text_counts_its_text():
    text = "by {prf:ref}`the lemma on small scores <sv-lem-collapse>` here\n"
    assert prose(text) == 1 + 5 + 1


def test_a_link_counts_its_text_and_a_bare_url_nothing():
    assert prose("read [the Keras example](https://keras.io/x) at https://a.b/c\n") == 5


def test_lone_punctuation_is_not_a_word():
    assert prose("one — two | three\n\n|---|---|\n") == 3


def test_directive_bodies_are_prose():
    text = (
        ":::{admonition} Run it\n:class: tip\nThe chapter takes seconds.\n:::\n\n"
        "```{admonition} A note\n:class: note\nTwo words.\n```\n\nafter\n"
    )
    assert prose(text) == 2 + 4 + 2 + 2 + 1


def test_figure_captions_are_counted_apart_from_the_prose():
    cell = (
        "```{code-cell} ipython3\n:tags: [hide-input]\n:mystnb:\n:  figure:\n"
        ":    caption: |\n:      Loss against the step,\n:      log scale.\n"
        ":    name: fig-x\n:  image:\n:    alt: Not counted at all.\n"
        "plt.plot(x)\n```\n"
    )
    c = word_count.count("one two\n\n" + cell)
    assert (c.prose, c.captions, c.total) == (2, 6, 8)


def test_a_plain_caption_continued_on_several_lines_is_counted_whole():
    cell = (
        "```{code-cell} ipython3\n:mystnb:\n:  figure:\n"
        ":    caption: Smallest singular value\n:      against the step.\n"
        ":    name: fig-y\nplt.plot(x)\n```\n"
    )
    assert word_count.count(cell).captions == 6


def test_cli_prints_every_chapter_and_fails_above_the_limit(tmp_path, capsys):
    short, long = tmp_path / "short.md", tmp_path / "long.md"
    short.write_text("a few words\n")
    long.write_text("word " * 30 + "\n")
    assert word_count.main([str(short), str(long)]) == 0
    out = capsys.readouterr().out
    assert "short" in out and "long" in out and "30" in out
    assert word_count.main(["--max", "10", str(short), str(long)]) == 1
    assert "long" in capsys.readouterr().err


def test_cli_names_a_missing_chapter(tmp_path, capsys):
    with pytest.raises(SystemExit):
        word_count.main([str(tmp_path / "nowhere.md")])
    assert "no such chapter file" in capsys.readouterr().err


def test_every_chapter_of_the_book_has_prose_and_fewer_words_than_its_source():
    for path in word_count.chapters():
        c = word_count.count(path.read_text())
        assert 0 < c.prose < len(path.read_text().split()), path.name
