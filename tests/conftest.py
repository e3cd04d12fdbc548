import os

os.environ.setdefault("RCUTIL_PROFILE", "ci")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
