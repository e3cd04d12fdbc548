"""The shape of rcutil: the import graph has no cycle and no import from a lower layer
to a higher one, and every experiment is a package of science (settings, result, run)
and verdicts (checks, claims), with typed settings."""

import ast
import dataclasses
import re
import typing
from pathlib import Path

import pytest

from rcutil import experiments, fingerprint, profiles, results

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rcutil"
#: The layers, lowest first; a module may import only from its own layer or lower ones.
LAYERS = [
    {
        "env",
        "validate",
        "activations",
        "linalg",
        "tables",
        "plotting",
        "profiles",
        "progress",
        "threads",
        "parallel",
        "hessian",
        "rounding",
        "files",
        "results",
        "fingerprint",
    },
    {"model", "data"},
    {
        "train",
        "bounds",
        "spectra",
        "jena_data",
        "sst2_data",
        "gpt2",
        "checks",
        "claims",
        "estimate",
    },
    {"certificate", "tightness", "store", "sst2_train", "lbfgs", "entry"},
    {"experiments.*"},
    {"experiments.*.verdicts"},
    {"experiments", "report", "__main__"},
]


def layer_of(module: str) -> int:
    for i, layer in enumerate(LAYERS):
        if (
            module in layer
            or (re.fullmatch(r"experiments\.\w+", module) and "experiments.*" in layer)
            or (
                re.fullmatch(r"experiments\.\w+\.verdicts", module)
                and "experiments.*.verdicts" in layer
            )
        ):
            return i
    raise AssertionError(
        f"rcutil.{module} is in no layer of tests/test_architecture.py"
    )


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        if parts:
            found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known) -> set[str]:
    """rcutil modules ``name`` imports, anywhere in its code (function-local imports
    too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".") if package else []
            base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
            stem = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{stem}.{alias.name}" if stem else alias.name
                out.add(full if full in known else stem)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "rcutil."
        ):
            out.add(node.module.removeprefix("rcutil."))
        elif isinstance(node, ast.Import):
            out |= {
                a.name.removeprefix("rcutil.")
                for a in node.names
                if a.name.startswith("rcutil.")
            }
    return {m for m in out if m in known and m != name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_every_import_goes_down_or_sideways_in_the_layers():
    wrong = [
        f"rcutil.{a} imports rcutil.{b}"
        for a, deps in graph().items()
        for b in deps
        if layer_of(b) > layer_of(a)
    ]
    assert not wrong, wrong


def test_the_import_graph_has_no_cycle():
    g = graph()
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for nxt in g[node]:
            if state.get(nxt) == 1:
                raise AssertionError(" -> ".join(path + [node, nxt]))
            if nxt not in state:
                visit(nxt, path + [node])
        state[node] = 2

    for node in g:
        if node not in state:
            visit(node, [])


def test_the_layer_check_can_fail():
    assert layer_of("store") > layer_of("model")
    assert layer_of("experiments.jena") > layer_of("store")
    assert layer_of("experiments.jena.verdicts") > layer_of("experiments.jena")
    with pytest.raises(AssertionError, match="in no layer"):
        layer_of("experiments.jena.other")


def test_no_module_reaches_another_through_a_string():
    """Every edge is an import the graph above sees: no importlib, no
    ``"module:function"`` names resolved at run time (the registry of experiments
    discovers its own package's modules, which import nothing from it)."""
    allowed = {"experiments"}
    found = [
        name
        for name, path in modules().items()
        if name not in allowed and "importlib.import_module" in path.read_text()
    ]
    assert not found, found


# ---------------------------------------------------------------------- experiments
ENTRIES = experiments.registry()
PACKAGE_IDS = [e.stem for e in ENTRIES]


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _top_functions(path: Path) -> set[str]:
    return {
        n.name
        for n in _tree(path).body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


@pytest.mark.parametrize("entry", ENTRIES, ids=PACKAGE_IDS)
def test_no_check_or_claim_sits_beside_run(entry):
    """The science module defines no checks or claims and imports neither rule module;
    its verdicts define them."""
    folder = PACKAGE / "experiments" / entry.stem
    science = folder / "__init__.py"
    assert not {"checks", "claims"} & _top_functions(science)
    assert {"checks", "claims"} <= _top_functions(folder / "verdicts.py")
    known = modules()
    assert not {"checks", "claims"} & imports(
        f"experiments.{entry.stem}", science, known
    )


@pytest.mark.parametrize("entry", ENTRIES, ids=PACKAGE_IDS)
def test_the_key_of_a_stored_result_leaves_out_the_verdicts(entry):
    """A change to a check or a claim never computes a result again: ``run`` reaches
    nothing of the verdicts module."""
    code = fingerprint.science_code(entry.module)
    assert f"{entry.module}:run" in code
    assert not any(k.startswith(entry.verdicts) for k in code), entry.verdicts


@pytest.mark.parametrize("entry", ENTRIES, ids=PACKAGE_IDS)
def test_settings_are_typed_one_row_per_profile_and_stored_typed(entry):
    module = experiments.load(entry.name)
    cls = module.Settings
    assert dataclasses.is_dataclass(cls) and issubclass(cls, profiles.Settings)
    assert cls.__dataclass_params__.frozen
    assert module.SETTINGS == {
        "ci": module.CI,
        "book": module.BOOK,
        "paper": module.PAPER,
    }
    assert all(type(row) is cls for row in module.SETTINGS.values())
    assert typing.get_type_hints(module.Result)["settings"] is cls
    for p in profiles.PROFILES:
        row = profiles.settings_for(module.SETTINGS, p)
        assert row.profile == p
        held = dataclasses.make_dataclass(
            "Held", [("settings", cls)], bases=(results.Result,)
        )
        back = held.from_json(held(row).to_json()).settings
        assert back == row and type(back) is cls


def _code_cells(path: Path) -> str:
    return "\n".join(
        re.findall(r"```\{code-cell\}[^\n]*\n(.*?)\n```", path.read_text(), re.S)
    )


def test_settings_are_read_as_attributes():
    """``settings["steps"]`` would read a typed row by a string: nowhere in an
    experiment or a chapter."""
    sources = {p: p.read_text() for p in (PACKAGE / "experiments").rglob("*.py")}
    sources |= {p: _code_cells(p) for p in (ROOT / "book").glob("*.md")}
    found = [
        str(p.relative_to(ROOT))
        for p, text in sources.items()
        if re.search(r"settings\[", text)
    ]
    assert not found, found


@pytest.mark.parametrize("entry", ENTRIES, ids=PACKAGE_IDS)
def test_a_verdicts_module_names_a_constant_only_where_it_serves_twice(entry):
    """A threshold used once is written in its row; a constant of a verdicts module is
    used at least twice, there or in its chapter."""
    path = PACKAGE / "experiments" / entry.stem / "verdicts.py"
    tree = _tree(path)
    constants = {
        t.id
        for n in tree.body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name) and t.id.isupper()
    }
    text = path.read_text() + _code_cells(ROOT / "book" / f"{entry.stem}.md")
    once = [c for c in constants if len(re.findall(rf"\b{c}\b", text)) < 3]
    assert not once, f"{path.name}: {once} are used once: write them in their rows"


@pytest.mark.parametrize("entry", ENTRIES, ids=PACKAGE_IDS)
def test_a_row_of_a_check_table_fits_120_columns(entry):
    path = PACKAGE / "experiments" / entry.stem / "verdicts.py"
    long = [
        i + 1 for i, line in enumerate(path.read_text().splitlines()) if len(line) > 120
    ]
    assert not long, f"{path.name}: lines {long} are wider than 120 columns"


def test_the_package_face_imports_what_it_names():
    g = graph()
    face = imports("", PACKAGE / "__init__.py", modules())
    assert {"model", "profiles", "train"} <= face
    assert "store" in g["entry"] and "entry" in g["__main__"]
