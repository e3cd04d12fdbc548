"""The code fingerprint of an experiment: which code its result depends on.

A stored result is reused only while the code that computed it is unchanged
(:mod:`rcutil.store`). :func:`science_code` finds that code by a static reachability
analysis of the syntax trees, without importing anything: from the experiment's ``run``
it follows every name a definition reads, into every ``rcutil`` module it imports,
and collects the definitions reached (functions, classes, module-level assignments,
and any other statement a module runs at import), without docstrings or comments.
:func:`science_fingerprint` is the sha256 of that code.

So a change to anything ``run`` reaches changes the fingerprint, whatever its name, and
a change to what it never reaches (claims, figures, prose, docstrings) does not. The
edges the analysis follows are imports and names; the package reaches no code through
strings, so the data layer (:mod:`rcutil.data`) is followed like any other module
(besides, the content of every data file a result reads is keyed by its sha256). Other
libraries count by their versions (recorded beside each result), not by their code.

Known limits, on the side of recomputing: a name read anywhere in a definition counts
as used (an unused branch too), and a module used as a whole (``from . import m`` then
``m`` passed along) brings in all its definitions.
"""

from __future__ import annotations

import ast
import copy
import functools
import hashlib
import types
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


@functools.cache
def _module_file(name: str) -> Path | None:
    """The source file of ``rcutil`` module ``name`` (without importing it), or
    ``None``."""
    parts = name.split(".")
    if parts[0] != "rcutil":
        return None
    base = _PACKAGE.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _strip_docstrings(node: ast.AST) -> ast.AST:
    """``node`` without the docstrings of the functions and classes in it."""
    for sub in ast.walk(node):
        if isinstance(
            sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)
        ):
            body = sub.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                sub.body = body[1:] or [ast.Pass()]
    return node


@functools.cache
def _parsed_module(name: str, path: str, mtime_ns: int, size: int) -> _Module:
    """:class:`_Module` of ``name``, parsed once per version of its file."""
    return _Module(name)


class _Module:
    """The top-level definitions of one ``rcutil`` module: name -> defining statements,
    and the names it imports (alias -> (module, symbol or None for a module import))."""

    def __init__(self, name: str):
        path = _module_file(name)
        self.name = name
        self.defs: dict[str, list[ast.stmt]] = {}
        self.imports: dict[str, tuple[str, str | None]] = {}
        self.effects: list[ast.stmt] = []  # top-level statements that define no name
        self._dumps: dict[int, str] = {}
        self._refs: dict[int, set] = {}
        tree = ast.parse(path.read_text())
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defs.setdefault(node.name, []).append(node)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = (
                    node.targets if isinstance(node, ast.Assign) else [node.target]
                )
                for target in targets:
                    for sub in ast.walk(target):
                        if isinstance(sub, ast.Name):
                            self.defs.setdefault(sub.id, []).append(node)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    self.imports[a.asname or a.name.split(".")[0]] = (
                        a.name if a.asname else a.name.split(".")[0],
                        None,
                    )
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = (
                        package.rsplit(".", node.level - 1)[0]
                        if node.level > 1
                        else package
                    )
                    base = f"{up}.{node.module}" if node.module else up
                for a in node.names:
                    full = f"{base}.{a.name}"
                    self.imports[a.asname or a.name] = (
                        (full, None) if _module_file(full) else (base, a.name)
                    )
            elif not (
                isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            ):
                self.effects.append(node)  # e.g. a registration call at import time

    def dump(self, node: ast.AST) -> str:
        """The syntax tree of a top-level statement, without docstrings, as text."""
        if id(node) not in self._dumps:
            self._dumps[id(node)] = ast.dump(_strip_docstrings(copy.deepcopy(node)))
        return self._dumps[id(node)]

    def references(self, node: ast.AST) -> set[tuple[str, str | None]]:
        """:func:`_references` of a top-level statement."""
        if id(node) not in self._refs:
            self._refs[id(node)] = _references(node)
        return self._refs[id(node)]


def _references(node: ast.AST) -> set[tuple[str, str | None]]:
    """Names ``node`` reads: ``(name, None)``, or ``(name, attr)`` for ``name.attr``."""
    found, bases = set(), set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
            found.add((sub.value.id, sub.attr))
            bases.add(id(sub.value))
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and id(sub) not in bases:
            found.add((sub.id, None))
    return found


def science_code(module: types.ModuleType | str, entry: str = "run") -> dict[str, str]:
    """The code ``entry`` reaches: ``"module:name" -> syntax tree dump`` for every
    definition that ``entry`` of ``module`` names, and those they name, in every
    ``rcutil`` module (followed through imports; other libraries count by their
    versions, not their code)."""

    def load(name):
        path = _module_file(name)
        stat = path.stat()
        return _parsed_module(name, str(path), stat.st_mtime_ns, stat.st_size)

    start = module if isinstance(module, str) else module.__name__
    seen: dict[str, str] = {}
    todo: list[tuple[str, str | None]] = [(start, entry)]
    while todo:
        mod_name, symbol = todo.pop()
        if _module_file(mod_name) is None:
            continue
        mod = load(mod_name)
        key = f"{mod_name}:{symbol or '*'}"
        if key in seen:
            continue
        if symbol is None:  # the whole module is used as a value
            nodes = [n for ns in mod.defs.values() for n in ns]
        elif symbol in mod.defs:
            nodes = mod.defs[symbol]
        elif symbol in mod.imports:  # a name the module re-exports
            todo.append(mod.imports[symbol])
            seen[key] = ""
            continue
        else:
            seen[key] = ""
            continue
        nodes = nodes + mod.effects
        seen[key] = "\n".join(mod.dump(n) for n in nodes)
        for node in nodes:
            for name, attr in mod.references(node):
                if name in mod.defs:
                    todo.append((mod_name, name))
                elif name in mod.imports:
                    target, sym = mod.imports[name]
                    if sym is not None:
                        todo.append((target, sym))
                    elif _module_file(target) is not None:
                        todo.append((target, attr))
    return {k: v for k, v in seen.items() if v}


def science_fingerprint(module: types.ModuleType | str, entry: str = "run") -> str:
    """sha256 over :func:`science_code`."""
    h = hashlib.sha256()
    for key, dump in sorted(science_code(module, entry).items()):
        h.update(key.encode())
        h.update(dump.encode())
    return h.hexdigest()
