"""The book's Sphinx extension is website tooling: loading it imports neither rcutil nor
torch."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_extension_loads_without_torch_or_rcutil():
    code = (
        "import sys; sys.path.insert(0, 'book/_ext'); import rcutil_book; "
        "assert callable(rcutil_book.setup); "
        "bad = [m for m in ('torch', 'rcutil') if m in sys.modules]; "
        "assert not bad, bad"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
