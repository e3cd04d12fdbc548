"""The notebooks that the launch buttons open: every chapter, in plain Markdown, with a
first cell that installs the book's package at the published commit; one of them runs in
a fresh kernel against a wheel of the package, without the source tree."""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location(
    "build_notebooks", ROOT / "scripts" / "build_notebooks.py"
)
build_notebooks = importlib.util.module_from_spec(spec)
sys.modules["build_notebooks"] = build_notebooks
spec.loader.exec_module(build_notebooks)
COMMIT = "0123456789abcdef0123456789abcdef01234567"
MYST = re.compile(
    r"\{[\w:-]+\}`|```\{|:::\{|^\([\w-]+\)=\s*$|\$\$[ \t]*\([\w-]+\)", re.M
)


@pytest.fixture(scope="module")
def notebooks(tmp_path_factory):
    out = tmp_path_factory.mktemp("notebooks")
    assert build_notebooks.main(["--out", str(out), "--commit", COMMIT]) == 0
    return out / "book"


def test_every_chapter_becomes_a_notebook_whose_first_cell_installs_the_commit(
    notebooks,
):
    chapters = build_notebooks.chapters()
    assert {p.stem for p in chapters} >= {"model", "jena", "sst2", "report"}
    for md in chapters:
        nb = nbformat.read(notebooks / f"{md.stem}.ipynb", as_version=4)
        nbformat.validate(nb)
        first = nb.cells[0]
        assert first.cell_type == "code" and f"@{COMMIT}" in first.source
        compile(first.source, "setup", "exec")
        assert any(
            "from rcutil" in c.source for c in nb.cells[1:] if c.cell_type == "code"
        )
        assert 'os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")' in first.source


def test_the_markdown_holds_no_myst_syntax(notebooks):
    for path in sorted(notebooks.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                left = MYST.findall(cell.source)
                assert not left, f"{path.name}: {left[:5]} in {cell.source[:200]!r}"


def test_references_become_what_the_website_shows(notebooks):
    nb = nbformat.read(notebooks / "model.ipynb", as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "\\tag{1}" in text and "Qin et al. (2025)" in text
    assert "```python\ndef ffn(" in text  # a literalinclude's code
    assert re.search(r"\*\*Fig\. \d+\.\*\* Full-batch gradient descent", text)


def test_the_myst_pattern_finds_myst():
    for source in (
        "see {eq}`model-z`",
        "```{admonition} Run it",
        ":::{prf:lemma}",
        "(model)=",
        "$$ x $$ (eq-a)",
    ):
        assert MYST.search(source), source
    assert not MYST.search("plain $x$ and `code` and (a) = b")
    # a display's end followed by a paragraph that starts with an item number
    assert not MYST.search("$$\n\n(3) The triangle inequality")


@pytest.mark.slow
def test_a_chapter_runs_in_a_fresh_kernel_against_a_wheel(notebooks, tmp_path):
    import nbclient

    source = tmp_path / "source"  # a copy, so that the build leaves no build/ here
    shutil.copytree(
        ROOT / "rcutil", source / "rcutil", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(source),
        ],
        check=True,
    )
    (wheel,) = wheels.glob("rcutil-*.whl")
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
    )
    nb = nbformat.read(notebooks / "model.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import rcutil\nprint(rcutil.__file__)"))
    work = tmp_path / "work"
    work.mkdir()
    env = {
        "PYTHONPATH": str(site),
        "RCUTIL_PROFILE": "ci",
        "RCUTIL_TORCH_THREADS": "1",
        "RCUTIL_RESULTS_DIR": str(tmp_path / "results"),
    }
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        nbclient.NotebookClient(
            nb,
            timeout=600,
            kernel_name="python3",
            resources={"metadata": {"path": str(work)}},
        ).execute()
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    printed = nb.cells[-1].outputs[0]["text"].strip()
    assert Path(printed).is_relative_to(site), (
        printed
    )  # the wheel's copy, not the source tree


def test_a_corporate_author_is_cited_whole(tmp_path):
    bib = tmp_path / "refs.bib"
    bib.write_text(
        "@misc{inst,\n  author = {{Max Planck Institute for Biogeochemistry}},\n"
        "  year = {2016}\n}\n"
        "@misc{two,\n  author = {Qin, Zhen and Zhou, Jinxin},\n  year = {2025}\n}\n"
        "@misc{many,\n  author = {Chollet, Fran{\\c{c}}ois and others},\n"
        "  year = {2020}\n}\n"
    )
    cited = build_notebooks.read_bib(bib)
    assert cited["inst"] == ("Max Planck Institute for Biogeochemistry", "2016")
    assert cited["two"] == ("Qin and Zhou", "2025")
    assert cited["many"] == ("Chollet et al.", "2020")


def test_the_notebook_carries_the_outputs_of_the_build(tmp_path):
    import jupytext
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    md = ROOT / "book" / "model.md"
    executed = jupytext.read(md)
    code = [c for c in executed.cells if c.cell_type == "code"]
    new = nbformat.v4
    for i, cell in enumerate(code):
        cell.outputs = [
            new.new_output("stream", name="stdout", text=f"cell {i}\n"),
            new.new_output("stream", name="stderr", text="progress\n"),
            new.new_output(
                "display_data",
                data={"application/papermill.record/text/plain": "1"},
                metadata={"scrapbook": {"name": f"g{i}"}},
            ),
        ]
    cache = tmp_path / "cache"
    get_cache(str(cache)).cache_notebook_bundle(
        CacheBundleIn(executed, str(md)), check_validity=False
    )
    nb = build_notebooks.convert(md, "https://x/y", COMMIT, executed=cache)
    outputs = [c.outputs for c in nb.cells[1:] if c.cell_type == "code"]
    assert [o[0]["text"] for o in outputs] == [f"cell {i}\n" for i in range(len(code))]
    assert all(len(o) == 1 for o in outputs)  # no progress bar, no glue record
    # a chapter whose code changed since it was executed has no outputs to take
    code[0].source += "\n# changed"
    stale = tmp_path / "stale"
    get_cache(str(stale)).cache_notebook_bundle(
        CacheBundleIn(executed, str(md)), check_validity=False
    )
    with pytest.raises(build_notebooks.NotExecuted, match="make execute"):
        build_notebooks.convert(md, "https://x/y", COMMIT, executed=stale)
