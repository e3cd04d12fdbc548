"""The beta sweep of the singular-value chapter (rcutil.experiments.singular_values)."""
import torch

from rcutil.experiments import singular_values as sv
from rcutil.profiles import settings_for

RTOL = 1e-10


def test_beta_sweep_is_deterministic_and_weyl_holds():
    settings = dict(sv.SETTINGS["ci"], profile="ci")
    a, b = sv.beta_sweep(settings), sv.beta_sweep(settings)
    for name, reg in a["regimes"].items():
        torch.testing.assert_close(reg["sigma_min"], b["regimes"][name]["sigma_min"], rtol=0, atol=0)
        assert reg["weyl_lower"].shape == reg["sigma_min"].shape
        assert (reg["weyl_lower"] <= reg["sigma_min"] * (1 + RTOL)).all()
    collapsed = a["regimes"]["tau=d_qk, collapsed"]
    assert collapsed["weyl_lower"][-1].median() > 0, "at beta = 1 the median bound is positive"


def test_claim_reads_the_collapsed_regime():
    result = sv.run(settings_for(sv.SETTINGS, "ci"), progress=False)
    (claim,) = sv.claims(result)
    assert claim.key == "lemma-residual" and claim.status != "not reproduced"
