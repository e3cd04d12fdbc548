"""The book's experiments, one package per chapter, run from the chapter or the CLI.

An experiment is a package ``rcutil/experiments/<stem>/`` in two modules:

* ``__init__.py``, the science: ``Settings`` (a frozen dataclass derived from
  :class:`rcutil.profiles.Settings`) with one row per profile, ``CI``, ``BOOK`` and
  ``PAPER``, gathered in ``SETTINGS``; ``Result``, the dataclass of its result (a
  :class:`rcutil.results.Result` whose ``settings`` is of the type ``Settings``);
  ``run(settings, *, device="cpu", progress=True) -> Result``, the computation, and
  what it calls; optionally ``data_files(settings) -> list[str]`` (the data files
  ``run`` reads, by their :mod:`rcutil.data` names);
* ``verdicts.py``, what is decided on a result: ``checks(result) -> list[Check]`` (the
  chapter's acceptance table, :mod:`rcutil.checks`), ``claims(result) -> list[Claim]``
  (the paper's claims its chapter tests, each decided by a rule of
  :mod:`rcutil.claims`), and the readings of the result that decide them.

``run`` never reaches the verdicts, so a change to a check or a claim leaves the stored
result's key (:func:`rcutil.fingerprint.science_fingerprint`) as it is.

Its identity comes from where it lives, never from constants it repeats: the folder name
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
#: What an experiment's package defines, and what its ``verdicts`` module defines.
REQUIRED = ("SETTINGS", "Result", "run")
REQUIRED_VERDICTS = ("checks", "claims")


@dataclass(frozen=True)
class Experiment:
    """One entry of the registry."""

    stem: str  #: folder name, e.g. ``"rank_collapse"``; also the JSON name
    module: str  #: dotted path of the package: settings, result, run
    title: str  #: the chapter's heading, plain text
    order: int  #: place in ``_toc.yml``

    @property
    def name(self) -> str:
        """The CLI name, e.g. ``"rank-collapse"``; also the label of the chapter."""
        return name_of(self.stem)

    @property
    def verdicts(self) -> str:
        """Dotted path of the module of checks and claims."""
        return f"{self.module}.verdicts"

    @property
    def chapter(self) -> str:
        """The label ``(name)=`` of the chapter ``book/<stem>.md``."""
        return self.name


def name_of(stem: str) -> str:
    """The CLI name of the experiment ``<stem>``: underscores become hyphens."""
    return stem.replace("_", "-")


def stem_of(module: ModuleType | str) -> str:
    """The folder name of an experiment package (or of its dotted path)."""
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
            found.extend(
                node[k] for k in ("file", "root") if isinstance(node.get(k), str)
            )
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


def _missing(module: ModuleType, names) -> list[str]:
    return [k for k in names if not hasattr(module, k)]


@lru_cache(maxsize=1)
def registry() -> tuple[Experiment, ...]:
    """Every experiment of the book, in the order of the book."""
    order = {Path(f).name: i for i, f in enumerate(toc_files())}
    found = []
    for info in pkgutil.iter_modules(__path__, prefix=__name__ + "."):
        stem = stem_of(info.name)
        if not info.ispkg:
            raise TypeError(
                f"{info.name} is a module in rcutil/experiments: an experiment is a "
                f"package, rcutil/experiments/{stem}/__init__.py (settings, result, "
                f"run) and rcutil/experiments/{stem}/verdicts.py (checks, claims)"
            )
        missing = _missing(importlib.import_module(info.name), REQUIRED)
        try:
            verdicts = importlib.import_module(f"{info.name}.verdicts")
        except ModuleNotFoundError as exc:
            if exc.name != f"{info.name}.verdicts":
                raise
            missing.append("verdicts.py")
        else:
            missing += [f"verdicts.{k}" for k in _missing(verdicts, REQUIRED_VERDICTS)]
        if missing:
            raise TypeError(
                f"{info.name} is in rcutil/experiments but lacks "
                f"{', '.join(missing)}: see the docstring of rcutil.experiments"
            )
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
    """The registry entry of an experiment, by CLI name, package or verdicts module; a
    ``ValueError`` lists the valid names."""
    module = name.__name__ if isinstance(name, ModuleType) else None
    for e in registry():
        if e.name == name or module in (e.module, e.verdicts):
            return e
    raise ValueError(
        f"unknown experiment {getattr(name, '__name__', name)!r}: choose one of "
        f"{', '.join(available())}"
    )


def load(name: str | ModuleType) -> ModuleType:
    """The package of experiment ``name`` (a CLI name, or the package itself): its
    settings, result and run."""
    return importlib.import_module(entry(name).module)


def verdicts(name: str | ModuleType) -> ModuleType:
    """The checks and claims of experiment ``name`` (a CLI name, or its package)."""
    return importlib.import_module(entry(name).verdicts)


def cached(name: str | ModuleType, profile: str | None = None, **kwargs):
    """The stored result of an experiment (by CLI name or module) for the profile,
    computed and stored when missing: :func:`rcutil.store.cached`."""
    from .. import store

    return store.cached(load(name), profile, **kwargs)
