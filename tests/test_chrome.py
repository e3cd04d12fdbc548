"""tests/site/chrome.py, the site test's browser finder: the Chrome or Chromium the
machine has with a chromedriver of its version; apt on Debian only; otherwise one line
that says what to install."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_chrome():
    spec = importlib.util.spec_from_file_location(
        "site_chrome", ROOT / "tests" / "site" / "chrome.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


chrome = _load_chrome()


def fake_program(folder: Path, name: str, output: str, rc: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\necho '{output}'\nexit {rc}\n")
    path.chmod(0o755)
    return path


def test_uses_the_chrome_the_machine_has_with_its_driver(tmp_path):
    bin_ = tmp_path / "bin"
    fake_program(
        bin_,
        "chromium-browser",
        "Command requires the chromium snap to be installed",
        rc=1,
    )
    chrome_ = fake_program(bin_, "google-chrome", "Google Chrome 131.0.6778.85")
    driver = fake_program(
        tmp_path / "webdriver", "chromedriver", "ChromeDriver 131.0.6778.85 (abc)"
    )
    env = {"PATH": str(bin_), "CHROMEWEBDRIVER": str(driver.parent)}  # GitHub's runners
    assert chrome.find_chrome(env) == (str(chrome_), str(driver))


def test_a_driver_of_another_version_is_named(tmp_path):
    bin_ = tmp_path / "bin"
    fake_program(bin_, "chromium", "Chromium 156.0.8078.114 built on Debian")
    fake_program(bin_, "chromedriver", "ChromeDriver 120.0.6099.71")
    with pytest.raises(chrome.BrowserNotFound, match="chromedriver 120") as err:
        chrome.find_chrome({"PATH": str(bin_)})
    assert "install the chromedriver of version 156" in str(err.value)


def test_off_debian_no_apt_and_one_line_saying_what_to_install(tmp_path):
    bin_ = tmp_path / "bin"
    fake_program(bin_, "apt-get", "apt 2.4")
    (tmp_path / "os-release").write_text('NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\n')
    ran = []
    with pytest.raises(chrome.BrowserNotFound) as err:
        chrome.ensure_chrome(
            {"PATH": str(bin_)}, os_release=tmp_path / "os-release", run=ran.append
        )
    assert ran == [], "apt is used on Debian only"
    msg = str(err.value)
    assert "\n" not in msg and "install Google Chrome or Chromium" in msg
    assert "CHROMEDRIVER" in msg
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "site" / "chrome.py")],
        capture_output=True,
        text=True,
        env={"PATH": str(bin_)},
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    assert "no Chrome or Chromium" in lines[0] and "install" in lines[0]


def test_on_debian_apt_installs_chromium_and_its_driver(tmp_path):
    bin_ = tmp_path / "bin"
    fake_program(bin_, "apt-get", "apt 2.6")
    (tmp_path / "os-release").write_text(
        'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'
    )
    ran = []

    def run(command, env):
        ran.append(command[-4:])
        if "install" in command:  # what apt would do
            fake_program(bin_, "chromium", "Chromium 156.0.8078.114")
            fake_program(bin_, "chromedriver", "ChromeDriver 156.0.8078.114")
        return subprocess.CompletedProcess(command, 0)

    found = chrome.ensure_chrome(
        {"PATH": str(bin_)}, os_release=tmp_path / "os-release", run=run
    )
    assert found == (str(bin_ / "chromium"), str(bin_ / "chromedriver"))
    assert ran[-1] == ["install", "-y", "-qq", "chromium", "chromium-driver"][-4:]
    assert len(ran) == 2
