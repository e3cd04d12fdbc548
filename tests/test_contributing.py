"""Following CONTRIBUTING.md adds a chapter in three places: a package in
rcutil/experiments (its science and its verdicts), a chapter in book/ and a line in
_toc.yml. The templates are taken from CONTRIBUTING.md itself, so the page and the code
cannot drift apart."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rcutil import experiments, fingerprint, report
from rcutil.__main__ import main

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = re.compile(
    r"<!-- template: (?P<path>\S+) "
    r"-->\n(?P<fence>`{3,})\w*\n(?P<body>.*?)\n(?P=fence)\n",
    re.S,
)


def templates() -> dict[str, str]:
    """path -> text of every template in CONTRIBUTING.md."""
    found = {
        m["path"]: m["body"] + "\n"
        for m in TEMPLATE.finditer((ROOT / "CONTRIBUTING.md").read_text())
    }
    assert set(found) == {*PACKAGE, "book/my_chapter.md", "_toc.yml"}, sorted(found)
    return found


#: The package of the new experiment: its science and its verdicts.
PACKAGE = (
    "rcutil/experiments/my_chapter/__init__.py",
    "rcutil/experiments/my_chapter/verdicts.py",
)


def write_package(experiments_folder: Path) -> None:
    """The package's two templates, written into ``experiments_folder``."""
    found = templates()
    for rel in PACKAGE:
        path = experiments_folder / Path(rel).relative_to("rcutil/experiments")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(found[rel])


@pytest.fixture
def with_new_module(tmp_path, monkeypatch):
    """rcutil as a contributor leaves it after step 1: one more package in
    rcutil/experiments."""
    folder = tmp_path / "experiments"
    write_package(folder)
    monkeypatch.setattr(experiments, "__path__", [*experiments.__path__, str(folder)])
    monkeypatch.setenv("RCUTIL_RESULTS_DIR", str(tmp_path / "results"))
    experiments.registry.cache_clear()
    yield experiments.load("my-chapter")
    experiments.registry.cache_clear()
    for name in (
        "rcutil.experiments.my_chapter.verdicts",
        "rcutil.experiments.my_chapter",
    ):
        sys.modules.pop(name, None)


def test_the_registry_the_cli_and_the_report_pick_up_a_new_module(
    with_new_module, tmp_path, monkeypatch, capsys
):
    module = with_new_module
    entries = experiments.registry()
    assert (
        experiments.entry(module).stem == "my_chapter"
        and "my-chapter" in experiments.available()
    )

    assert (
        main(
            [
                "my-chapter",
                "--profile",
                "ci",
                "--out",
                str(tmp_path / "out"),
                "--no-progress",
            ]
        )
        == 0
    )
    written = json.loads((tmp_path / "out" / "my_chapter.json").read_text())
    assert written["experiment"] == "my_chapter"
    assert [r["beta"] for r in written["result"]["runs"]] == [0.0, 1.0]
    assert written["result"]["settings"]["profile"] == "ci"
    assert not any(".verdicts" in key for key in fingerprint.science_code(module))

    # the report gathers every experiment; the others' results are not what this test is
    # about
    for e in entries:
        if e.name != "my-chapter":
            monkeypatch.setattr(
                experiments.verdicts(e.name), "claims", lambda result: []
            )
    real_cached = experiments.cached
    monkeypatch.setattr(
        experiments,
        "cached",
        lambda name, profile=None, **kw: (
            real_cached(name, profile, **kw) if name == "my-chapter" else None
        ),
    )
    rows = report.claims(report.gather("ci"))
    assert [r.key for r in rows] == ["my-chapter"] and rows[
        0
    ].verdict == report.REPRODUCED
    assert "{ref}`my-chapter <my-chapter>`" in report.render(rows, brief=True)


def test_the_book_lists_each_experiment_chapter_once_in_book_order():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]] + [
        c["file"] for part in toc["parts"] for c in part["chapters"]
    ]
    labels = {}
    for f in files:
        found = re.findall(r"^\(([\w-]+)\)=\s*$", (ROOT / f"{f}.md").read_text(), re.M)
        labels[found[0] if found else f] = f
    chapters = [e.chapter for e in experiments.registry()]
    missing = [c for c in chapters if c not in labels]
    assert not missing, (
        f"experiments whose chapter label is in no chapter of _toc.yml: {missing}"
    )
    in_toc_order = [c for c in labels if c in chapters]
    assert in_toc_order == chapters, (
        "the registry's order differs from the order of _toc.yml"
    )
    notebooks = {
        p.stem
        for p in (ROOT / "book").glob("*.md")
        if "format_name: myst" in p.read_text()[:500]
    }
    listed = {Path(f).name for f in files}
    assert notebooks <= listed, (
        f"chapters missing from _toc.yml: {sorted(notebooks - listed)}"
    )


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_a_book_with_the_new_chapter_executes_and_builds(tmp_path):
    """Steps 1 to 3 on a copy of the package and a small book: `make execute build` runs
    the template chapter, whose literalinclude, equation, glue and claim all resolve."""
    book = tmp_path / "book"
    shutil.copytree(
        ROOT / "rcutil", book / "rcutil", ignore=shutil.ignore_patterns("__pycache__")
    )
    found = templates()
    write_package(book / "rcutil" / "experiments")
    (book / "book").mkdir()
    (book / "book" / "my_chapter.md").write_text(found["book/my_chapter.md"])
    for name in ("references.bib",):
        shutil.copy(ROOT / "book" / name, book / "book" / name)
    for name in ("_ext", "_static"):
        shutil.copytree(ROOT / "book" / name, book / "book" / name)
    shutil.copy(ROOT / "_config.yml", book / "_config.yml")
    (book / "book" / "index.md").write_text("# A small book\n")
    (book / "_toc.yml").write_text(
        "format: jb-book\nroot: book/index\nparts:\n  - caption: New\n"
        "    chapters:\n" + found["_toc.yml"]
    )
    env = dict(
        os.environ, PYTHONPATH=str(book), RCUTIL_RESULTS_DIR=str(tmp_path / "results")
    )
    proc = subprocess.run(
        [sys.executable, "-c", "import rcutil; print(rcutil.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )  # as in a chapter's kernel
    assert proc.stdout.strip() == str(book / "rcutil" / "__init__.py"), (
        proc.stdout + proc.stderr
    )
    proc = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "execute", "build", f"BOOK_ROOT={book}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    html = (
        book / "_build" / "ci" / "_build" / "html" / "book" / "my_chapter.html"
    ).read_text()
    text = re.sub(r"<[^>]+>", "", html)
    assert "def run(settings" in text  # the literalinclude
    assert 'id="equation-my-chapter-gd"' in html  # the numbered equation
    assert re.search(r"is at most\s+0\.\d{3}\s+of", text), "the glued number"
