"""Experiment results: the JSON files that ``python -m rcutil`` writes and the chapters read.

Every experiment module in :mod:`rcutil.experiments` exposes ``run(profile=None, *,
device="cpu", progress=True) -> dict`` (JSON-serialisable, with its ``settings`` and
seeds) and, optionally, ``plot(result, out_dir) -> list[Path]``. The chapter and the
command line both call ``run``, so they cannot disagree.
"""
from __future__ import annotations

import json
import math
import os
import platform
import tempfile
from pathlib import Path
from typing import Any


def library_versions() -> dict[str, str]:
    """Versions of Python and of the libraries the numbers depend on."""
    import numpy
    import sympy
    import torch

    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "numpy": numpy.__version__, "sympy": sympy.__version__}
    try:
        from importlib.metadata import version

        versions["rcutil"] = version("rcutil")
    except Exception:  # not installed as a distribution (e.g. run from a source tree)
        versions["rcutil"] = "source"
    return versions


def to_jsonable(obj: Any) -> Any:
    """Turn tensors, numpy values, tuples and paths into plain JSON types (NaN/inf stay floats)."""
    import numpy as np
    import torch

    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return to_jsonable(obj.detach().cpu().tolist())
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float) and math.isnan(obj):
        return obj
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    if isinstance(obj, torch.dtype):
        return str(obj)
    if callable(obj):
        return getattr(obj, "__name__", repr(obj))
    raise TypeError(f"cannot store {type(obj).__name__} in a result file: {obj!r}")


def write_json(payload: dict, path: Path) -> Path:
    """Write ``payload`` as JSON atomically (temporary file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(to_jsonable(payload), f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_json(path: Path) -> dict:
    with open(path) as f:
        return json.load(f)
