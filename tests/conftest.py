import os

from hypothesis import settings

os.environ.setdefault("RCUTIL_PROFILE", "ci")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# Property tests are deterministic: the same examples on every run, no example database, no
# deadline (shared machines). Tests choose their own max_examples.
settings.register_profile("deterministic", derandomize=True, database=None, deadline=None, print_blob=True)
settings.load_profile("deterministic")
