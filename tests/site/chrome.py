"""The browser of the site test: the Chrome or Chromium this machine has, with a
matching driver.

    python tests/site/chrome.py            # print the browser and driver, or what to
    install python tests/site/chrome.py --install  # the same, installing Debian's
    packages when missing

The browser is ``$CHROME`` when set, else the first of ``chromium``,
``chromium-browser``, ``google-chrome``, ``google-chrome-stable`` on the PATH (and, on
macOS, the usual applications) that answers ``--version``: Ubuntu's ``chromium``
packages are stubs of a snap and do not. The driver is ``$CHROMEDRIVER`` when set, else
``chromedriver`` on the PATH, else the one GitHub's runners name in
``$CHROMEWEBDRIVER``. Browser and driver must share their major version. Nothing is
downloaded (the test must run offline): with ``--install``, Debian's ``chromium`` and
``chromium-driver`` are installed through apt on Debian only; anywhere else a missing
browser is one line that says what to install.

Standard library only, so that the Makefile can run it before any environment exists.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
MAC_APPS = (
    "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
    "/Applications/Chromium.app/Contents/MacOS/Chromium",
)
DEBIAN_PACKAGES = ("chromium", "chromium-driver")
WHAT_TO_INSTALL = (
    "install Google Chrome or Chromium and the chromedriver of the same version "
    "(Debian: apt-get install chromium chromium-driver; Ubuntu: Google Chrome from "
    "google.com/chrome and chromedriver from "
    "googlechromelabs.github.io/chrome-for-testing; "
    "macOS: brew install --cask google-chrome chromedriver), or set CHROME and "
    "CHROMEDRIVER "
    "to their paths"
)


class BrowserNotFound(RuntimeError):
    """No usable Chrome or Chromium with a matching chromedriver; the message says what
    to install."""


def version(program: str) -> tuple[int, str] | None:
    """``(major version, first line)`` of ``program --version``, or ``None`` if it gives
    none."""
    try:
        proc = subprocess.run(
            [program, "--version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"(\d+)\.\d+\.\d+", proc.stdout)
    if proc.returncode != 0 or match is None:
        return None
    return int(match.group(1)), proc.stdout.strip().splitlines()[0]


def _candidates(env: Mapping[str, str], names, extra=()) -> list[str]:
    path = env.get("PATH", os.defpath)
    found = [shutil.which(name, path=path) for name in names]
    return list(dict.fromkeys(p for p in [*found, *extra] if p and Path(p).is_file()))


def find_chrome(env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """``(browser, chromedriver)`` paths of the same major version;
    :class:`BrowserNotFound` else."""
    env = os.environ if env is None else env
    if env.get("CHROME"):
        browsers = [env["CHROME"]]
    else:
        browsers = _candidates(
            env, BROWSERS, MAC_APPS if sys.platform == "darwin" else ()
        )
    if env.get("CHROMEDRIVER"):
        drivers = [env["CHROMEDRIVER"]]
    else:
        web = (
            [str(Path(env["CHROMEWEBDRIVER"]) / "chromedriver")]
            if env.get("CHROMEWEBDRIVER")
            else []
        )
        drivers = _candidates(env, ("chromedriver",), web)
    working = [(b, v) for b in browsers if (v := version(b))]
    if not working:
        looked = (
            f"CHROME={env['CHROME']} does not run"
            if env.get("CHROME")
            else f"none of {', '.join(BROWSERS)} runs here"
        )
        raise BrowserNotFound(f"no Chrome or Chromium ({looked}): {WHAT_TO_INSTALL}")
    usable = [(d, v) for d in drivers if (v := version(d))]
    if not usable:
        raise BrowserNotFound(
            f"{working[0][1][1]} is at {working[0][0]} but no chromedriver runs here: "
            f"{WHAT_TO_INSTALL}"
        )
    for browser, (major, _) in working:
        for driver, (driver_major, _) in usable:
            if major == driver_major:
                return browser, driver
    (browser, (major, _)), (driver, (driver_major, _)) = working[0], usable[0]
    raise BrowserNotFound(
        f"{browser} is version {major} but {driver} is chromedriver {driver_major}: "
        f"install the chromedriver of version {major}, or set CHROMEDRIVER to it"
    )


def is_debian(os_release: Path = Path("/etc/os-release")) -> bool:
    """Whether this is Debian itself (not Ubuntu, whose apt chromium is a stub of a
    snap)."""
    try:
        text = os_release.read_text()
    except OSError:
        return False
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    return fields.get("ID", "").strip().strip('"') == "debian"


def ensure_chrome(
    env: Mapping[str, str] | None = None,
    *,
    os_release: Path = Path("/etc/os-release"),
    run: Callable = subprocess.run,
) -> tuple[str, str]:
    """:func:`find_chrome`, after installing Debian's packages through apt when on
    Debian."""
    env = os.environ if env is None else env
    try:
        return find_chrome(env)
    except BrowserNotFound:
        apt = shutil.which("apt-get", path=env.get("PATH", os.defpath))
        if not (is_debian(os_release) and apt):
            raise
    sudo = (
        []
        if os.geteuid() == 0
        else [shutil.which("sudo", path=env.get("PATH", os.defpath)) or "sudo"]
    )
    apt_env = {**env, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        [*sudo, apt, "update", "-qq"],
        [*sudo, apt, "install", "-y", "-qq", *DEBIAN_PACKAGES],
    ):
        if run(command, env=apt_env).returncode != 0:
            raise BrowserNotFound(
                f"`{' '.join(command)}` failed: install {' '.join(DEBIAN_PACKAGES)} "
                f"as root, then run again"
            )
    return find_chrome(env)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        browser, driver = ensure_chrome() if "--install" in argv else find_chrome()
    except BrowserNotFound as exc:
        print(f"site test: {exc}", file=sys.stderr)
        return 1
    print(f"site test: browser {browser}, driver {driver}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
