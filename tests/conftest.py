import os

os.environ.setdefault("RCUTIL_PROFILE", "ci")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import settings  # noqa: E402

import rcutil  # noqa: E402, F401  (the thread policy)
from rcutil import env  # noqa: E402

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
