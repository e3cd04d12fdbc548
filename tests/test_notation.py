"""book/notation.md: its table of every chapter's sizes agrees with the experiments'
settings, and each row's regime follows from its sizes."""

import re
from pathlib import Path

import pytest

from rcutil import experiments, jena_data
from rcutil.profiles import PROFILES

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "book" / "notation.md"
COLUMNS = ("chapter", "part", "profile", "N", "n", "d", "d_QK")


def sizes_table(text: str) -> list[dict[str, str]]:
    """The rows of the table under the heading "Every chapter's sizes"."""
    section = text.split("## Every chapter's sizes", 1)[1]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != len(COLUMNS) + 1 or set(cells[0]) <= set("-: "):
            continue
        if cells[0] == "chapter":
            continue
        rows.append(dict(zip((*COLUMNS, "regime"), cells)))
    return rows


ROWS = sizes_table(PAGE.read_text())


def expected(chapter: str, part: str, s) -> dict[str, int]:
    """N, n, d, d_QK of a row, from the settings ``s`` of its profile (integers only;
    a size that varies over instances is not listed)."""
    if chapter in ("model", "convergence", "singular_values"):
        out = {k: getattr(s, k) for k in ("N", "n", "d")}
        if chapter != "singular_values" or part == "checks":
            out["d_QK"] = s.d_qk
        return out
    if chapter == "rank_collapse":
        if part == "sweep":
            return {k: getattr(s, k) for k in ("N", "n", "d")}
        if part == "training":
            return {"N": s.N, "n": s.n, "d": s.d, "d_QK": s.train_d_qk}
        return {"N": 1, "n": s.depth_n, "d": s.d, "d_QK": s.d}
    if chapter == "jena":
        d = len(jena_data.FEATURES)
        return {"N": s.n_windows, "n": s.n, "d": d, "d_QK": s.d_qk}
    if chapter == "sst2":
        d = s.d_model
        return {"N": s.batch_size, "d": d, "d_QK": d // s.n_head}
    return {}


def profiles(row: dict[str, str]) -> tuple[str, ...]:
    return PROFILES if row["profile"] == "all" else (row["profile"],)


def test_the_table_has_a_row_for_every_experiment_and_profile():
    seen = {(r["chapter"], p) for r in ROWS for p in profiles(r)}
    for e in experiments.registry():
        for profile in PROFILES:
            assert (e.stem, profile) in seen, (e.stem, profile)


@pytest.mark.parametrize(
    "row", ROWS, ids=lambda r: f"{r['chapter']}-{r['part'] or 'main'}-{r['profile']}"
)
def test_a_row_states_the_sizes_of_its_settings(row):
    module = experiments.load(row["chapter"].replace("_", "-"))
    for profile in profiles(row):
        want = expected(row["chapter"], row["part"], module.SETTINGS[profile])
        for key, value in want.items():
            assert row[key].replace(",", "") == str(value), (profile, key, row[key])


def test_the_largest_d_qk_of_the_rank_collapse_sweep():
    module = experiments.load("rank-collapse")
    for row in ROWS:
        if row["chapter"] == "rank_collapse" and row["part"] == "sweep":
            top = module.SETTINGS[row["profile"]].max_log2_d_qk
            assert row["d_QK"] == f"1 to $2^{{{top}}}$", row


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['chapter']}-{r['profile']}")
def test_the_regime_follows_from_the_sizes(row):
    numbers = [re.fullmatch(r"[\d,]+", row[k]) for k in ("N", "n", "d")]
    if not all(numbers):  # sizes that vary: a range or "≤"
        assert row["regime"] in ("both", "tall"), row
        if row["regime"] == "tall":  # even at its smallest n the row is tall
            low = int(re.findall(r"\d+", row["n"])[-1])
            assert int(row["N"]) * low > int(row["d"]) or "≤" in row["n"], row
        return
    N, n, d = (int(m.group().replace(",", "")) for m in numbers)
    assert row["regime"] == ("wide" if d >= N * n else "tall"), row


def test_the_parser_reads_the_table():
    assert len(ROWS) >= 18
    assert {r["regime"] for r in ROWS} == {"wide", "tall", "both"}
