"""scripts/execute_chapters.py refuses, in one line and before any chapter runs, a
number of chapters at a time that is not 1 to four per core ($RCUTIL_JOBS or --jobs)
and a chapter file that does not exist."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rcutil import env

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "execute_chapters.py"


def execute(tmp_path, *args: str, **environ: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--cache", str(tmp_path / "cache"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **environ},
    )


def one_line(proc: subprocess.CompletedProcess, *words: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


@pytest.mark.parametrize("jobs", ["abc", "-1", "0", "1.5", str(4 * env.cores() + 1)])
def test_a_bad_number_of_jobs_is_refused(tmp_path, jobs):
    one_line(
        execute(tmp_path, "book/model.md", RCUTIL_JOBS=jobs),
        f"RCUTIL_JOBS='{jobs}'",
        "whole number from 1 to",
    )
    assert not (tmp_path / "cache").exists()


def test_a_bad_jobs_option_is_refused(tmp_path):
    one_line(execute(tmp_path, "--jobs", "0", "book/model.md"), "--jobs 0", "give 1 to")


def test_a_missing_chapter_is_named(tmp_path):
    one_line(
        execute(tmp_path, "book/model.md", "book/nope.md"),
        "no chapter file book/nope.md",
    )
    assert not (tmp_path / "cache").exists()
