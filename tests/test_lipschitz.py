"""The Lipschitz experiment: no ratio exceeds its constant, each constant is attained on
an instance that tells the norms of the text from others, and the claim follows from the
stored ratios."""

import copy
from dataclasses import replace

import numpy as np
import pytest
import torch

from rcutil import checks, claims, settings_for
from rcutil.experiments import lipschitz
from rcutil.experiments.lipschitz import verdicts
from rcutil.model import attention
from rcutil.results import pick


@pytest.fixture(scope="module")
def result():
    run = lipschitz.run(settings_for(lipschitz.SETTINGS, "ci"), progress=False)
    return lipschitz.Result.from_json(run.to_json())  # as the store gives it back


def test_no_ratio_exceeds_its_constant_and_each_constant_is_attained(result):
    assert [c.name for c in result.constants] == list(lipschitz.CONSTANTS)
    assert all(len(c.ratios) == 200 for c in result.constants)
    checks.require(verdicts.checks(result))
    for c in result.constants:
        assert c.attained == pytest.approx(1.0, abs=1e-6), c.name


def _spec(M):
    return float(np.linalg.norm(np.asarray(M), 2))


def _fro(M):
    return float(np.linalg.norm(np.asarray(M)))


def _text_constant(name, inst, norm_of_x=_spec):
    """The constants of eqs. lip-attn, lip-ffn and lip-out written out from the text,
    with numpy norms; ``norm_of_x`` replaces the norm of X where the text takes
    ||X||_2."""
    X, W, tau = inst.X.numpy(), {k: v.numpy() for k, v in inst.W.items()}, inst.tau
    n, d_F = X.shape[0], W["W_1"].shape[1]
    return {
        "W_Q": norm_of_x(X) ** 3 * _spec(W["W_K"]) * _spec(W["W_V"]) / (2 * tau),
        "W_K": norm_of_x(X) ** 3 * _spec(W["W_Q"]) * _spec(W["W_V"]) / (2 * tau),
        "W_V": np.sqrt(n) * np.linalg.norm(X, axis=1).max(),
        "W_1": norm_of_x(X) * _spec(W["W_2"]),
        "W_2": min(_fro(X) * _spec(W["W_1"]), np.sqrt(n * d_F)),
        "Z": _spec(W["W_1"]) * _spec(W["W_2"]),
        "W_U": norm_of_x(X),
        "H": _spec(W["W_U"]),
    }[name]


def _moved(name, inst):
    """f(a + h D) - f(a) and h D, computed here from the model's maps."""
    X, W, h = inst.X, inst.W, inst.h
    D = h * inst.D[name]
    tanh_ffn = {
        "W_1": lambda: (
            (torch.tanh(X @ (W["W_1"] + D)) - torch.tanh(X @ W["W_1"])) @ W["W_2"]
        ),
        "W_2": lambda: torch.tanh(X @ W["W_1"]) @ D,
        "Z": lambda: (
            (torch.tanh((X + D) @ W["W_1"]) - torch.tanh(X @ W["W_1"])) @ W["W_2"]
        ),
        "W_U": lambda: X @ D,
        "H": lambda: D @ W["W_U"],
    }
    if name in tanh_ffn:
        return tanh_ffn[name](), D
    w = dict(W)
    w[name] = W[name] + D
    return (
        attention(X, w["W_Q"], w["W_K"], w["W_V"], inst.tau)
        - attention(X, W["W_Q"], W["W_K"], W["W_V"], inst.tau)
    ), D


@pytest.mark.parametrize("name", lipschitz.CONSTANTS)
def test_the_attaining_instance_attains_the_constant_of_the_text(name, result):
    inst = lipschitz.attaining_instances()[name]
    moved, step = _moved(name, inst)
    ratio = _fro(moved) / (_fro(step) * _text_constant(name, inst))
    assert ratio == pytest.approx(1.0, abs=1e-6)
    assert ratio == pytest.approx(pick(result.constants, name=name).attained, rel=1e-9)


@pytest.mark.parametrize("name", ["W_1", "Z", "W_U", "H"])
def test_the_attaining_instance_tells_the_frobenius_norm_of_a_difference(name):
    inst = lipschitz.attaining_instances()[name]
    moved, step = _moved(name, inst)
    L = _text_constant(name, inst)
    assert _spec(moved) / (_fro(step) * L) < verdicts.ATTAINED  # output spectral
    assert _fro(moved) / (_spec(step) * L) > 1.2  # step spectral
    assert np.abs(moved.numpy()).max() / (_fro(step) * L) < verdicts.ATTAINED


@pytest.mark.parametrize("name", ["W_Q", "W_K", "W_1", "W_U"])
def test_the_attaining_instance_tells_the_spectral_norm_of_x_from_others(name):
    inst = lipschitz.attaining_instances()[name]
    moved, step = _moved(name, inst)
    with_frobenius = _text_constant(name, inst, norm_of_x=_fro)
    assert _fro(moved) / (_fro(step) * with_frobenius) < verdicts.ATTAINED
    largest_row = _text_constant(
        name, inst, norm_of_x=lambda X: np.linalg.norm(X, axis=1).max()
    )
    assert _fro(moved) / (_fro(step) * largest_row) > 1 + 1e-3


def test_the_constant_of_w_v_uses_the_largest_row_norm():
    inst = lipschitz.attaining_instances()["W_V"]
    moved, step = _moved("W_V", inst)
    n = inst.X.shape[0]
    assert _fro(moved) / (_fro(step) * np.sqrt(n) * _spec(inst.X)) < verdicts.ATTAINED


def _status(result):
    """The claim's status from the stored ratios, written out here."""
    worst = max(max(float(np.max(c.ratios)), c.attained) for c in result.constants)
    return claims.REPRODUCED if worst <= 1 + 1e-6 else claims.NOT_REPRODUCED


def test_the_claim_follows_from_every_ratio(result):
    (claim,) = verdicts.claims(result)
    assert claim.key == "lemma-lipschitz" and claim.rule
    assert claim.verdict == _status(result) == claims.REPRODUCED
    assert claim.setting.differences[0] == "constants derived here"
    # the activation and the ball are the book's choices too
    assert len(claim.setting.differences) == 3
    assert "tanh" in claim.setting.differences[1]
    assert "ball" in claim.setting.differences[2]
    assert claim.reason == f"every one of the {len(lipschitz.CONSTANTS)} constants " + (
        "bounds its differences"
    )
    assert f"is {verdicts.largest(result):.4f}" in claim.book


@pytest.mark.parametrize("name", lipschitz.CONSTANTS)
@pytest.mark.parametrize("field", ["ratios", "attained"])
def test_one_ratio_above_its_constant_flips_the_claim(result, name, field):
    edited = copy.deepcopy(result)
    c = pick(edited.constants, name=name)
    if field == "ratios":
        c.ratios[len(c.ratios) // 2] = 1.01
    else:
        c.attained = 1.01
    assert _status(edited) == claims.NOT_REPRODUCED
    row = verdicts.claims(edited)[0]
    assert (
        row.verdict == claims.NOT_REPRODUCED
        and row.setting == verdicts.claims(result)[0].setting
    )
    assert row.reason.endswith(f": {verdicts.LABEL[name]}")
    assert row.book.endswith("is 1.0100")
    assert not all(row.ok for row in verdicts.checks(edited))


@pytest.mark.parametrize("above", [0, 1])
def test_a_ratio_at_the_round_off_allowance_still_holds(result, above):
    """1 plus the allowance holds; the next float above it breaks the constant."""
    edited = copy.deepcopy(result)
    c = pick(edited.constants, name="W_V")
    c.ratios[0] = (
        np.nextafter(1 + verdicts.ROUND_OFF, 2.0) if above else (1 + verdicts.ROUND_OFF)
    )
    row = verdicts.claims(edited)[0]
    assert row.verdict == (claims.NOT_REPRODUCED if above else claims.REPRODUCED)
    assert row.reason.endswith(verdicts.LABEL["W_V"]) == bool(above)


def test_a_constant_no_longer_attained_fails_its_check_not_the_claim(result):
    edited = copy.deepcopy(result)
    pick(edited.constants, name="W_2").attained = 0.9
    failed = [row.what for row in verdicts.checks(edited) if not row.ok]
    assert failed == ["$L_{W_2}$: ratio on its attaining instance"]
    assert verdicts.claims(edited)[0].verdict == claims.REPRODUCED


def test_no_instances_is_refused():
    with pytest.raises(ValueError, match="n_instances"):
        lipschitz.run(replace(lipschitz.CI, n_instances=0), progress=False)
