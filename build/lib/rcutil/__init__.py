"""rcutil: the code of the executable book on gradient descent for Transformers with
residual connections (Qin, Zhou, Jiang & Zhu, arXiv:2506.05249).

Thread policy (see :mod:`rcutil.threads`): OpenBLAS (numpy) is limited to one thread before
numpy is first imported; torch follows ``$RCUTIL_TORCH_THREADS`` when it is set.
"""
import os
import sys
import warnings

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# Without ipywidgets, tqdm.auto falls back to text bars in Jupyter; it need not say so.
warnings.filterwarnings("ignore", message="IProgress not found")

from .threads import apply_environment as _apply_thread_policy  # noqa: E402

try:
    _apply_thread_policy()
except ValueError as _error:
    # `python -m rcutil` (argv[0] is "-m" while Python locates the module): one line, no traceback
    if sys.argv[:1] == ["-m"] and "--debug" not in sys.argv:
        sys.exit(f"python -m rcutil: error: {_error}")
    raise

from .model import Transformer, attention, block, ffn, squared_loss  # noqa: E402
from .profiles import PROFILES, active_profile, settings_for  # noqa: E402
from .train import History, TrainingDiverged, gradient_descent  # noqa: E402

__all__ = ["PROFILES", "active_profile", "settings_for", "Transformer", "attention", "block",
           "ffn", "squared_loss", "History", "TrainingDiverged", "gradient_descent"]
__version__ = "0.1.0"
