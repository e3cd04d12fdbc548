"""Apply plausible errors to the theory code one at a time, on a copy, and name the
tests that fail.

    python scripts/weaken.py [--only NAME ...] [--check]

Each entry of :data:`CHANGES` is a plausible error: a bound made smaller than the proof
allows, a block of the L-layer stack composed with another block's quantities, a cruder
measurement, a model the rules do not cover let through. The book's tests must catch
every one. For each, the script copies ``rcutil/`` and ``tests/`` to a temporary folder,
applies the change, runs the entry's tests there (stored results off, so every
experiment reruns) and lists the failing tests. The exit status is 1 when a change
passes its tests, or when a change no longer applies.

An entry names its place by structure, not by text: a file, a function (``name``,
``Class.method``, ``outer.inner``; ``None`` for the whole module) and the code to
change, ``old``, an expression or one or more consecutive statements. ``old`` is
compared with the function's code by syntax tree, so line breaks, spacing, comments and
parentheses do not matter; it must occur exactly once there. ``new`` replaces it, or
``before`` / ``after`` are statements inserted before / after the statement that holds
it. ``--check`` only applies every entry (no tests), as ``tests/test_weaken.py`` does.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The tests of the theory: rules, certificate, measurements and the experiment.
THEORY = (
    "tests/test_bounds.py",
    "tests/test_certificate.py",
    "tests/test_tightness.py",
    "tests/test_convergence.py",
)
#: The tests of the L-layer composition and of the measured K_H.
COMPOSITION = ("tests/test_certificate.py",)
MEASUREMENT = ("tests/test_tightness.py", "tests/test_certificate.py")
#: The tests of the Lipschitz chapter's numeric check.
LIPSCHITZ = ("tests/test_lipschitz.py",)
#: The tests of the singular-value chapter's sweep and claim.
SINGULAR = ("tests/test_singular_values.py",)
#: The tests of the Jena experiment's claims.
JENA_TESTS = ("tests/test_jena.py",)
#: The tests of the convergence experiment: its trajectory and its claims.
EXPERIMENT = ("tests/test_convergence.py",)


class DoesNotApply(Exception):
    """The code an entry names is not (or not once) where the entry says."""


@dataclass(frozen=True)
class Change:
    """In ``file``, inside ``function``, the code ``old`` becomes ``new``, or the
    statements ``before`` / ``after`` go around the statement that holds ``old``."""

    file: str
    function: str | None
    old: str
    new: str | None = None
    before: str | None = None
    after: str | None = None
    tests: tuple[str, ...] = THEORY

    def apply(self, source: str) -> str:
        """``source`` with the change made; :class:`DoesNotApply` when ``old`` is not
        found exactly once in ``function``."""
        if (self.new is None) == (self.before is None and self.after is None):
            raise DoesNotApply("give either new, or before and/or after")
        scope = _scope(ast.parse(source), self.function)
        spans = _find(scope, self.old, statement=self.new is None)
        if len(spans) != 1:
            raise DoesNotApply(
                f"{self.old!r} occurs {len(spans)} times in "
                f"{self.function or 'the module'} of {self.file}"
            )
        ((start, end, column, is_expression),) = spans
        lines = source.splitlines(keepends=True)
        offset = [0]
        for line in lines:
            offset.append(offset[-1] + len(line))

        def at(line: int, column: int) -> int:  # the syntax tree counts UTF-8 bytes
            return offset[line - 1] + len(
                lines[line - 1].encode("utf-8")[:column].decode("utf-8")
            )

        a, b = at(*start), at(*end)
        indent = " " * column
        if self.new is not None:
            text = (
                f"({self.new})"
                if is_expression
                else _indented(self.new, indent)[len(indent) :]
            )
            changed = source[:a] + text + source[b:]
        else:
            # before the statement's first line, after its last (and its comment)
            first, last = offset[start[0] - 1], offset[end[0]]
            rest = source[b:last].strip()
            if (rest and not rest.startswith("#")) or not source[:last].endswith("\n"):
                raise DoesNotApply(f"{self.old!r} does not end its line in {self.file}")
            before = _indented(self.before, indent) + "\n" if self.before else ""
            after = _indented(self.after, indent) + "\n" if self.after else ""
            changed = (
                source[:first] + before + source[first:last] + after + source[last:]
            )
        try:
            tree = ast.parse(changed)
        except SyntaxError as error:
            raise DoesNotApply(
                f"the changed {self.file} does not parse: {error}"
            ) from None
        if ast.dump(tree) == ast.dump(ast.parse(source)):
            raise DoesNotApply("the change leaves the code as it was")
        return changed


def _indented(code: str, indent: str) -> str:
    return textwrap.indent(textwrap.dedent(code).strip("\n"), indent)


def _scope(tree: ast.Module, function: str | None) -> ast.AST:
    """The node of ``function`` (a dotted path of classes and functions) in ``tree``."""
    node: ast.AST = tree
    for name in function.split(".") if function else []:
        found = [d for d in _definitions(node) if d.name == name]
        if len(found) != 1:
            raise DoesNotApply(f"{function}: {len(found)} definitions named {name!r}")
        node = found[0]
    return node


def _definitions(node: ast.AST):
    """Functions and classes defined in ``node``, not inside another definition."""
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    for child in ast.iter_child_nodes(node):
        if isinstance(child, kinds):
            yield child
        else:
            yield from _definitions(child)


def _find(scope: ast.AST, old: str, *, statement: bool):
    """``[(start, end, column, is_expression)]`` of every place in ``scope`` whose
    syntax tree is ``old``'s: an expression (unless ``statement``), else a run of
    statements; for an expression with ``statement``, the innermost statement that
    holds it."""
    pattern = None
    if not statement:
        try:
            pattern = ast.parse(textwrap.dedent(old).strip(), mode="eval").body
        except SyntaxError:
            pattern = None
    if pattern is not None:
        want = ast.dump(pattern)
        return [
            (
                (n.lineno, n.col_offset),
                (n.end_lineno, n.end_col_offset),
                n.col_offset,
                True,
            )
            for n in ast.walk(scope)
            if isinstance(n, ast.expr) and ast.dump(n) == want
        ]
    try:
        body = ast.parse(textwrap.dedent(old).strip()).body
    except SyntaxError as error:
        raise DoesNotApply(
            f"{old!r} is neither an expression nor statements: {error}"
        ) from None
    if statement and len(body) == 1 and isinstance(body[0], ast.Expr):
        want = ast.dump(body[0].value)

        def holds(s):
            return any(
                isinstance(n, ast.expr) and ast.dump(n) == want for n in ast.walk(s)
            )

        return [
            _span([s])
            for s in _statements(scope)
            if holds(s)
            and not any(holds(inner) for inner in _statements(s) if inner is not s)
        ]
    want = [ast.dump(s) for s in body]
    spans = []
    for block in _blocks(scope):
        for i in range(len(block) - len(want) + 1):
            if [ast.dump(s) for s in block[i : i + len(want)]] == want:
                spans.append(_span(block[i : i + len(want)]))
    return spans


def _span(statements):
    first, last = statements[0], statements[-1]
    return (
        (first.lineno, first.col_offset),
        (last.end_lineno, last.end_col_offset),
        first.col_offset,
        False,
    )


def _blocks(node: ast.AST):
    """Every list of statements in ``node`` (bodies, else branches, handlers, ...)."""
    for child in ast.walk(node):
        for field in ("body", "orelse", "finalbody"):
            value = getattr(child, field, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                yield value


def _statements(node: ast.AST):
    return [n for n in ast.walk(node) if isinstance(n, ast.stmt)]


# ------------------------------------------------------------------------- the entries
CERT, BOUNDS, TIGHT = "rcutil/certificate.py", "rcutil/bounds.py", "rcutil/tightness.py"
LIP = "rcutil/experiments/lipschitz/__init__.py"
SV = "rcutil/experiments/singular_values/verdicts.py"
JENA = "rcutil/experiments/jena/verdicts.py"
CONV = "rcutil/experiments/convergence/__init__.py"
CONV_VERDICTS = "rcutil/experiments/convergence/verdicts.py"
#: the statement of feature_jets that composes block l (it holds ``trace[p][l]``)
BLOCK_STEP = "trace[p][l]"

CHANGES: dict[str, Change] = {
    # ---- constants of Theorem 1
    "G_H halved": Change(
        CERT,
        "feature_bounds",
        "np.linalg.norm(np.stack([j.g for j in jets]), 2)",
        new="0.5 * np.linalg.norm(np.stack([j.g for j in jets]), 2)",
    ),
    "K_H divided by 10": Change(
        CERT,
        "feature_bounds",
        "K_H = math.sqrt(sum(j.second**2 for j in jets))",
        new="K_H = math.sqrt(sum(j.second**2 for j in jets)) / 10",
    ),
    "C = G**2 (the K term dropped)": Change(
        CERT,
        "certificate",
        "C = bounds.smoothness_constant(G, K, phi0, r)",
        new="C = G**2",
    ),
    "ball value bounds without r * derivative bound": Change(
        BOUNDS, "jet_tighten", "norm0 + r * A.first", new="norm0"
    ),
    "path bound without its factor 2": Change(
        CERT,
        "certificate",
        "2.0 * math.sqrt(2.0 * phi0 / alpha)",
        new="math.sqrt(2.0 * phi0 / alpha)",
    ),
    "lam = s_lower instead of s_lower - G_H r": Change(
        CERT, "certificate", "lam = s_lower - G_H * r", new="lam = s_lower"
    ),
    "the bound through Z without beta": Change(
        CERT,
        "ZBound.s_Z",
        "self.beta * self.sigma_min_Z - self.ffn",
        new="self.sigma_min_Z - self.ffn",
    ),
    "the bound through Z from sigma_max(Z_0) (false)": Change(
        CERT, "z_lower_bound", "float(sZ[-1])", new="float(sZ[0])"
    ),
    "||FFN(Z_0)|| in the Frobenius norm (cruder)": Change(
        CERT,
        "z_lower_bound",
        "torch.linalg.matrix_norm(stacked_rows(F0), ord=2)",
        new="torch.linalg.matrix_norm(stacked_rows(F0))",
    ),
    "the bound through Z read at the first block": Change(
        CERT, "z_lower_bound", "out.Z[-1]", new="out.Z[0]", tests=COMPOSITION
    ),
    "G_H and K_H over samples by a max, not sums": Change(
        CERT,
        "feature_bounds",
        """
        G_H = float(np.linalg.norm(np.stack([j.g for j in jets]), 2))
        K_H = math.sqrt(sum(j.second**2 for j in jets))""",
        new="""
        G_H = max(float(np.linalg.norm(j.g)) for j in jets)
        K_H = max(j.second for j in jets)""",
    ),
    "H_max = S0": Change(
        CERT, "certificate", "H_max = min(S0 + G_H * r, H_bound)", new="H_max = S0"
    ),
    "weight radii without + r": Change(
        CERT,
        "feature_jets",
        "float(sigma_max(getattr(blk, k))) + r",
        new="float(sigma_max(getattr(blk, k)))",
    ),
    "R_U without + r": Change(
        CERT,
        "certificate",
        "R_U = float(sigma_max(model.W_U)) + r",
        new="R_U = float(sigma_max(model.W_U))",
    ),
    "softmax second-derivative bound 0.2 (false)": Change(
        BOUNDS, None, "SOFTMAX_SECOND_BOUND = 1.0", new="SOFTMAX_SECOND_BOUND = 0.2"
    ),
    "any activation accepted (3 tanh certified)": Change(
        CERT, "check_certifiable", "not act.certifiable", new="False"
    ),
    # ---- the L-layer composition: a block composed with quantities not its own
    "every block with the first block's radii": Change(
        CERT, "feature_jets", "radii[l]", new="radii[0]", tests=COMPOSITION
    ),
    "every block tightened with the first block's norms at theta_0": Change(
        CERT, "feature_jets", "trace[p][l]", new="trace[p][0]", tests=COMPOSITION
    ),
    "every block's norms at theta_0 traced from the stack's input": Change(
        CERT,
        "_trace",
        "bounds.block_norms0(Xl, W, beta=model.beta, tau=model.tau, "
        "activation=model.activation)",
        new="bounds.block_norms0(X[p], W, beta=model.beta, tau=model.tau, "
        "activation=model.activation)",
        tests=COMPOSITION,
    ),
    "every block's input norm taken from the stack's input": Change(
        CERT,
        "feature_jets",
        BLOCK_STEP,
        tests=COMPOSITION,
        before="jet = bounds.Jet(float(sigma_max(X[p])), jet.g, jet.Hq, jet.shape)",
    ),
    "the first block's G 5 % low": Change(
        CERT,
        "feature_jets",
        BLOCK_STEP,
        tests=COMPOSITION,
        after="""
        if l == 0:
            jet = bounds.Jet(jet.value, 0.95 * jet.g, jet.Hq, jet.shape)""",
    ),
    "the first block's value bound 5 % low": Change(
        CERT,
        "feature_jets",
        BLOCK_STEP,
        tests=COMPOSITION,
        after="""
        if l == 0:
            jet = bounds.Jet(0.95 * jet.value, jet.g, jet.Hq, jet.shape)""",
    ),
    "the last block's K 5 % low": Change(
        CERT,
        "feature_jets",
        BLOCK_STEP,
        tests=COMPOSITION,
        after="""
        if l == model.n_layers - 1:
            jet = bounds.Jet(jet.value, jet.g, 0.95 * jet.Hq, jet.shape)""",
    ),
    # ---- the measurement of K_H (a lower estimate must not get cruder unnoticed)
    "K_H measured along the top direction of DH only": Change(
        TIGHT, "measure", "float(best.max())", new="float(first[0])", tests=MEASUREMENT
    ),
    "K_H search without moves": Change(
        TIGHT,
        "measure",
        "math.ceil(iterations / SEARCH_LANCZOS_STEPS)",
        new="0",
        tests=MEASUREMENT,
    ),
    # ---- the Lipschitz check: a difference or a constant in a norm not the text's
    "a Lipschitz difference measured in the spectral norm": Change(
        LIP,
        "ratio",
        "torch.linalg.matrix_norm(f(a1) - f(a0))",
        new="torch.linalg.matrix_norm(f(a1) - f(a0), ord=2)",
        tests=LIPSCHITZ,
    ),
    "a Lipschitz step measured in the spectral norm": Change(
        LIP,
        "ratio",
        "torch.linalg.matrix_norm(a1 - a0)",
        new="torch.linalg.matrix_norm(a1 - a0, ord=2)",
        tests=LIPSCHITZ,
    ),
    "L_{W_Q} built from the Frobenius norm of X": Change(
        LIP,
        "constants",
        "bounds.attention_lipschitz_WQ(spec(X), spec(W['W_K']), spec(W['W_V']), tau)",
        new="bounds.attention_lipschitz_WQ(float(X.norm()), spec(W['W_K']), "
        "spec(W['W_V']), tau)",
        tests=LIPSCHITZ,
    ),
    "L_{W_K} built from the largest row norm of X": Change(
        LIP,
        "constants",
        "bounds.attention_lipschitz_WK(spec(X), spec(W['W_Q']), spec(W['W_V']), tau)",
        new="bounds.attention_lipschitz_WK(float(X.norm(dim=1).max()), spec(W['W_Q']), "
        "spec(W['W_V']), tau)",
        tests=LIPSCHITZ,
    ),
    "L_{W_V} built from the spectral norm of X": Change(
        LIP,
        "constants",
        "bounds.attention_lipschitz_WV(n, float(X.norm(dim=1).max()))",
        new="bounds.attention_lipschitz_WV(n, spec(X))",
        tests=LIPSCHITZ,
    ),
    "L_{W_1} built from the Frobenius norm of Z": Change(
        LIP,
        "constants",
        "bounds.ffn_lipschitz_W1(spec(X), spec(W['W_2']))",
        new="bounds.ffn_lipschitz_W1(float(X.norm()), spec(W['W_2']))",
        tests=LIPSCHITZ,
    ),
    "L_{W_U} built from the Frobenius norm of H": Change(
        LIP,
        "constants",
        "bounds.output_lipschitz_WU(spec(X))",
        new="bounds.output_lipschitz_WU(float(X.norm()))",
        tests=LIPSCHITZ,
    ),
    # ---- the residual's claim read from the wrong statistic, field or beta
    "residual claim by the median gain, not the smallest": Change(
        SV, "claims", "gain.min() > GAIN", new="np.median(gain) > GAIN", tests=SINGULAR
    ),
    "residual claim's condition numbers read from sigma_min": Change(
        SV,
        "kappa_medians",
        "at_beta(result, regime, 'kappa', b)",
        new="at_beta(result, regime, 'sigma_min', b)",
        tests=SINGULAR,
    ),
    "residual gain taken at beta = 0.5": Change(
        SV,
        "gains",
        "at_beta(result, regime, 'sigma_min', 1.0)",
        new="at_beta(result, regime, 'sigma_min', 0.5)",
        tests=SINGULAR,
    ),
    # ---- the Jena claims read from the wrong rule, horizon, beta, field or factor
    "Jena order decided at the common step alone": Change(
        JENA,
        "order_decision",
        "[order_part(result, rule, t, kind) for rule in RULES]",
        new="[order_part(result, 'common', t, kind)]",
        tests=JENA_TESTS,
    ),
    "Jena stall not guarded by the best-found loss's drift": Change(
        JENA,
        "stall_decision",
        "_guarded(parts, small if kind != 'raw' else [])",
        new="_guarded(parts, [])",
        tests=JENA_TESTS,
    ),
    "Jena drift guard at one times the drift": Change(
        JENA, None, "DRIFT_MARGIN = 5.0", new="DRIFT_MARGIN = 1.0", tests=JENA_TESTS
    ),
    "Jena horizons T/2, T/2, T": Change(
        JENA,
        "horizons",
        "[T // 4, T // 2, T]",
        new="[T // 2, T // 2, T]",
        tests=JENA_TESTS,
    ),
    "Jena stall against beta > 0.25 only": Change(
        JENA, "stall_parts", "b > 0", new="b > 0.25", tests=JENA_TESTS
    ),
    "Jena ratio gap by a factor of 10": Change(
        JENA,
        "ratio_gap",
        "np.log10(RATIO_FACTOR)",
        new="1.0",
        tests=JENA_TESTS,
    ),
    "Jena drift read at the L-BFGS run's last step": Change(
        JENA,
        "floor_drift",
        "point.floor_run[:, point.floor_run.shape[1] // 2]",
        new="point.floor_run[:, -1]",
        tests=JENA_TESTS,
    ),
    "Jena rate from the raw loss": Change(
        JENA,
        "measure",
        "np.log(above / (loss[:, 0] - best_found(result, beta))) / t",
        new="np.log(loss[:, t] / loss[:, 0]) / t",
        tests=JENA_TESTS,
    ),
    # ---- the trajectory record: every entry at its own iterate, in the Euclidean norm
    "distance from theta_0 in the max norm": Change(
        CONV,
        "depth_run.observe",
        "torch.linalg.vector_norm(_flat(model) - theta0)",
        new="torch.linalg.vector_norm(_flat(model) - theta0, ord=float('inf'))",
        tests=EXPERIMENT,
    ),
    "PL ratio with the next iterate's loss": Change(
        CONV,
        "depth_run",
        "grad**2 / (2 * loss)",
        new="grad**2 / (2 * np.append(loss[1:], loss[-1]))",
        tests=EXPERIMENT,
    ),
    "PL ratio with the previous iterate's gradient": Change(
        CONV,
        "depth_run",
        "grad**2 / (2 * loss)",
        new="np.append(grad[:1], grad[:-1])**2 / (2 * loss)",
        tests=EXPERIMENT,
    ),
    "sigma_Nn of Z_t recorded as that of H_t": Change(
        CONV,
        "depth_run.observe",
        "singular_values(out.features)[-1]",
        new="singular_values(out.Z[-1])[-1]",
        tests=EXPERIMENT,
    ),
    "last-iterate tightness taken at theta_0": Change(
        CONV,
        "depth_run",
        "at_last = measure(model, X, Y, cert.to_dict(), iterations=iterations)",
        new="at_last = at_theta0",
        tests=EXPERIMENT,
    ),
    # ---- the claims: each read from its own depth, field and statistic
    "multilayer status from the single-layer run": Change(
        CONV_VERDICTS,
        "claims",
        "[theorem_holds(d) and minimum_reached(d, tol) for d in deep]",
        new="[theorem_holds(one) and minimum_reached(one, tol) for d in deep]",
        tests=EXPERIMENT,
    ),
    "Corollary 1 read at the second depth": Change(
        CONV_VERDICTS,
        "claims",
        "check_verdict(minimum_reached(one, tol))",
        new="check_verdict(minimum_reached(deep[0], tol))",
        tests=EXPERIMENT,
    ),
    "PL ratio compared with alpha / 2": Change(
        CONV_VERDICTS,
        "claims",
        "min(d.local_pl) >= d.certificate.alpha",
        new="min(d.local_pl) >= d.certificate.alpha / 2",
        tests=EXPERIMENT,
    ),
    "PL ratio compared with the single layer's alpha": Change(
        CONV_VERDICTS,
        "claims",
        "min(d.local_pl) >= d.certificate.alpha",
        new="min(d.local_pl) >= c1.alpha",
        tests=EXPERIMENT,
    ),
    "median PL ratio where the minimum belongs": Change(
        CONV_VERDICTS,
        "claims",
        "min(d.local_pl) >= d.certificate.alpha",
        new="np.median(d.local_pl) >= d.certificate.alpha",
        tests=EXPERIMENT,
    ),
    "predicted late rate from kappa(H_0), at the step 1/||H_0||^2": Change(
        CONV_VERDICTS,
        "predicted_late_rate",
        "p.mu * p.sigma_min_H**2",
        new="p.kappa_H**-2",
        tests=EXPERIMENT,
    ),
    "predicted late rate from Z_0 without beta": Change(
        CONV_VERDICTS,
        "predicted_from_Z",
        "p.beta * p.sigma_min_Z",
        new="p.sigma_min_Z",
        tests=EXPERIMENT,
    ),
}


def changed_source(change: Change, root: Path = ROOT) -> str:
    """The changed text of ``change.file`` under ``root``."""
    return change.apply((root / change.file).read_text())


def run(change: Change, jobs: int) -> tuple[str, list[str], float]:
    with tempfile.TemporaryDirectory(prefix="weaken-") as tmp:
        tmp = Path(tmp)
        for folder in ("rcutil", "tests"):
            shutil.copytree(
                ROOT / folder,
                tmp / folder,
                ignore=shutil.ignore_patterns("__pycache__", "site"),
            )
        shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
        try:
            (tmp / change.file).write_text(changed_source(change))
        except DoesNotApply as error:
            return "does not apply", [str(error)], 0.0
        env = dict(
            os.environ,
            PYTHONPATH=str(tmp),
            RCUTIL_RESULTS_CACHE="0",
            RCUTIL_RESULTS_DIR=str(tmp / "results"),
            RCUTIL_PROFILE="ci",
            OPENBLAS_NUM_THREADS="1",
            RCUTIL_TORCH_THREADS="1",
            MPLBACKEND="Agg",
        )
        start = time.perf_counter()
        # --dist loadfile: an experiment's tests share one worker, which runs it once
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "--tb=no",
                "-rf",
                "-n",
                str(jobs),
                "--dist",
                "loadfile",
                *change.tests,
            ],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - start
        failed = sorted(
            {
                m.group(1)
                for m in re.finditer(r"^FAILED (.+?)(?: - .*)?$", proc.stdout, re.M)
            }
        )
        if proc.returncode not in (0, 1):
            return (
                f"pytest exit status {proc.returncode}",
                [proc.stdout[-2000:]],
                seconds,
            )
        return ("caught" if proc.returncode == 1 else "NOT CAUGHT"), failed, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", nargs="*", choices=list(CHANGES), default=list(CHANGES)
    )
    parser.add_argument(
        "--jobs", type=int, default=int(os.environ.get("RCUTIL_JOBS", "2"))
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="only apply every entry, without running the tests",
    )
    args = parser.parse_args(argv)
    bad = 0
    start = time.perf_counter()
    for name in args.only:
        if args.check:
            try:
                changed_source(CHANGES[name])
                verdict, failed, seconds = "applies", [], 0.0
            except DoesNotApply as error:
                verdict, failed, seconds = "does not apply", [str(error)], 0.0
            bad += verdict != "applies"
        else:
            verdict, failed, seconds = run(CHANGES[name], jobs=args.jobs)
            bad += verdict != "caught"
        print(
            f"{verdict:>14}  {name}  ({seconds:.0f} s, {len(failed)} failing tests)",
            flush=True,
        )
        for test in failed:
            print(f"{'':>16}{test}")
    seconds = time.perf_counter() - start
    print(
        f"{len(args.only) - bad} of {len(args.only)} "
        f"{'apply' if args.check else 'caught'} in {seconds:.0f} s"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
