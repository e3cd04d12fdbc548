import atexit
import os
import shutil
import tempfile

from rcutil import env, threads

# The test run's thread policy, before numpy and torch load: OpenBLAS on one thread,
# torch's threads from $RCUTIL_TORCH_THREADS (make unit sets 1: two workers side by
# side). Ctrl-C stays pytest's.
os.environ.setdefault("RCUTIL_PROFILE", "ci")
threads.single_threaded_blas()
# Results go to a folder of this run unless one is named (make unit names the book's
# _build/results, shared with the chapters): plain pytest never writes into the user's
# store.
if env.raw("RCUTIL_RESULTS_DIR") is None:
    _results = tempfile.mkdtemp(prefix="rcutil-test-results-")
    os.environ["RCUTIL_RESULTS_DIR"] = _results
    atexit.register(shutil.rmtree, _results, ignore_errors=True)

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import settings  # noqa: E402

threads.apply_environment()

# Property tests are deterministic: the same examples on every run, no example database,
# no deadline (shared machines). "mutation" (make mutate, which runs the tests once per
# mutant) draws a sixth of the examples; tests size themselves from
# settings.default.max_examples.
HYPOTHESIS_PROFILE_ENV = "RCUTIL_HYPOTHESIS_PROFILE"
HYPOTHESIS_PROFILES = ("deterministic", "mutation")
settings.register_profile(
    "deterministic",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    max_examples=300,
)
settings.register_profile(
    "mutation", parent=settings.get_profile("deterministic"), max_examples=50
)


def hypothesis_profile() -> str:
    """The profile ``$RCUTIL_HYPOTHESIS_PROFILE`` names (default: deterministic)."""
    name = env.raw(HYPOTHESIS_PROFILE_ENV) or "deterministic"
    if name not in HYPOTHESIS_PROFILES:
        raise pytest.UsageError(
            f"{HYPOTHESIS_PROFILE_ENV}={name!r} is not a test profile: set it to one "
            f"of {', '.join(HYPOTHESIS_PROFILES)}, or unset it"
        )
    return name


def pytest_configure(config):
    settings.load_profile(hypothesis_profile())


# The first forward-mode derivative of a process builds torch's decompositions (about a
# second). Build them here, once: processes forked from this one (make mutate) then
# start warm.
_one = torch.ones(1, dtype=torch.float64)
torch.func.jvp(torch.tanh, (_one,), (_one,))
