"""rcutil.entry and the package face: importing rcutil sets no thread count, installs
no signal handler and loads no torch; the entry points set the policy, pass it to a
kernel, and check every variable before any work."""

import os
import subprocess
import sys

import pytest

from rcutil import entry, env

FACE = """
import os, runpy, signal, sys, warnings
import rcutil
print("torch" in sys.modules, "numpy" in sys.modules)
print(os.environ.get("OPENBLAS_NUM_THREADS"), os.environ.get("OMP_NUM_THREADS"))
print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)
print(rcutil.Transformer.__module__, rcutil.settings_for.__module__)
import rcutil.__main__  # imported, not run: sets nothing either
from rcutil import entry
print(os.environ.get("OPENBLAS_NUM_THREADS"), entry.handles_interrupts())
sys.argv = ["rcutil", "no-such-experiment"]  # argparse exits, on stderr
try:  # run, the command line sets its policy
    runpy.run_module("rcutil", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
print(os.environ.get("OPENBLAS_NUM_THREADS"), entry.handles_interrupts())
print(repr(warnings.formatwarning("a\\nb", RuntimeWarning, "f.py", 1)))
"""


def test_importing_rcutil_has_no_side_effects_and_the_cli_sets_its_policy():
    """Not even with a thread count in the environment that the CLI would refuse."""
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
    }
    proc = subprocess.run(
        [sys.executable, "-c", FACE],
        capture_output=True,
        text=True,
        env={**environ, "RCUTIL_TORCH_THREADS": "abc"},
    )
    lines = proc.stdout.splitlines()
    assert lines[:6] == [
        "False False",
        "None None",
        "True",
        "rcutil.model rcutil.profiles",
        "None False",
        "1 True",
    ], proc.stdout + proc.stderr
    assert lines[-1] == "'python -m rcutil: warning: a b\\n'"  # one line
    with pytest.raises(AttributeError, match="no_such_name"):
        import rcutil

        rcutil.no_such_name  # noqa: B018


def test_a_kernel_gets_the_thread_policy_in_its_environment(monkeypatch):
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setenv("RCUTIL_TORCH_THREADS", "1")
    assert entry.kernel_environment() == {
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
    }
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    monkeypatch.delenv("RCUTIL_TORCH_THREADS")
    assert entry.kernel_environment() == {"OPENBLAS_NUM_THREADS": "4"}
    monkeypatch.setenv("RCUTIL_TORCH_THREADS", "many")
    with pytest.raises(env.EnvError, match="RCUTIL_TORCH_THREADS='many'"):
        entry.kernel_environment()


def test_the_environment_check_reads_every_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("RCUTIL_RESULTS_DIR", str(tmp_path / "results"))
    found = entry.check_environment(device="cpu")
    assert {
        "RCUTIL_PROFILE",
        "RCUTIL_TORCH_THREADS",
        "RCUTIL_LOCK_TIMEOUT",
        "RCUTIL_RESULTS_CACHE",
        "RCUTIL_DATA_DIR",
        "RCUTIL_CACHE_DIR",
        "RCUTIL_RESULTS_DIR",
        "RCUTIL_DEVICE",
    } == set(found)
    assert str(found["RCUTIL_DEVICE"]) == "cpu"
    assert not (tmp_path / "results").exists(), "a check creates nothing"


def test_the_check_of_the_default_device_loads_no_torch():
    code = (
        "import sys; from rcutil import entry; entry.check_environment(); "
        "print('torch' in sys.modules)"
    )
    environ = {k: v for k, v in os.environ.items() if k != "RCUTIL_DEVICE"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environ
    )
    assert proc.stdout.strip() == "False", proc.stderr


@pytest.mark.parametrize(
    "variable, value, words",
    [
        ("RCUTIL_DEVICE", "mps", ["device 'mps'", "use cpu"]),
        ("RCUTIL_DEVICE", "tpu", ["device 'tpu'", "use cpu"]),
        ("RCUTIL_LOCK_TIMEOUT", "abc", ["RCUTIL_LOCK_TIMEOUT='abc'", "seconds"]),
        ("RCUTIL_PROFILE", "huge", ["profile 'huge'"]),
    ],
)
def test_the_environment_check_names_the_value_and_the_fix(
    monkeypatch, variable, value, words
):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError) as err:
        entry.check_environment()
    for word in words:
        assert word in str(err.value), (word, str(err.value))
