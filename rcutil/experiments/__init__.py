"""The book's experiments, one module per chapter, runnable from the chapter or from the
CLI.

An experiment module ``rcutil/experiments/<stem>.py`` holds science only:

* ``SETTINGS``: one row per profile (see :mod:`rcutil.profiles`);
* ``Result``: the dataclass of its result (a :class:`rcutil.results.Result`);
* ``run(settings, *, device="cpu", progress=True) -> Result``: the computation;
* ``claims(result) -> list[Claim]``: the paper's claims its chapter tests, each decided
  by a rule of :mod:`rcutil.claims`;
* optionally ``checks(result) -> list[Check]`` (the chapter's acceptance table, see
  :mod:`rcutil.claims`) and ``data_files(settings) -> list[str]`` (the data files
  ``run`` reads, by their :mod:`rcutil.data` names).

Its identity comes from where it lives, never from constants it repeats: the file name
gives the CLI name (``rank_collapse`` -> ``rank-collapse``), the JSON file
(``rank_collapse.json``) and the chapter ``book/rank_collapse.md``, whose label is the
CLI name; the chapter's heading gives the title; its place in ``_toc.yml`` gives the
order. The registry is discovered from the package, so adding an experiment needs no
list to edit. It sits above the results store (:mod:`rcutil.store`), which takes a
module and knows nothing of the registry.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import ModuleType

#: The book's source tree, when ``rcutil`` runs from it (an installed wheel has none).
BOOK_ROOT = Path(__file__).resolve().parents[2]
#: What every experiment module defines.
REQUIRED = ("SETTINGS", "run", "claims")


@dataclass(frozen=True)
class Experiment:
    """One entry of the registry."""

    stem: (
        str  #: file name without ``.py``, e.g. ``"rank_collapse"``; also the JSON name
    )
    module: str  #: dotted module path
    title: str  #: the chapter's heading, plain text
    order: int  #: place in ``_toc.yml``

    @property
    def name(self) -> str:
        """The CLI name, e.g. ``"rank-collapse"``; also the label of the chapter."""
        return name_of(self.stem)

    @property
    def chapter(self) -> str:
        """The label ``(name)=`` of the chapter ``book/<stem>.md``."""
        return self.name


def name_of(stem: str) -> str:
    """The CLI name of the module file ``<stem>.py``: underscores become hyphens."""
    return stem.replace("_", "-")


def stem_of(module: ModuleType | str) -> str:
    """The file name, without ``.py``, of an experiment module (or its dotted path)."""
    return (module if isinstance(module, str) else module.__name__).rsplit(".", 1)[-1]


def toc_files(root: Path = BOOK_ROOT) -> list[str]:
    """The ``file`` entries of ``_toc.yml``, in the order of the book (empty without
    it)."""
    path = root / "_toc.yml"
    if not path.is_file():
        return []
    import yaml

    found: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("file"), str):
                found.append(node["file"])
            for key in ("root",):
                if isinstance(node.get(key), str):
                    found.append(node[key])
            for value in node.values():
                if isinstance(value, (list, dict)):
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(yaml.safe_load(path.read_text()))
    return found


_HEADING = re.compile(r"^# (.+)$", re.M)


def chapter_title(stem: str, root: Path = BOOK_ROOT) -> str | None:
    """The heading of ``book/<stem>.md`` (``None`` without the book's sources). A
    heading is link text in the book's tables, so it must be plain text: math or a role
    is refused."""
    path = root / "book" / f"{stem}.md"
    if not path.is_file():
        return None
    match = _HEADING.search(path.read_text())
    if match is None:
        raise TypeError(f"{path} has no '# ' heading: a chapter starts with its title")
    title = match.group(1).strip()
    if re.search(r"[$`{}\\]", title):
        raise TypeError(
            f"the heading of {path} holds math or markup ({title!r}); chapter titles "
            f"are link text in the book's tables: keep them plain text"
        )
    return title


@lru_cache(maxsize=1)
def registry() -> tuple[Experiment, ...]:
    """Every experiment of the book, in the order of the book."""
    order = {Path(f).name: i for i, f in enumerate(toc_files())}
    found = []
    for info in pkgutil.iter_modules(__path__, prefix=__name__ + "."):
        module = importlib.import_module(info.name)
        missing = [k for k in REQUIRED if not hasattr(module, k)]
        if missing:
            raise TypeError(
                f"{info.name} is in rcutil/experiments but lacks "
                f"{', '.join(missing)}: see the docstring of rcutil.experiments"
            )
        stem = stem_of(info.name)
        title = chapter_title(stem)
        if title is not None and stem not in order:
            raise TypeError(
                f"book/{stem}.md is not in _toc.yml: add '- file: book/{stem}' "
                f"where the chapter belongs"
            )
        found.append(
            Experiment(
                stem, info.name, title or name_of(stem), order.get(stem, len(order))
            )
        )
    return tuple(sorted(found, key=lambda e: (e.order, e.stem)))


def available() -> list[str]:
    """CLI names of every experiment, in the order of the book."""
    return [e.name for e in registry()]


def entry(name: str | ModuleType) -> Experiment:
    """The registry entry of an experiment, by CLI name or module; a ``ValueError``
    lists the valid names."""
    stem = stem_of(name) if isinstance(name, ModuleType) else None
    for e in registry():
        if e.name == name or e.stem == stem:
            return e
    raise ValueError(
        f"unknown experiment {getattr(name, '__name__', name)!r}: choose one of "
        f"{', '.join(available())}"
    )


def load(name: str | ModuleType) -> ModuleType:
    """The module of experiment ``name`` (a CLI name, or the module itself)."""
    return importlib.import_module(entry(name).module)


def cached(name: str | ModuleType, profile: str | None = None, **kwargs):
    """The stored result of an experiment (by CLI name or module) for the profile,
    computed and stored when missing: :func:`rcutil.store.cached`."""
    from .. import store

    return store.cached(load(name), profile, **kwargs)
