"""Weaken one constant of the certificate at a time, on a copy, and name the tests that fail.

    python scripts/weaken.py [--only NAME ...]

Each entry below is a plausible error in the theory code: a bound made smaller than what the
proof allows, or a model the rules do not cover let through. The book's tests must catch every
one. For each, the script copies ``rcutil/`` and ``tests/`` to a temporary folder, applies the
change, runs the theory tests there (stored results off, so every experiment reruns) and lists
the failing tests. The exit status is 1 when a change passes every test, or when a change no
longer applies (the code it edits has moved).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ["tests/test_bounds.py", "tests/test_certificate.py", "tests/test_convergence.py"]

#: name -> (file, code as it stands, weakened code)
CHANGES = {
    "G_H halved": (
        "rcutil/certificate.py", "G_H = float(np.linalg.norm(", "G_H = 0.5 * float(np.linalg.norm("),
    "K_H divided by 10": (
        "rcutil/certificate.py", "K_H = math.sqrt(sum(j.second**2 for j in jets))",
        "K_H = math.sqrt(sum(j.second**2 for j in jets)) / 10"),
    "C = G**2 (the K term dropped)": (
        "rcutil/certificate.py", "C = bounds.smoothness_constant(G, K, phi0, r)", "C = G**2"),
    "ball value bounds without r * derivative bound": (
        "rcutil/bounds.py", "min(A.value, norm0 + r * A.first)", "min(A.value, norm0)"),
    "path bound without its factor 2": (
        "rcutil/certificate.py", "path = (2.0 * math.sqrt(2.0 * phi0 / alpha)",
        "path = (math.sqrt(2.0 * phi0 / alpha)"),
    "lam = s0 instead of s0 - G_H r": (
        "rcutil/certificate.py", "lam = s0 - G_H * r", "lam = s0"),
    "G_H and K_H over samples by a max, not sums": (
        "rcutil/certificate.py",
        "G_H = float(np.linalg.norm(np.stack([j.g for j in jets]), 2))\n"
        "    K_H = math.sqrt(sum(j.second**2 for j in jets))",
        "G_H = max(float(np.linalg.norm(j.g)) for j in jets)\n"
        "    K_H = max(j.second for j in jets)"),
    "H_max = S0": (
        "rcutil/certificate.py", "H_max = min(S0 + G_H * r, H_bound)", "H_max = S0"),
    "weight radii without + r": (
        "rcutil/certificate.py", "float(sigma_max(getattr(blk, k))) + r", "float(sigma_max(getattr(blk, k)))"),
    "R_U without + r": (
        "rcutil/certificate.py", "R_U = float(sigma_max(model.W_U)) + r", "R_U = float(sigma_max(model.W_U))"),
    "softmax second-derivative bound 0.2 (false)": (
        "rcutil/bounds.py", "SOFTMAX_SECOND_BOUND = 1.0", "SOFTMAX_SECOND_BOUND = 0.2"),
    "any activation accepted (3 tanh certified)": (
        "rcutil/certificate.py", "if not (act in TANH or isinstance(act, torch.nn.Tanh)):", "if False:"),
}


def run(name: str, path: str, old: str, new: str, jobs: int) -> tuple[str, list[str], float]:
    with tempfile.TemporaryDirectory(prefix="weaken-") as tmp:
        tmp = Path(tmp)
        for folder in ("rcutil", "tests"):
            shutil.copytree(ROOT / folder, tmp / folder, ignore=shutil.ignore_patterns("__pycache__", "site"))
        shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
        target = tmp / path
        text = target.read_text()
        if text.count(old) != 1:
            return "does not apply", [], 0.0
        target.write_text(text.replace(old, new))
        env = dict(os.environ, PYTHONPATH=str(tmp), RCUTIL_RESULTS_CACHE="0", RCUTIL_RESULTS_DIR=str(tmp / "results"),
                   RCUTIL_PROFILE="ci", OPENBLAS_NUM_THREADS="1", RCUTIL_TORCH_THREADS="1", MPLBACKEND="Agg")
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=no", "-rf",
                               "-n", str(jobs), *TESTS], cwd=tmp, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        failed = sorted({m.group(1) for m in re.finditer(r"^FAILED (.+?)(?: - .*)?$", proc.stdout, re.M)})
        if proc.returncode not in (0, 1):
            return f"pytest exit status {proc.returncode}", [proc.stdout[-2000:]], seconds
        return ("caught" if proc.returncode == 1 else "NOT CAUGHT"), failed, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=list(CHANGES), default=list(CHANGES))
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("RCUTIL_JOBS", "2")))
    args = parser.parse_args(argv)
    bad = 0
    for name in args.only:
        verdict, failed, seconds = run(name, *CHANGES[name], jobs=args.jobs)
        bad += verdict != "caught"
        print(f"{verdict:>14}  {name}  ({seconds:.0f} s, {len(failed)} failing tests)", flush=True)
        for test in failed:
            print(f"{'':>16}{test}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
