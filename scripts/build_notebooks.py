"""Write every chapter of the book as a Jupyter notebook that runs as it is, for the
website's download button, Colab and Binder.

    python scripts/build_notebooks.py --out DIR [--commit SHA] [--executed CACHE]

The code is ``book/_ext/rcutil_notebooks.py``, which the book build also runs to write
the notebooks of the download button; see its documentation.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "book" / "_ext"))

from rcutil_notebooks import *  # noqa: E402, F403
from rcutil_notebooks import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
