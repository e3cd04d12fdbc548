"""The import graph of rcutil: no cycle, and no import from a lower layer to a higher
one."""

import ast
from pathlib import Path

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
    {"certificate", "tightness", "store", "sst2_train", "entry"},
    {"experiments.*"},
    {"experiments", "report", "__main__"},
]


def layer_of(module: str) -> int:
    for i, layer in enumerate(LAYERS):
        if module in layer or (
            module.startswith("experiments.") and "experiments.*" in layer
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


def test_the_package_face_imports_what_it_names():
    g = graph()
    face = imports("", PACKAGE / "__init__.py", modules())
    assert {"model", "profiles", "train"} <= face
    assert "store" in g["entry"] and "entry" in g["__main__"]
