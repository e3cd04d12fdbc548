"""python -m rcutil: a run writes its sealed result; everything a user can get
wrong is one line on stderr, checked before the run where it can be, with no traceback
unless --debug; Ctrl-C exits with 130 and one line."""

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rcutil import __main__ as cli
from rcutil import entry, experiments, store
from rcutil.__main__ import main
from rcutil.profiles import settings_for


def one_line_error(proc, *words: str) -> str:
    """Assert a failed command (a ``CompletedProcess``, or ``(returncode, stderr)``)
    with exactly one line on stderr, no traceback, holding ``words``."""
    rc, stderr = (proc.returncode, proc.stderr) if hasattr(proc, "returncode") else proc
    lines = stderr.strip().splitlines()
    assert rc not in (0, None), stderr
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def command(*args: str, **env: str) -> subprocess.CompletedProcess:
    """``python -m rcutil ARGS`` in a fresh process, with ``env`` added."""
    return subprocess.run(
        [sys.executable, "-m", "rcutil", *args, "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )


@pytest.fixture
def no_run(monkeypatch):
    """The model experiment, with a run that fails the test if it starts."""
    module = experiments.load("model")
    monkeypatch.setattr(module, "run", lambda *a, **k: pytest.fail("the run started"))
    return module


@pytest.fixture(autouse=True)
def own_store(tmp_path_factory, monkeypatch):
    """Each test stores results in a folder of its own, never in the user's store."""
    monkeypatch.setenv("RCUTIL_RESULTS_DIR", str(tmp_path_factory.mktemp("store")))


@pytest.fixture
def quick_run(monkeypatch):
    """The model experiment, with a run that returns at once (a result with one GD run
    of losses [1.0])."""
    module = experiments.load("model")

    def run(settings, **kwargs):
        return module.Result(
            settings, {}, {}, {}, [], [module.GDRun(1.0, [1.0], [1.0], [1.0], [1.0])]
        )

    monkeypatch.setattr(module, "run", run)
    return module


def run_main(capsys, *args: str) -> tuple[int, str]:
    rc = main(["model", "--no-progress", *args])
    return rc, capsys.readouterr().err


def written_losses(path: Path) -> list[float]:
    return json.loads(path.read_text())["result"]["gd"][0]["loss"]


# ----------------------------------------------------------------------- a run
def test_model_experiment_writes_its_sealed_result(tmp_path):
    assert (
        main(["model", "--profile", "ci", "--out", str(tmp_path), "--no-progress"]) == 0
    )
    written = json.loads((tmp_path / "model.json").read_text())
    assert written["experiment"] == "model" and written["profile"] == "ci"
    assert {"torch", "numpy", "python"} <= set(written["versions"])
    assert written["result"]["settings"]["profile"] == "ci"
    assert store.unsealed(tmp_path / "model.json") == store.unsealed(
        store.stored_path(experiments.load("model"), "ci")
    )


def test_same_profile_same_numbers():
    module = experiments.load("model")
    settings = settings_for(module.SETTINGS, "ci")
    assert module.run(settings, progress=False) == module.run(settings, progress=False)


def test_a_read_only_result_file_is_replaced(tmp_path, quick_run, capsys):
    (tmp_path / "model.json").write_text("{}")
    (tmp_path / "model.json").chmod(0o444)
    assert run_main(capsys, "--out", str(tmp_path))[0] == 0
    assert written_losses(tmp_path / "model.json") == [1.0]


def test_profile_and_experiment_names_are_choices():
    proc = subprocess.run(
        [sys.executable, "-m", "rcutil", "model", "--profile", "huge"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "invalid choice: 'huge'" in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "rcutil", "nonsense"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
    with pytest.raises(ValueError, match="unknown experiment"):
        experiments.load("nonsense")


# ----------------------------------------------------------------------- --out
def test_an_empty_out_is_refused(tmp_path, no_run, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one_line_error(run_main(capsys, "--out", ""), "--out is empty", "--out out")
    one_line_error(run_main(capsys, "--out", "  "), "--out is empty")
    assert not list(tmp_path.iterdir())


def test_out_naming_a_file_fails_before_the_run(tmp_path, capsys, no_run):
    out = tmp_path / "out.txt"
    out.write_text("not a folder")
    one_line_error(
        run_main(capsys, "--out", str(out)), f"--out {out} is a file", "choose"
    )


@pytest.mark.parametrize("under", [False, True])
def test_out_as_a_broken_link_is_named(tmp_path, capsys, no_run, under):
    link = tmp_path / "results"
    link.symlink_to(tmp_path / "gone")
    out = link / "sub" if under else link
    line = one_line_error(
        run_main(capsys, "--out", str(out)), "which does not exist", "--out"
    )
    assert f"{link} is a link to {tmp_path / 'gone'}" in line
    assert "File exists" not in line


def test_out_under_a_file_names_the_file_in_the_way(tmp_path, capsys, no_run):
    (tmp_path / "afile").write_text("")
    line = one_line_error(
        run_main(capsys, "--out", str(tmp_path / "afile" / "sub")),
        "cannot be made a folder",
        "choose another --out",
    )
    assert f"{tmp_path / 'afile'} is a file" in line


def test_what_a_killed_write_left_in_out_is_removed_by_the_next_run(
    tmp_path, capsys, quick_run
):
    """A SIGKILL while the result file was written left a temporary file: the next
    run removes it (under the lock of that file, so never another run's)."""
    half = tmp_path / ".model.json.k1ll3d.tmp"
    half.write_text('{"half": ')
    assert run_main(capsys, "--out", str(tmp_path))[0] == 0
    assert not half.exists() and written_losses(tmp_path / "model.json") == [1.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".model.json.lock",
        "model.json",
    ]


@pytest.mark.parametrize(
    "variable, value, words",
    [
        ("RCUTIL_LOCK_TIMEOUT", "abc", ["RCUTIL_LOCK_TIMEOUT='abc'", "seconds"]),
        ("RCUTIL_RESULTS_CACHE", "maybe", ["RCUTIL_RESULTS_CACHE='maybe'", "1 or 0"]),
        ("RCUTIL_TORCH_THREADS", "0", ["RCUTIL_TORCH_THREADS='0'", "from 1 to"]),
    ],
)
def test_a_bad_variable_is_refused_before_out_is_created(
    tmp_path, capsys, no_run, monkeypatch, variable, value, words
):
    monkeypatch.setenv(variable, value)
    out = tmp_path / "new" / "out"
    line = one_line_error(run_main(capsys, "--out", str(out)), *words)
    if variable == "RCUTIL_LOCK_TIMEOUT":
        assert "cores" not in line
    assert not (tmp_path / "new").exists()


def test_out_that_cannot_be_written_fails_before_the_run(
    tmp_path, capsys, no_run, monkeypatch
):
    out = tmp_path / "locked"
    out.mkdir()
    out.chmod(0o555)
    if os.geteuid() == 0:  # root writes anywhere: deny as the file system would

        def deny(*args, **kwargs):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr("tempfile.TemporaryFile", deny)
    one_line_error(
        run_main(capsys, "--out", str(out / "sub")),
        "this user can write to",
        "choose another --out",
    )


def test_out_holding_a_folder_where_the_result_goes(tmp_path, capsys, no_run):
    (tmp_path / "model.json").mkdir()
    one_line_error(
        run_main(capsys, "--out", str(tmp_path)), "holds a folder model.json"
    )


def test_a_result_file_that_cannot_be_replaced_fails_before_the_run(
    tmp_path, capsys, no_run, monkeypatch
):
    """An immutable model.json: the rename at the end of the run would fail, so the
    run does not start. Simulated here (the file system refuses the link)."""
    (tmp_path / "model.json").write_text("{}")

    def refuse(src, dst):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", refuse)
    one_line_error(
        run_main(capsys, "--out", str(tmp_path)),
        "cannot be replaced",
        "model.json",
        "choose another --out",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.json"]


def test_a_result_file_of_another_user_in_a_sticky_folder_fails_before_the_run(
    tmp_path, capsys, no_run, monkeypatch
):
    """Linking works there but renaming onto the file does not (simulated)."""
    (tmp_path / "model.json").write_text("{}")

    def refuse(src, dst):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "replace", refuse)
    one_line_error(run_main(capsys, "--out", str(tmp_path)), "cannot be replaced")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.json"]


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("chattr") is None,
    reason="setting the immutable flag needs root and chattr",
)
def test_an_immutable_result_file_fails_before_the_run(tmp_path, capsys, no_run):
    target = tmp_path / "model.json"
    target.write_text("{}")
    if subprocess.run(["chattr", "+i", str(target)]).returncode != 0:
        pytest.skip("this file system has no immutable flag")
    try:
        one_line_error(
            run_main(capsys, "--out", str(tmp_path)), "cannot be replaced", "chattr -i"
        )
        assert sorted(p.name for p in tmp_path.iterdir()) == ["model.json"]
    finally:
        subprocess.run(["chattr", "-i", str(target)])


def test_a_replaceable_result_file_is_left_as_it_was_by_the_check(tmp_path):
    target = tmp_path / "model.json"
    target.write_text('{"kept": true}')
    inode = target.stat().st_ino
    cli.check_replaceable(target)
    assert target.read_text() == '{"kept": true}' and target.stat().st_ino == inode
    assert target.stat().st_nlink == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.json"]


def test_too_little_free_space_fails_before_the_run(
    tmp_path, capsys, no_run, monkeypatch
):
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(
        shutil, "disk_usage", lambda path: usage._replace(free=5 * 2**20)
    )
    out = tmp_path / "new" / "out"
    line = one_line_error(
        run_main(capsys, "--out", str(out)), "MiB free", "free some space"
    )
    assert f"--out {out} has 5.0 MiB free" in line
    assert not (tmp_path / "new").exists(), "the refused folder was left behind"


def test_a_full_disk_at_write_time_names_the_file(
    tmp_path, capsys, quick_run, monkeypatch
):
    def full(payload, path, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cli, "write_json", full)
    line = one_line_error(
        run_main(capsys, "--out", str(tmp_path)),
        "No space left on device",
        "free some space",
    )
    assert f"cannot write {tmp_path / 'model.json'}" in line


# ----------------------------------------------------------------------- other faults
def test_faults_in_a_fresh_process_are_one_line_without_traceback(tmp_path):
    one_line_error(
        command("model", "--out", str(tmp_path), RCUTIL_TORCH_THREADS="abc"),
        "python -m rcutil: error:",
        "RCUTIL_TORCH_THREADS='abc'",
    )
    one_line_error(
        command("model", "--device", "CPU", "--out", str(tmp_path)),
        "device 'CPU'",
        "lower case",
    )
    assert not list(tmp_path.iterdir()), "nothing was written"


def test_too_many_torch_threads_are_refused_at_once(tmp_path):
    """5000 threads hung torch and 100000 crashed it: both are refused in one line."""
    for n in ("5000", "100000"):
        one_line_error(
            command("model", "--out", str(tmp_path), RCUTIL_TORCH_THREADS=n),
            f"RCUTIL_TORCH_THREADS='{n}'",
            "whole number from 1 to",
        )
    assert not list(tmp_path.iterdir())


def test_a_device_torch_cannot_compute_on_fails_before_the_run(
    tmp_path, capsys, no_run, monkeypatch
):
    """A device that passes the name checks but fails a computation (as a CUDA build
    for other hardware does; here torch's meta device, whose values cannot be read)."""
    monkeypatch.setattr("rcutil.validate.device", lambda value: torch.device("meta"))
    line = one_line_error(
        run_main(capsys, "--out", str(tmp_path / "out")),
        "device 'meta' cannot run a computation",
        "use cpu",
    )
    assert "meta tensors" in line and not (tmp_path / "out").exists()


def test_debug_lets_the_error_through_with_its_traceback(tmp_path):
    with pytest.raises(ValueError, match="device 'CPU'"):
        main(["model", "--device", "CPU", "--out", str(tmp_path), "--debug"])


@pytest.mark.parametrize(
    "args, env, words",
    [
        (["--device", "cuda"], {}, ["device 'cuda' asked for", "use cpu"]),
        (["--device", "xla"], {}, ["device 'xla'", "use cpu"]),
        (["--device", "meta"], {}, ["device 'meta'", "use cpu"]),
        (["--estimate", "--device", "nonsense"], {}, ["device 'nonsense'"]),
        ([], {"RCUTIL_PROFILE": "huge"}, ["profile 'huge'", "ci, book, paper"]),
        (
            [],
            {"RCUTIL_DATA_DIR": "nowhere"},
            ["RCUTIL_DATA_DIR=", "does not exist", "unset it"],
        ),
        (
            [],
            {"RCUTIL_CACHE_DIR": "FILE", "RCUTIL_DATA_DIR": ""},
            ["RCUTIL_CACHE_DIR", "is a file"],
        ),
    ],
)
def test_faults_are_one_line_in_process(
    tmp_path, capsys, monkeypatch, no_run, args, env, words
):
    if "cuda" in args and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    (tmp_path / "FILE").write_text("")
    for key, value in env.items():
        monkeypatch.setenv(
            key, str(tmp_path / value) if value in ("FILE", "nowhere") else value
        )
    data_vars = {"RCUTIL_CACHE_DIR", "RCUTIL_DATA_DIR"}
    experiment = "sst2" if data_vars & set(env) else "model"
    rc = main([experiment, "--out", str(tmp_path / "out"), "--no-progress", *args])
    one_line_error((rc, capsys.readouterr().err), "python -m rcutil: error:", *words)


# ----------------------------------------------------------------------- Ctrl-C
def test_ctrl_c_while_torch_loads_is_one_line_and_exit_130(tmp_path):
    """A SIGINT that arrives inside ``import torch``: a stand-in torch package, first on
    the path, sends it to its own process."""
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(30)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "rcutil", "model", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 130
    assert one_line_error(proc) == "python -m rcutil: interrupted"
    assert not (tmp_path / "out").exists()


def loading_torch(proc: subprocess.Popen, timeout: float = 120) -> bool:
    """Wait until ``proc`` has mapped torch's library (it is inside ``import torch``);
    False if it ended first."""
    maps = Path(f"/proc/{proc.pid}/maps")
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if "libtorch" in maps.read_text():
                return True
        time.sleep(0.01)
    return False


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")
@pytest.mark.parametrize("after", [0.0, 1.0, 3.0])
def test_ctrl_c_once_torch_loads_or_later_is_one_line(tmp_path, after):
    """A real SIGINT while torch loads, and at moments after it: loading the
    experiments, checking, running."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rcutil",
            "model",
            "--out",
            str(tmp_path / "out"),
            "--no-progress",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert loading_torch(proc), proc.communicate()[1]
    time.sleep(after)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    written = (tmp_path / "out" / "model.json").is_file()
    if after and written and proc.returncode in (0, -signal.SIGINT):
        return  # it was faster than the signal: done, or exiting when it came
    assert proc.returncode == 130, stderr
    assert one_line_error((proc.returncode, stderr)) == "python -m rcutil: interrupted"


def test_ctrl_c_while_the_result_is_written_raises_and_leaves_no_file(
    tmp_path, capsys, quick_run, monkeypatch
):
    """Under python -m rcutil, Ctrl-C exits at once, except while the result file and
    the figures are written: there it raises, and the write removes its temporary
    file."""

    def interrupted_write(payload, path, **kwargs):
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        (tmp_path / ".model.json.part.tmp").write_text("{")
        try:
            raise KeyboardInterrupt
        finally:
            (tmp_path / ".model.json.part.tmp").unlink()

    monkeypatch.setattr(cli, "write_json", interrupted_write)
    outside = signal.signal(signal.SIGINT, entry._exit_on_interrupt)
    try:
        rc, err = run_main(capsys, "--out", str(tmp_path))
        assert signal.getsignal(signal.SIGINT) is entry._exit_on_interrupt
    finally:
        signal.signal(signal.SIGINT, outside)
    assert rc == 130 and err.strip() == "python -m rcutil: interrupted"
    assert [p.name for p in tmp_path.iterdir()] == [".model.json.lock"]


def test_ctrl_c_during_the_run_is_one_line_and_exit_130(tmp_path, capsys, monkeypatch):
    module = experiments.load("model")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(module, "run", interrupted)
    rc, err = run_main(capsys, "--out", str(tmp_path))
    assert rc == 130 and err.strip() == "python -m rcutil: interrupted"
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == []


def test_a_store_on_a_full_disk_is_one_line_and_leaves_no_out(
    tmp_path, capsys, quick_run, monkeypatch
):
    """The store's first write, its lock file, meets the full disk: one line naming the
    path and the fix, before any computing; the --out the run made is removed."""
    real_open = open

    def full_open(file, mode="r", *args, **kwargs):
        if "w" in mode and str(file).endswith(".lock") and "store" in str(file):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setenv("RCUTIL_RESULTS_DIR", str(tmp_path / "store"))
    monkeypatch.setattr("builtins.open", full_open)
    line = one_line_error(
        run_main(capsys, "--out", str(tmp_path / "out")),
        "No space left on device",
        str(tmp_path / "store"),
        "RCUTIL_RESULTS_DIR",
    )
    assert "Errno" not in line
    assert not (tmp_path / "out").exists()
