"""The Lipschitz experiment: its ratios stay below 1."""
import rcutil  # noqa: F401  (thread policy before numpy)
from rcutil import settings_for
from rcutil.experiments import lipschitz


def test_ratios_stay_below_their_bounds_and_come_close():
    result = lipschitz.run(settings_for(lipschitz.SETTINGS, "ci"), progress=False)
    assert set(result["max_ratio"]) == {"W_Q", "W_K", "W_V", "W_1", "W_2", "Z", "W_U", "H"}
    assert max(result["max_ratio"].values()) <= 1 + 1e-9
    assert result["max_ratio"]["W_1"] > 0.9 and result["max_ratio"]["H"] > 0.9    # close to tight


