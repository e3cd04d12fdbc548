"""The Lipschitz experiment: its ratios stay below 1, and its estimate."""
import rcutil  # noqa: F401  (thread policy before numpy)
from rcutil import settings_for
from rcutil.experiments import lipschitz


def test_ratios_stay_below_their_bounds_and_come_close():
    result = lipschitz.run("ci", progress=False)
    assert set(result["max_ratio"]) == {"W_Q", "W_K", "W_V", "W_1", "W_2", "Z", "W_U", "H"}
    assert max(result["max_ratio"].values()) <= 1 + 1e-9
    assert result["max_ratio"]["W_1"] > 0.9 and result["max_ratio"]["H"] > 0.9    # close to tight


def test_estimate_returns_sensible_parts():
    (part,) = lipschitz.estimate("ci")
    assert part.units == settings_for(lipschitz.SETTINGS, "ci")["n_instances"]
    assert part.unit == "random instance" and 0 < part.seconds_per_unit < 1 and part.peak_bytes >= 0
