"""The Makefile's arguments: PROFILE, NAME and CHAPTERS are checked before any recipe
runs or creates anything, and quoted in the recipes. Run on a copy of the Makefile
whose programs (.venv/bin/python, jupyter-book, ...) only log their arguments."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ("python", "jupyter-book", "ruff", "nbqa", "jupyter")
pytestmark = pytest.mark.skipif(
    shutil.which("make") is None, reason="make is not installed"
)


@pytest.fixture
def project(tmp_path):
    """The Makefile, the chapter files (empty), an installed .venv of stand-ins that
    log to ``log``, and what a chapter build of model left (``_build/.../keep``)."""
    root = tmp_path / "project"
    (root / "book").mkdir(parents=True)
    shutil.copy(ROOT / "Makefile", root)
    for md in (ROOT / "book").glob("*.md"):
        (root / "book" / md.name).write_text("")
    for name in ("requirements.txt", "pyproject.toml"):
        shutil.copy(ROOT / name, root)
    bin_ = root / ".venv" / "bin"
    bin_.mkdir(parents=True)
    for program in PROGRAMS:
        (bin_ / program).write_text('#!/bin/sh\necho "${0##*/} $*" >> "$MAKE_LOG"\n')
        (bin_ / program).chmod(0o755)
    later = time.time() + 60
    (root / ".venv" / ".installed").touch()
    os.utime(root / ".venv" / ".installed", (later, later))
    keep = root / "_build" / "ci" / "chapter" / "model" / "keep"
    keep.parent.mkdir(parents=True)
    keep.write_text("an earlier build")
    return root


def make(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "PROFILE",
            "NAME",
            "CHAPTERS",
            "OUT",
            "BOOK_ROOT",
            "VENV",
            "MAKEFLAGS",
            "MFLAGS",
        )
    }
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(root), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, "MAKE_LOG": str(root / "log"), **env},
    )


def ran(root: Path) -> list[str]:
    log = root / "log"
    return log.read_text().splitlines() if log.exists() else []


def built(root: Path) -> list[str]:
    """Every path under _build but the earlier build of model and its folders."""
    keep = root / "_build" / "ci" / "chapter" / "model" / "keep"
    return sorted(
        str(p.relative_to(root))
        for p in (root / "_build").rglob("*")
        if p != keep and not keep.is_relative_to(p)
    )


def refused(proc: subprocess.CompletedProcess, *words: str) -> str:
    """A make that stopped with one line of error holding ``words``."""
    assert proc.returncode != 0, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "***" in lines[0], proc.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def nothing_happened(root: Path) -> None:
    assert ran(root) == [], "a program ran"
    assert not (root / "X").exists(), "an injected command ran"
    assert (root / "_build" / "ci" / "chapter" / "model" / "keep").exists(), (
        "the earlier build was removed"
    )
    assert built(root) == [], "something was created"


# ----------------------------------------------------------------------- NAME
def test_a_chapter_name_runs_that_chapter_with_its_quoted_paths(project):
    """The stand-ins do run: the checks below can see a command that runs. The page is
    built afresh: Sphinx's doctree of an earlier build would keep its outputs."""
    stale = project / "_build/ci/chapter/model/_build/.doctrees/book/model.doctree"
    stale.parent.mkdir(parents=True)
    stale.write_text("an older run's outputs")
    proc = make(project, "chapter", "NAME=model")
    assert proc.returncode == 0, proc.stderr
    assert not stale.exists()
    assert (
        "python scripts/execute_chapters.py --cache _build/ci/chapter/model/"
        "_build/.jupyter_cache book/model.md"
    ) in ran(project)
    toc = project / "_build" / "ci" / "chapter" / "model" / "_toc.yml"
    assert "root: book/model\n" in toc.read_text()


@pytest.mark.parametrize(
    "name",
    [
        "model;touch X",
        "model;touch${IFS}X",
        "model`touch X`",
        "model&&touch X",
        "model|touch X",
        "../book/model",
        "model'",
        "model>X",
    ],
)
def test_a_name_with_shell_metacharacters_runs_nothing(project, name):
    line = refused(make(project, "chapter", f"NAME={name}"), "NAME=")
    assert "NAME is a file name in book/ without .md" in line
    nothing_happened(project)


def test_a_name_of_two_words_is_refused(project):
    refused(
        make(project, "chapter", "NAME=model extra"),
        "NAME='model extra'",
        "not one chapter",
    )
    nothing_happened(project)


def test_an_unknown_or_missing_name_lists_the_chapters(project):
    line = refused(make(project, "chapter", "NAME=modle"), "no chapter book/modle.md")
    assert " model " in line and " sst2" in line
    refused(make(project, "chapter"), "usage: make chapter NAME=sst2")
    nothing_happened(project)


# ----------------------------------------------------------------------- PROFILE
@pytest.mark.parametrize(
    "target", ["book", "test", "execute", "build", "timings", "chapter", "site"]
)
def test_an_unknown_profile_is_refused_before_anything_is_created(project, target):
    line = refused(
        make(project, target, "PROFILE=bogus", "NAME=model"),
        "PROFILE=bogus",
        "ci book paper",
    )
    assert "(command line)" in line
    nothing_happened(project)
    assert not (project / "_build" / "bogus").exists()


def test_a_profile_of_two_words_or_from_the_environment_is_named(project):
    refused(
        make(project, "execute", "PROFILE=ci book"),
        "PROFILE='ci book'",
        "not one profile",
    )
    line = refused(make(project, "build", PROFILE="default"), "PROFILE=default")
    assert "(environment)" in line
    nothing_happened(project)


def test_each_profile_runs_with_its_own_folder(project):
    for profile in ("ci", "book", "paper"):
        assert make(project, "execute", "build", f"PROFILE={profile}").returncode == 0
    log = ran(project)
    for profile in ("ci", "book", "paper"):
        assert (
            f"jupyter-book build -W -n --keep-going --path-output ./_build/{profile} ."
        ) in log


# ----------------------------------------------------------------------- CHAPTERS
def test_chapters_must_name_files(project):
    refused(
        make(project, "execute", "CHAPTERS=book/model.md;touch X"),
        "CHAPTERS names no file",
    )
    refused(
        make(project, "execute", "CHAPTERS=book/model.md book/nope.md"), "book/nope.md"
    )
    nothing_happened(project)
    assert make(project, "execute", "CHAPTERS=book/mod*.md").returncode == 0
    assert ran(project)[-1].endswith(
        "--cache ./_build/ci/_build/.jupyter_cache -- book/model.md"
    )


@pytest.mark.parametrize(
    "name", ["x';date>X;'.md", "reader's.md", "x`date>X`.md", 'x";date>X;".md']
)
def test_a_chapter_named_with_shell_syntax_is_passed_as_a_name(project, name):
    """A real file whose name holds quotes or commands reaches the runner as that name;
    nothing in it runs."""
    (project / "book" / name).write_text("")
    proc = make(project, "execute", f"CHAPTERS=book/{name}")
    assert proc.returncode == 0, proc.stderr
    assert not (project / "X").exists(), "an injected command ran"
    assert ran(project)[-1].endswith(f" -- book/{name}")


def test_chapters_outside_book_are_refused(project, tmp_path):
    outside = tmp_path / "outside.md"
    outside.write_text("")
    (project / "book" / "notes.txt").write_text("")
    for chapters in (str(outside), "book/../Makefile", "book/notes.txt"):
        line = refused(make(project, "execute", f"CHAPTERS={chapters}"), chapters)
        assert "not a .md file in ./book" in line
    nothing_happened(project)


def test_a_quote_in_book_root_is_refused(project, tmp_path):
    refused(make(project, "execute", f"BOOK_ROOT={tmp_path}/it's"), "holds a quote")
    nothing_happened(project)


# -------------------------------------------------------------------- the real Makefile
def test_each_profile_executes_and_builds_in_its_own_folder():
    for p, other in (("ci", "book"), ("book", "ci")):
        plan = subprocess.run(
            ["make", "-n", "-s", "-C", str(ROOT), "execute", "build", f"PROFILE={p}"],
            capture_output=True,
            text=True,
        ).stdout
        assert f"'./_build/{p}/_build/.jupyter_cache'" in plan, plan
        assert f"--path-output './_build/{p}'" in plan
        assert f"_build/{other}" not in plan and f"RCUTIL_PROFILE='{p}'" in plan


def test_the_browser_comes_from_the_finder():
    recipe = subprocess.run(
        ["make", "-n", "-s", "-C", str(ROOT), "browser-deps"],
        capture_output=True,
        text=True,
    ).stdout
    assert "tests/site/chrome.py --install" in recipe and "apt-get" not in recipe
    readme = (ROOT / "README.md").read_text()
    assert "CHROMEDRIVER" in readme and "chromium-driver" in readme
