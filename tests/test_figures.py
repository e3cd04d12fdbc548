"""The book's figures draw every glyph in a font the reader's browser has.

The SVG figures keep their text as text (``svg.fonttype: none``), so the browser draws
each glyph with its own fonts. Matplotlib's mathtext takes some glyphs from fonts that
no browser has (the radical of ``\\sqrt`` comes from STIXSizeOneSym): those are drawn
with a fallback font of another size, and the radical's bar lands beside the sign. Every
font named in the SVG must therefore be DejaVu Sans, with its generic fallbacks: the
site test checks every figure of the built book with :func:`font_families`; here, that
it catches the radical.
"""

import re


def font_families(svg: str) -> set[str]:
    return {m.strip() for m in re.findall(r"font-family:\s*([^;\"]+)", svg)}


def test_a_square_root_in_a_label_is_caught(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rcutil import plotting

    plotting.setup(svg=False)
    fig, ax = plt.subplots()
    ax.set_title(r"$\tau = \sqrt{d_{QK}}$")
    path = plotting.save(fig, tmp_path / "sqrt.svg")
    plt.close(fig)
    assert any("STIX" in f for f in font_families(path.read_text()))
