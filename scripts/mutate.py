"""Mutation testing of the theory code as an audit: ``make mutate`` (not ``make test``).

    python scripts/mutate.py [--modules rcutil/bounds.py ...] [--jobs 2] [--keep]

For each module of ``[tool.mutmut.modules]`` in pyproject.toml, mutmut 3 runs in its own
work folder ``_build/mutation/<module>/`` (a copy of ``rcutil/``, ``tests/``, the
chapters with ``_toc.yml``, and pyproject.toml whose ``[tool.mutmut]`` mutates that
module only and selects that module's tests), so that each module is tested by the tests
chosen for it. mutmut runs,
per mutant, only those of the selected tests that call the mutated function, fastest
first, and stops at the first failure. Property tests draw fewer examples there (the
hypothesis profile "mutation", tests/conftest.py); stored experiment results are off.

An experiment's ``verdicts`` module (its checks and claims and the readings that decide
them) is mutated whole; a module listed in ``[tool.mutmut.functions]`` is mutated only
in the definitions named there, the rest of its work copy marked ``# pragma: no
mutate``.
Where ``run`` is never mutated (a verdicts module, or a module whose named definitions
leave it out), the tests read the experiment's result from a store in the work folder,
computed once.

It prints, per module, the mutants killed out of those tested and the share, then every
survivor with its diff and its reason from tests/mutation/SURVIVORS.md: the reason given
for that mutant by name, or the reason of its class (a mutant that changes only the
wording of an error message, or only the text of a claim's or a check's row, that text
held in a variable too when nothing else reads it). A score
is a finding, not a gate: the exit status is 1 only when a survivor has no reason. A
module whose test file is missing is an error: nothing is run. A summary goes to
``_build/mutation/summary.json``.
"""

from __future__ import annotations

import argparse
import ast
import collections
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
KILLED = ("killed", "timeout")  # a mutant that hangs the tests is caught too
NAME = re.compile(r"`(rcutil\.[\w.ǁ]+__mutmut_\d+)`")
#: The classes of survivors that SURVIVORS.md explains once, by their headings' keys.
WORDING = "error wording"
ROW_TEXT = "row text"


def config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]


def reasons() -> dict[str, str]:
    """Mutant name -> reason, from the tables of SURVIVORS.md (``| `name` | change |
    reason |``), and ``WORDING`` -> the reason of that class (the paragraph under the
    heading that names it)."""
    out: dict[str, str] = {}
    if not SURVIVORS.is_file():
        return out
    text = SURVIVORS.read_text()
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        found = NAME.fullmatch(cells[0]) if cells else None
        if found and len(cells) >= 3:
            out[found.group(1)] = cells[-1]
    for key in (WORDING, ROW_TEXT):
        heading = re.search(rf"^## .*{key}.*\n+((?:.+\n)+)", text, re.M | re.I)
        if heading:  # its first sentence
            out[key] = " ".join(heading.group(1).split()).split(": ")[0]
    return out


def module_pyproject(module: str, tests: list[str]) -> str:
    """pyproject.toml of the work folder: ``[tool.mutmut]`` for one module and its
    tests."""
    text = (ROOT / "pyproject.toml").read_text()
    start = text.index("[tool.mutmut]")
    rest = text[start + 1 :]
    ends = [
        m.start() + start + 1 for m in re.finditer(r"^\[(?!tool\.mutmut)", rest, re.M)
    ]
    end = ends[0] if ends else len(text)
    base = {k: v for k, v in config().items() if not isinstance(v, dict)}
    base.update(only_mutate=[module], pytest_add_cli_args_test_selection=tests)
    block = (
        "[tool.mutmut]\n"
        + "".join(f"{k} = {json.dumps(v)}\n" for k, v in base.items())
        + "\n"
    )
    return text[:start] + block + text[end:]


def only_definitions(source: str, names: list[str]) -> str:
    """``source`` with every top-level statement outside the definitions ``names``
    between ``# pragma: no mutate start`` and ``end`` lines."""
    lines = source.splitlines(keepends=True)
    body = ast.parse(source).body
    missing = set(names) - {getattr(n, "name", None) for n in body}
    if missing:
        raise SystemExit(
            f"[tool.mutmut.functions] names {sorted(missing)}, which the "
            f"module does not define"
        )
    keep = [n for n in body if getattr(n, "name", None) in names]
    spans = [
        (
            n.decorator_list[0].lineno
            if getattr(n, "decorator_list", None)
            else n.lineno,
            n.end_lineno,
        )
        for n in keep
    ]
    out, line = [], 1
    for start, end in spans + [(len(lines) + 1, len(lines))]:
        if start > line:
            out += [
                "# pragma: no mutate start\n",
                *lines[line - 1 : start - 1],
                "# pragma: no mutate end\n",
            ]
        out += lines[start - 1 : end]
        line = end + 1
    return "".join(out)


def work_folder(module: str) -> Path:
    """The work folder of ``module``, named by its path below ``rcutil``
    (``rcutil/experiments/jena/verdicts.py`` -> ``experiments.jena.verdicts``)."""
    return WORK / ".".join(Path(module).with_suffix("").parts[1:])


def prepare(module: str, tests: list[str], keep: bool) -> Path:
    work = work_folder(module)
    if not keep and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    for folder in ("rcutil", "tests"):
        if (work / folder).exists():
            shutil.rmtree(work / folder)
        shutil.copytree(
            ROOT / folder,
            work / folder,
            ignore=shutil.ignore_patterns("__pycache__", "site"),
        )
    # the book's table of contents and chapters: the registry of experiments reads them
    (work / "book").mkdir(exist_ok=True)
    for chapter in (ROOT / "book").glob("*.md"):
        shutil.copy2(chapter, work / "book" / chapter.name)
    shutil.copy2(ROOT / "_toc.yml", work / "_toc.yml")
    (work / "pyproject.toml").write_text(module_pyproject(module, tests))
    names = config().get("functions", {}).get(module)
    if names:
        (work / module).write_text(only_definitions((ROOT / module).read_text(), names))
    return work


def mutmut(work: Path, *args: str, capture: bool = True, store: bool = False) -> str:
    """``mutmut args`` in ``work``; ``store``: experiments' results are stored and
    reused there (for a module whose ``run`` is not mutated)."""
    env = dict(
        os.environ,
        RCUTIL_RESULTS_CACHE="1" if store else "0",
        RCUTIL_RESULTS_DIR=str(work / "results"),
        RCUTIL_PROFILE="ci",
        OPENBLAS_NUM_THREADS="1",
        RCUTIL_TORCH_THREADS="1",
        PYTHONHASHSEED="0",
        MPLBACKEND="Agg",
        RCUTIL_HYPOTHESIS_PROFILE="mutation",
    )
    exe = Path(sys.executable).with_name("mutmut")
    proc = subprocess.run(
        [str(exe), *args],
        cwd=work,
        env=env,
        text=True,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.STDOUT if capture else None,
    )
    if proc.returncode != 0:
        tail = f":\n{proc.stdout[-3000:]}" if capture else ""
        raise SystemExit(
            f"mutmut {' '.join(args)} failed in {work} with exit status "
            f"{proc.returncode}{tail}"
        )
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
    changed = [
        ln
        for ln in diff.splitlines()
        if ln[:1] in "+-" and not ln.startswith(("+++", "---"))
    ]
    return " | ".join(ln[0] + " " + ln[1:].strip() for ln in changed)


def functions(work: Path, module: str) -> dict[str, ast.AST]:
    """Every function of mutmut's copy of ``module`` (``mutants/rcutil/x.py``): the
    original (``x_f__mutmut_orig``) and each mutant, methods as
    ``xǁClassǁm__mutmut_N``."""
    tree = ast.parse((work / "mutants" / module).read_text())
    out = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and "__mutmut_" in node.name
        ):
            out[node.name] = node
    return out


def only_wording(original: ast.AST, mutant: ast.AST) -> bool:
    """Whether two functions differ only in strings inside ``raise`` statements."""

    def normal(node):
        node = ast.parse(ast.unparse(node)).body[0]
        node.name = "f"
        for statement in ast.walk(node):
            if isinstance(statement, ast.Raise):
                for n in ast.walk(statement):
                    if isinstance(n, ast.Constant) and isinstance(n.value, str):
                        n.value = ""
        return ast.dump(node)

    return normal(original) == normal(mutant) and ast.dump(original) != ast.dump(mutant)


def _blank(node, shown: list[str] | None = None):
    """An f-string, a string or ``None`` as the empty string; any other node as is.
    The values an f-string formats (``{r.x:.2f}``) are numbers or names the reader
    sees: each is added to ``shown`` (as its syntax tree's dump)."""
    if isinstance(node, ast.JoinedStr):
        if shown is not None:
            shown += [
                ast.dump(v) for v in node.values if isinstance(v, ast.FormattedValue)
            ]
        return ast.Constant("")
    if isinstance(node, ast.Constant) and (
        node.value is None or isinstance(node.value, str)
    ):
        return ast.Constant("")
    return node


def _conditions(node) -> set[int]:
    """The ids of the nodes below ``node`` that decide which words are shown, not what
    they say: an ``if``-expression's condition, a comprehension's ``if`` clauses, and
    every comparison."""
    out: set[int] = set()
    for n in ast.walk(node):
        tests = (
            [n.test]
            if isinstance(n, ast.IfExp)
            else n.ifs
            if isinstance(n, ast.comprehension)
            else [n]
            if isinstance(n, ast.Compare)
            else []
        )
        out |= {id(m) for t in tests for m in ast.walk(t)}
    return out


def _blank_inside(node, shown: list[str], keys: bool = True) -> None:
    """Every f-string, string or ``None`` below ``node`` made the empty string (the
    values of the f-strings added to ``shown``), but those of a condition
    (:func:`_conditions`); with ``keys=False`` a dictionary's keys are kept (they are
    looked up)."""
    kept = _conditions(node)
    for n in ast.walk(node):
        if id(n) in kept:
            continue
        for field, value in ast.iter_fields(n):
            if not keys and isinstance(n, ast.Dict) and field == "keys":
                continue
            if isinstance(value, list):
                value[:] = [v if id(v) in kept else _blank(v, shown) for v in value]
            elif id(value) not in kept:
                setattr(n, field, _blank(value, shown))


#: The calls that make a row the reader sees, each with its arguments that hold the
#: row's words, by position and by keyword: a claim's all but its key, verdict and
#: decision (``Claim(...)``, or ``Claim.tested(...)`` with the decision that sets the
#: verdict), a check's text (``what``), never the value or threshold a check compares.
WORDS = {
    "Claim": (
        {1, 2, 3, 5, 6, 8, 10},
        {"claim", "paper", "book", "reason", "rule", "setting", "would_take"},
    ),
    "Claim.tested": ({1, 2, 3}, {"claim", "paper", "book", "setting", "reason_prefix"}),
    "Check": ({0}, {"what"}),
}


def _row(call) -> str | None:
    """The key of :data:`WORDS` that ``call`` makes a row with: ``Claim(...)``,
    ``rules.Claim(...)``, ``Claim.tested(...)``, ``rules.Claim.tested(...)``; else
    ``None``."""
    if not isinstance(call, ast.Call):
        return None
    names, f = [], call.func
    while isinstance(f, ast.Attribute):
        names.append(f.attr)
        f = f.value
    if isinstance(f, ast.Name):
        names.append(f.id)
    for n in (2, 1):  # Class.method, then Class (module prefixes dropped)
        name = ".".join(reversed(names[:n]))
        if len(names) >= n and name in WORDS:
            return name
    return None


def _word_parts(call) -> list:
    """The arguments of the row ``call`` that hold its words (:data:`WORDS`)."""
    positions, keywords = WORDS[_row(call)]
    return [a for i, a in enumerate(call.args) if i in positions] + [
        k.value for k in call.keywords if k.arg in keywords
    ]


def _words(node) -> bool:
    """A string, an f-string, ``None``, or a look-up in a module's table of words
    (``TEX["smin"]``: a capitalised name subscripted by a constant or a name)."""
    if _blank(node) is not node:
        return True
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id.isupper()
        and isinstance(node.slice, (ast.Constant, ast.Name))
    )


def _text_variables(func: ast.AST, shown: list[str]) -> None:
    """In place: the value of a local variable read only within a row's words (a text
    held in a variable, then passed to a ``Check`` or ``Claim``) blanked, as the words
    of a row are: a string, f-string, ``None`` or table look-up made the empty string,
    and every string, f-string or ``None`` inside any other value (a dictionary's
    values, an ``if``-expression's arms; its condition stays). The values its
    f-strings format go to ``shown``."""
    text = set()
    for call in ast.walk(func):
        if _row(call):
            text |= {id(n) for part in _word_parts(call) for n in ast.walk(part)}
    loads: dict[str, list[ast.Name]] = {}
    stores: dict[str, int] = {}
    for n in ast.walk(func):
        if isinstance(n, ast.Name):
            if isinstance(n.ctx, ast.Load):
                loads.setdefault(n.id, []).append(n)
            else:
                stores[n.id] = stores.get(n.id, 0) + 1
    only_text = {  # read nowhere else (or nowhere: a mutant may drop the row's words)
        name
        for name, count in stores.items()
        if count == 1 and all(id(u) in text for u in loads.get(name, []))
    }
    for statement in ast.walk(func):
        if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
            continue
        target, value = statement.targets[0], statement.value
        if isinstance(target, ast.Name):
            pairs = [(target, value, statement, "value")]
        elif (
            isinstance(target, ast.Tuple)
            and isinstance(value, ast.Tuple)
            and len(target.elts) == len(value.elts)
        ):
            pairs = [
                (t, v, value.elts, i)
                for i, (t, v) in enumerate(zip(target.elts, value.elts))
            ]
        else:
            continue
        for t, v, holder, where in pairs:
            if not (isinstance(t, ast.Name) and t.id in only_text):
                continue
            if _words(v):
                _blank(v, shown)  # the values its f-string formats go to shown
                blank = ast.Constant("")
                if isinstance(holder, list):
                    holder[where] = blank
                else:
                    setattr(holder, where, blank)
            else:
                _blank_inside(v, shown, keys=False)


def only_row_text(original: ast.AST, mutant: ast.AST) -> bool:
    """Whether two functions differ only in the words of rows: strings (or a string
    made ``None``) among the arguments of :data:`WORDS` that hold a row's words, or in
    the value of a variable read only there (:func:`_text_variables`). A value that an
    f-string there formats is no word: the mutant may drop it (an f-string made
    ``None``) but not change it (``{n + 1}`` made ``{n - 1}`` shows another number)."""

    def normal(node):
        node = ast.parse(ast.unparse(node)).body[0]
        node.name = "f"
        shown: list[str] = []
        _text_variables(node, shown)
        for call in ast.walk(node):
            if not _row(call):
                continue
            positions, keywords = WORDS[_row(call)]
            call.args[:] = [
                _blank(a, shown) if i in positions else a
                for i, a in enumerate(call.args)
            ]
            for k in call.keywords:
                if k.arg in keywords:
                    k.value = _blank(k.value, shown)
            for part in _word_parts(call):
                _blank_inside(part, shown)
        return ast.dump(node), collections.Counter(shown)

    (tree, shown), (mutant_tree, mutant_shown) = normal(original), normal(mutant)
    return (
        tree == mutant_tree
        and not mutant_shown - shown
        and ast.dump(original) != ast.dump(mutant)
    )


def reason_of(
    name: str, known: dict[str, str], funcs: dict[str, ast.AST]
) -> str | None:
    if name in known:
        return known[name]
    short = name.rsplit(".", 1)[-1]
    original = funcs.get(re.sub(r"__mutmut_\d+$", "__mutmut_orig", short))
    mutant = funcs.get(short)
    if original is not None and mutant is not None and only_wording(original, mutant):
        return f"class {WORDING}: {known.get(WORDING, 'see SURVIVORS.md')}"
    if original is not None and mutant is not None and only_row_text(original, mutant):
        return f"class {ROW_TEXT}: {known.get(ROW_TEXT, 'see SURVIVORS.md')}"
    return None


def main(argv: list[str] | None = None) -> int:
    cfg = config()
    modules: dict[str, list[str]] = cfg["modules"]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--modules", nargs="*", default=list(modules), choices=list(modules)
    )
    parser.add_argument(
        "--jobs", type=int, default=int(os.environ.get("RCUTIL_JOBS", "2"))
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="resume from the previous run: test its survivors again",
    )
    args = parser.parse_args(argv)

    known = reasons()
    summary, unexplained = {}, []
    missing = {
        module: [t for t in modules[module] if not (ROOT / t).is_file()]
        for module in args.modules
    }
    missing = {module: tests for module, tests in missing.items() if tests}
    if missing:
        for module, tests in missing.items():
            print(
                f"FAILED: {module} names tests that do not exist: {', '.join(tests)}; "
                "write them or fix [tool.mutmut.modules] in pyproject.toml",
                file=sys.stderr,
            )
        return 2
    start = time.perf_counter()
    for module in args.modules:
        t0 = time.perf_counter()
        resume = args.keep and (work_folder(module) / "mutants").is_dir()
        work = prepare(module, modules[module], args.keep)
        print(f"== {module}: mutmut with {', '.join(modules[module])}", flush=True)
        again = (
            [k for k, v in statuses(work).items() if v not in KILLED] if resume else []
        )
        # a resumed run tests again only the mutants that survived the last one
        mutmut(
            work,
            "run",
            "--max-children",
            str(args.jobs),
            *again,
            capture=False,
            store=module in cfg.get("functions", {}) or module.endswith("/verdicts.py"),
        )
        status = statuses(work)
        tested = {k: v for k, v in status.items() if v != "skipped"}
        killed = sum(v in KILLED for v in tested.values())
        funcs = functions(work, module)
        survivors = {}
        for name in sorted(k for k, v in tested.items() if v not in KILLED):
            reason = reason_of(name, known, funcs)
            survivors[name] = dict(
                status=tested[name], diff=diff_line(work, name), reason=reason
            )
            if reason is None:
                unexplained.append(name)
        summary[module] = dict(
            killed=killed,
            total=len(tested),
            score=killed / len(tested) if tested else 1.0,
            seconds=round(time.perf_counter() - t0),
            survivors=survivors,
        )

    print(
        f"\nmutation testing: {time.perf_counter() - start:.0f} s with {args.jobs} "
        f"workers"
    )
    print(
        f"{'module':<26}{'killed':>8}{'total':>7}{'score':>8}{'survivors':>11}"
        f"{'seconds':>9}"
    )
    for module, row in summary.items():
        print(
            f"{module:<26}{row['killed']:>8}{row['total']:>7}{row['score']:>8.1%}"
            f"{len(row['survivors']):>11}{row['seconds']:>9}"
        )
    for module, row in summary.items():
        if row["survivors"]:
            print(f"\nsurvivors in {module}:")
        for name, s in row["survivors"].items():
            reason = s["reason"] or "NONE: add a test that kills it, or its reason"
            print(
                f"  {name} [{s['status']}]\n      {s['diff']}\n      reason: {reason}"
            )
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    dotted = {m.removesuffix(".py").replace("/", ".") for m in summary}
    stale = sorted(
        name
        for name in known
        if name not in (WORDING, ROW_TEXT)
        and name.rsplit(".", 1)[0] in dotted
        and not any(name in row["survivors"] for row in summary.values())
    )
    if stale:
        print(
            f"\nlisted in {SURVIVORS.relative_to(ROOT)} but killed now (remove "
            f"them): {', '.join(stale)}"
        )
    if unexplained:
        print(
            f"\nFAILED: survivors without a reason in {SURVIVORS.relative_to(ROOT)}: "
            f"{', '.join(unexplained)}",
            file=sys.stderr,
        )
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
