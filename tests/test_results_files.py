"""The results store's files: a replaced data file gives a second stored result beside
the first; a truncated one is named, recomputed and rewritten readable by all."""
import json
import stat

import pytest
from test_results import fake  # noqa: F401  (the fake experiment that reads one file)

from rcutil import experiments


def test_a_replaced_data_file_gives_a_new_result_with_its_checksum(fake):  # noqa: F811
    module, tmp_path = fake
    numbers = tmp_path / "data" / "fake" / "numbers.txt"
    first = experiments.cached("fake", "ci")
    numbers.write_text("5 5 5\n")
    second = experiments.cached("fake", "ci")
    assert (first["total"], second["total"], module.calls) == (12, 30, 2)
    stored = sorted((tmp_path / "results").glob("fake-ci-*.json"))
    assert len(stored) == 2, "the key holds the sha256 of the data read"


def test_a_truncated_stored_result_is_rewritten_readable_by_all(fake):  # noqa: F811
    module, tmp_path = fake
    experiments.cached("fake", "ci")
    (path,) = (tmp_path / "results").glob("fake-ci-*.json")
    path.write_text('{"total": 1')
    with pytest.warns(RuntimeWarning, match="computing it again"):
        assert experiments.cached("fake", "ci")["total"] == 12
    assert json.loads(path.read_text())["total"] == 12 and module.calls == 2
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
