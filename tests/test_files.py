"""rcutil.files: a lock that says what it waits for and gives up in one line, writes
that are whole or absent, and the leftovers of a killed writer removed."""

import errno
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from rcutil import env, files


def hold(lock_of, seconds: float) -> subprocess.Popen:
    """Another process that holds the lock of ``lock_of`` for ``seconds``; returns once
    it holds it."""
    code = textwrap.dedent(
        f"""
        import sys, time
        from rcutil import files
        with files.locked({str(lock_of)!r}):
            print("held", flush=True)
            time.sleep({seconds})
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_lock_wait_says_what_it_waits_for_and_ends_at_its_limit(
    tmp_path, monkeypatch, capsys
):
    target = tmp_path / "r.json"
    holder = hold(target, 30)
    monkeypatch.setattr(files, "LOCK_SPEAK_S", 0.2)
    monkeypatch.setenv("RCUTIL_LOCK_TIMEOUT", "1")
    try:
        with pytest.raises(TimeoutError, match=r"\.r\.json\.lock") as err:
            with files.locked(target):
                pytest.fail("the lock was taken while another process held it")
    finally:
        holder.kill()
        holder.wait()
    assert "RCUTIL_LOCK_TIMEOUT" in str(err.value) and f"pid {holder.pid}" in str(
        err.value
    )
    err_text = capsys.readouterr().err
    assert err_text.count("\n") == 1 and "waiting for" in err_text
    assert str(files.lock_path(target)) in err_text and f"pid {holder.pid}" in err_text


def test_a_lock_is_free_once_its_holder_is_gone(tmp_path):
    target = tmp_path / "r.json"
    holder = hold(target, 30)
    threading.Timer(0.3, holder.kill).start()  # the system frees a killed one's lock
    start = time.monotonic()
    with files.locked(target):
        assert time.monotonic() - start < 5
    holder.wait()


def test_a_lock_timeout_that_is_not_a_number_names_the_timeout(tmp_path, monkeypatch):
    monkeypatch.setenv("RCUTIL_LOCK_TIMEOUT", "abc")
    with pytest.raises(env.EnvError, match="RCUTIL_LOCK_TIMEOUT='abc'") as err:
        with files.locked(tmp_path / "r.json"):
            pass
    assert "seconds to wait for a lock" in str(err.value)
    assert "cores" not in str(err.value)
    assert list(tmp_path.iterdir()) == [], "nothing was created"


def test_a_lock_file_that_cannot_be_written_names_it_and_the_fix(tmp_path, monkeypatch):
    real_open = open

    def full_open(file, mode="r", *args, **kwargs):
        if "w" in mode and str(file).endswith(".lock"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr("builtins.open", full_open)
    with pytest.raises(files.WriteError, match=r"\.r\.json\.lock") as err:
        with files.locked(tmp_path / "r.json", fix="point X at another folder"):
            pytest.fail("the block ran")
    assert "No space left on device" in str(err.value)
    assert "point X at another folder" in str(err.value)
    # and the lock is free again
    monkeypatch.undo()
    with files.locked(tmp_path / "r.json"):
        pass


def test_a_staged_write_is_whole_or_absent(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), files.staged(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("the writer fails")
    assert target.read_text() == "old" and files.leftovers(target) == []
    with files.staged(target) as tmp:
        tmp.write_text("new")
    assert target.read_text() == "new" and files.leftovers(target) == []
    assert oct(target.stat().st_mode & 0o777) == oct(0o644)


def test_a_failed_rename_names_the_target(tmp_path, monkeypatch):
    def refuse(src, dst):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(files.WriteError, match="f.txt.*Read-only") as err:
        files.write_text(tmp_path / "f.txt", "x")
    assert "choose a folder" in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_leftovers_are_the_temporary_files_of_that_target_only(tmp_path):
    target = tmp_path / "model.json"
    mine = [tmp_path / ".model.json.a1.tmp", tmp_path / ".model.json.b2.link.tmp"]
    others = [tmp_path / ".model.json.lock", tmp_path / ".other.json.c3.tmp"]
    for path in mine + others:
        path.write_text("")
    assert files.leftovers(target) == sorted(mine)
    files.remove_leftovers(target)
    assert sorted(tmp_path.iterdir()) == sorted(others)
