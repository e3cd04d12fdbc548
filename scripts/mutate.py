"""Mutation testing of the theory code: ``make mutate`` (not part of ``make test``).

    python scripts/mutate.py [--modules rcutil/bounds.py ...] [--jobs 2] [--keep]

For each module of ``[tool.mutmut.modules]`` in pyproject.toml, mutmut 3 runs in its own work
folder ``_build/mutation/<module>/`` (a copy of ``rcutil/``, ``tests/`` and pyproject.toml whose
``[tool.mutmut]`` mutates that module only and selects that module's tests), so that each
module is tested by the tests chosen for it. mutmut runs, per mutant, only those of the
selected tests that call the mutated function, fastest first, and stops at the first failure.
Property tests draw fewer examples there (the hypothesis profile "mutation", tests/conftest.py);
stored experiment results are off.

It prints, per module, the mutants killed out of those tested, the score against the target
of ``[tool.mutmut.targets]``, and every survivor with its diff. Every survivor must be listed
with its reason in tests/mutation/SURVIVORS.md. The exit status is 1 when a score misses its
target or a survivor is not listed there, else 0. A summary goes to
``_build/mutation/summary.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "_build" / "mutation"
SURVIVORS = ROOT / "tests" / "mutation" / "SURVIVORS.md"
KILLED = ("killed", "timeout")          # a mutant that hangs the tests is caught too
NAME = re.compile(r"`(rcutil\.[\w.]+__mutmut_\d+)`")


def config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]


def module_pyproject(module: str, tests: list[str]) -> str:
    """pyproject.toml of the work folder: ``[tool.mutmut]`` for one module and its tests."""
    text = (ROOT / "pyproject.toml").read_text()
    start = text.index("[tool.mutmut]")
    rest = text[start + 1:]
    ends = [m.start() + start + 1 for m in re.finditer(r"^\[(?!tool\.mutmut)", rest, re.M)]
    end = ends[0] if ends else len(text)
    base = {k: v for k, v in config().items() if not isinstance(v, dict)}
    base.update(only_mutate=[module], pytest_add_cli_args_test_selection=tests)
    block = "[tool.mutmut]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in base.items()) + "\n"
    return text[:start] + block + text[end:]


def prepare(module: str, tests: list[str], keep: bool) -> Path:
    work = WORK / Path(module).stem
    if not keep and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    for folder in ("rcutil", "tests"):
        if (work / folder).exists():
            shutil.rmtree(work / folder)
        shutil.copytree(ROOT / folder, work / folder, ignore=shutil.ignore_patterns("__pycache__", "site"))
    (work / "pyproject.toml").write_text(module_pyproject(module, tests))
    return work


def mutmut(work: Path, *args: str, capture: bool = True) -> str:
    env = dict(os.environ, RCUTIL_RESULTS_CACHE="0", RCUTIL_RESULTS_DIR=str(work / "results"),
               RCUTIL_PROFILE="ci", OPENBLAS_NUM_THREADS="1", RCUTIL_TORCH_THREADS="1", PYTHONHASHSEED="0",
               MPLBACKEND="Agg", RCUTIL_HYPOTHESIS_PROFILE="mutation")
    exe = Path(sys.executable).with_name("mutmut")
    proc = subprocess.run([str(exe), *args], cwd=work, env=env, text=True,
                          stdout=subprocess.PIPE if capture else None, stderr=subprocess.STDOUT if capture else None)
    if proc.returncode != 0:
        raise SystemExit(f"mutmut {' '.join(args)} failed in {work} with exit status {proc.returncode}"
                         + (f":\n{proc.stdout[-3000:]}" if capture else ""))
    return proc.stdout if capture else ""


def statuses(work: Path) -> dict[str, str]:
    """mutant name -> status, from ``mutmut results --all true``."""
    out = {}
    for line in mutmut(work, "results", "--all", "true").splitlines():
        name, _, status = line.strip().partition(": ")
        if "__mutmut_" in name:
            out[name] = status.strip()
    return out


def diff_line(work: Path, name: str) -> str:
    """The changed lines of a mutant, as ``- old`` / ``+ new``."""
    diff = mutmut(work, "show", name)
    changed = [ln for ln in diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    return " | ".join(ln[0] + " " + ln[1:].strip() for ln in changed)


def main(argv: list[str] | None = None) -> int:
    cfg = config()
    modules: dict[str, list[str]] = cfg["modules"]
    targets: dict[str, float] = cfg.get("targets", {})
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", nargs="*", default=list(modules), choices=list(modules))
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("RCUTIL_JOBS", "2")))
    parser.add_argument("--keep", action="store_true", help="resume from the previous run's results")
    args = parser.parse_args(argv)

    listed = set(NAME.findall(SURVIVORS.read_text())) if SURVIVORS.is_file() else set()
    summary, failures = {}, []
    start = time.perf_counter()
    for module in args.modules:
        t0 = time.perf_counter()
        work = prepare(module, modules[module], args.keep)
        print(f"== {module}: mutmut with {', '.join(modules[module])}", flush=True)
        mutmut(work, "run", "--max-children", str(args.jobs), capture=False)
        status = statuses(work)
        tested = {k: v for k, v in status.items() if v != "skipped"}
        killed = sum(v in KILLED for v in tested.values())
        survivors = sorted(k for k, v in tested.items() if v not in KILLED)
        score = killed / len(tested) if tested else 1.0
        target = targets.get(module)
        summary[module] = dict(killed=killed, total=len(tested), score=score, target=target,
                               seconds=round(time.perf_counter() - t0), survivors={
                                   name: dict(status=tested[name], diff=diff_line(work, name)) for name in survivors})
        if target is not None and score < target:
            failures.append(f"{module}: {score:.1%} killed, below the target {target:.0%}")
        unlisted = [name for name in survivors if name not in listed]
        if unlisted:
            failures.append(f"{module}: survivors not listed in {SURVIVORS.relative_to(ROOT)}: {', '.join(unlisted)}")

    print(f"\nmutation testing: {time.perf_counter() - start:.0f} s with {args.jobs} workers")
    print(f"{'module':<24}{'killed':>8}{'total':>7}{'score':>8}{'target':>8}{'seconds':>9}")
    for module, row in summary.items():
        target = f"{row['target']:.0%}" if row["target"] is not None else "-"
        print(f"{module:<24}{row['killed']:>8}{row['total']:>7}{row['score']:>8.1%}{target:>8}{row['seconds']:>9}")
    for module, row in summary.items():
        if row["survivors"]:
            print(f"\nsurvivors in {module}:")
        for name, s in row["survivors"].items():
            mark = "" if name in listed else "   (NOT LISTED)"
            print(f"  {name} [{s['status']}]{mark}\n      {s['diff']}")
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    stale = sorted(name for name in listed if name.split(".")[1] in {Path(m).stem for m in summary}
                   and not any(name in row["survivors"] for row in summary.values()))
    if stale:
        print(f"\nlisted in {SURVIVORS.relative_to(ROOT)} but killed now (remove them): {', '.join(stale)}")
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
