"""The README's layout table names every top-level folder and every module of rcutil,
and nothing that does not exist."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def layout_paths() -> set[str]:
    """The paths in the first column of the README's layout table."""
    text = (ROOT / "README.md").read_text()
    table = text[text.index("## Layout") :]
    paths = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            paths.update(p.rstrip("/") for p in re.findall(r"`([^`]+)`", first))
    return paths


def tracked_files() -> list[str]:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    proc = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"not a git checkout: {proc.stderr.strip()}")
    return proc.stdout.splitlines()


def test_every_top_level_folder_and_rcutil_module_is_in_the_layout_table():
    files = tracked_files() + [
        str(p.relative_to(ROOT)) for p in (ROOT / "rcutil").glob("*.py")
    ]
    folders = {f.split("/")[0] for f in files if "/" in f}
    modules = {
        f
        for f in files
        if re.fullmatch(r"rcutil/[^/]+\.py", f) and not f.endswith("__init__.py")
    }
    missing = sorted((folders | modules | {"rcutil/experiments"}) - layout_paths())
    assert not missing, f"README.md's layout table lacks a row for {missing}"


def test_the_layout_table_names_nothing_that_does_not_exist():
    gone = sorted(p for p in layout_paths() if not (ROOT / p).exists())
    assert not gone, f"README.md's layout table names {gone}, which do not exist"
