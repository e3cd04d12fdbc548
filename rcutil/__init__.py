"""rcutil: the code of the executable book on gradient descent for Transformers with
residual connections (Qin, Zhou, Jiang & Zhu, arXiv:2506.05249).

Thread policy (see :mod:`rcutil.threads`): OpenBLAS (numpy) is limited to one thread
before numpy is first imported; torch follows ``$RCUTIL_TORCH_THREADS`` when it is set.
"""

import os
import signal
import sys
import warnings

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# Without ipywidgets, tqdm.auto falls back to text bars in Jupyter; it need not say so.
warnings.filterwarnings("ignore", message="IProgress not found")

PROG = "python -m rcutil"


def _as_command() -> bool:
    """Whether this import is ``python -m rcutil`` locating its module (``argv[0]`` is
    ``-m`` then) without ``--debug``: its errors are then one line, not a traceback."""
    return sys.argv[:1] == ["-m"] and "--debug" not in sys.argv


def _exit_on_interrupt(signum, frame):
    """Ctrl-C under ``python -m rcutil``: one line and exit 130 at once. A
    KeyboardInterrupt raised while a library loads (torch, numpy, at start or inside a
    run) can come out as another error, or be swallowed. Stopping at once is safe where
    a kill is: downloads are staged and renamed; :func:`rcutil.__main__.run` writes the
    result file and the figures with Python's own handler."""
    os.write(2, f"{PROG}: interrupted\n".encode())
    os._exit(130)


if _as_command() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _exit_on_interrupt)

try:
    from .threads import apply_environment as _apply_thread_policy

    _apply_thread_policy()
except ValueError as _error:  # a bad $RCUTIL_TORCH_THREADS (rcutil.env.EnvError)
    if not _as_command():
        raise
    raise SystemExit(f"{PROG}: error: {_error}") from None

from .model import Transformer, attention, block, ffn, squared_loss  # noqa: E402
from .profiles import PROFILES, active_profile, settings_for  # noqa: E402
from .train import History, TrainingDiverged, gradient_descent  # noqa: E402

__all__ = [
    "PROFILES",
    "active_profile",
    "settings_for",
    "Transformer",
    "attention",
    "block",
    "ffn",
    "squared_loss",
    "History",
    "TrainingDiverged",
    "gradient_descent",
]
__version__ = "0.1.0"
