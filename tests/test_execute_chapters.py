"""scripts/execute_chapters.py refuses, in one line and before any chapter runs, a
number of chapters at a time that is not 1 to four per core ($RCUTIL_JOBS or --jobs), a
chapter file that does not exist, and any bad RCUTIL_* variable or device; an error of
the package comes first in one line; Ctrl-C is one line and exit 130."""

import os
import signal
import subprocess
import sys
import time
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


@pytest.mark.parametrize(
    "environ, words",
    [
        ({"RCUTIL_DEVICE": "mps"}, ["device 'mps'", "use cpu"]),
        ({"RCUTIL_LOCK_TIMEOUT": "abc"}, ["RCUTIL_LOCK_TIMEOUT='abc'", "seconds"]),
    ],
    ids=["device", "variable"],
)
def test_a_bad_variable_or_device_is_one_line_before_any_chapter(
    tmp_path, environ, words
):
    """The runner checks every variable and the device (rcutil.entry, whose tests go
    through each) before any chapter starts."""
    one_line(execute(tmp_path, "book/model.md", **environ), "error:", *words)
    assert not (tmp_path / "cache").exists()


FRONT = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A chapter

```{code-cell} ipython3
%s
```
"""


def chapter(tmp_path, code: str, name: str = "page"):
    path = tmp_path / "book" / f"{name}.md"
    path.parent.mkdir(exist_ok=True)
    path.write_text(FRONT % code)
    return path


@pytest.mark.slow
def test_an_error_of_the_package_comes_first_in_one_line(tmp_path):
    """Two chapters, run side by side: one fails on the package's own error (its line
    first), the other on its own assertion (its traceback, as ever)."""
    ours = chapter(
        tmp_path, 'from rcutil import validate\nvalidate.positive_int("n", 0)', "ours"
    )
    other = chapter(tmp_path, 'assert 1 == 2, "a failing check"', "other")
    proc = execute(tmp_path, str(ours), str(other))
    assert proc.returncode == 1
    failed = {
        line.split()[1]: line
        for line in proc.stderr.splitlines()
        if line.startswith("FAILED ")
    }
    assert failed[str(ours)].endswith(
        "s: ValueError: n must be a positive integer, got 0"
    ), proc.stderr[:2000]
    assert failed[str(other)].endswith("s: ") and "a failing check" in proc.stderr


@pytest.mark.slow
def test_ctrl_c_while_a_chapter_runs_is_one_line_and_exit_130(tmp_path):
    started = tmp_path / "started"
    page = chapter(
        tmp_path,
        f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\n"
        "time.sleep(120)",
    )
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--cache", str(tmp_path / "cache"), str(page)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as a terminal makes
    )
    deadline = time.monotonic() + 120
    while not started.exists() and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole group
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert stderr.strip() == "scripts/execute_chapters.py: interrupted", stderr
