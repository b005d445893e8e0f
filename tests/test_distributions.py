"""Samplers: the fast single-draw paths give exactly the variates of the reference computations.

The simulation draws every gap and length one at a time, so :meth:`Sampler.sample` has a scalar
path and the direct families skip ``frozen.rvs``; these tests pin that the speed-ups do not
change one bit of any stream (runs are reproducible across versions only if they hold).
"""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from agentsim.config.distributions import support
from agentsim.workload.distributions import DistributionSpec, build

SPEC = TypeAdapter(DistributionSpec)

FAMILIES = [
    {"dist": "constant", "value": 3.0},
    {"dist": "exponential", "mean": 2.5, "loc": 0.5},
    {"dist": "lognormal", "median": 9.0, "sigma": 1.6, "max": 3600},
    {"dist": "gamma", "shape": 2.0, "scale": 3.0, "loc": -1.0, "min": 0.0},
    {"dist": "weibull", "shape": 1.5, "scale": 2.0},
    {"dist": "loglogistic", "shape": 3.0, "scale": 2.0},
    {"dist": "pareto", "shape": 2.5, "scale": 1.0, "round": True},
    {"dist": "uniform", "low": 1.0, "high": 5.0},
    {"dist": "empirical", "values": [1.0, 2.0, 3.5]},
    {"dist": "mixture", "min": 2.0, "max": 40.0, "round": True, "components": [
        {"weight": 0.3, "spec": {"dist": "exponential", "mean": 2.0}},
        {"weight": 0.5, "spec": {"dist": "lognormal", "median": 10.0, "sigma": 1.0, "round": True}},
        {"weight": 0.2, "spec": {"dist": "uniform", "low": 1.0, "high": 5.0, "min": 2.0}}]},
]


@pytest.mark.parametrize("raw", FAMILIES, ids=[f["dist"] for f in FAMILIES])
def test_single_draws_equal_the_array_path_bit_for_bit(raw):
    sampler = build(SPEC.validate_python(raw))
    for seed in range(5):
        single, batch = np.random.default_rng(seed), np.random.default_rng(seed)
        for step in range(2000):
            value = sampler.sample(single)
            expected = sampler.sample(batch, 1)
            assert type(value) is float
            assert np.float64(value).tobytes() == expected[0].tobytes(), (seed, step)
        # Both generators are at the same stream position afterwards.
        assert single.random() == batch.random()


@pytest.mark.parametrize("raw", [f for f in FAMILIES if f["dist"] in ("exponential", "lognormal", "gamma", "uniform")],
                         ids=lambda f: f["dist"])
def test_direct_families_draw_what_scipy_rvs_draws(raw):
    sampler = build(SPEC.validate_python({k: v for k, v in raw.items() if k not in ("min", "max")}))
    ours = sampler.sample(np.random.default_rng(7), 500)
    scipy = sampler.frozen.rvs(size=500, random_state=np.random.default_rng(7))
    assert ours.tobytes() == np.asarray(scipy, dtype=float).tobytes()


def test_mixture_picks_the_components_numpy_choice_picks():
    sampler = build(SPEC.validate_python(FAMILIES[-1]))
    n = 2000
    ours = sampler.sample(np.random.default_rng(3), n)
    # The reference: numpy's own weighted choice, then each component's draws in index order.
    rng = np.random.default_rng(3)
    which = rng.choice(len(sampler.parts), size=n, p=sampler.weights)
    reference = np.empty(n)
    for index, part in enumerate(sampler.parts):
        mask = which == index
        if mask.any():
            reference[mask] = part.sample(rng, int(mask.sum()))
    reference = np.rint(np.clip(reference, 2.0, 40.0))
    assert ours.tobytes() == reference.tobytes()
    counts = np.bincount(which, minlength=3) / n
    assert np.allclose(counts, [0.3, 0.5, 0.2], atol=0.04)


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("key", ["value", "min", "max"])
def test_non_finite_parameters_are_refused(value, key):
    """Infinity or NaN in a spec would run silently (a NaN bound clips nothing): refused."""
    spec = {"dist": "constant", "value": 3.0, key: value}
    with pytest.raises(ValidationError, match="finite number"):
        TypeAdapter(DistributionSpec).validate_python(spec)


@pytest.mark.parametrize("spec, low", [
    ({"dist": "lognormal", "median": 5, "sigma": 1, "loc": -1e5}, -1e5),
    ({"dist": "lognormal", "median": 5, "sigma": 1, "loc": -1e5, "min": 0}, 0.0),
    ({"dist": "pareto", "shape": 2, "scale": 3, "loc": 1}, 4.0),
    ({"dist": "mixture", "components": [{"weight": 1, "spec": -2}, {"weight": 1, "spec": {"dist": "uniform", "low": 1, "high": 9}}]}, -2.0),
    ({"dist": "empirical", "values": [4, -3, 7], "max": -5}, -5.0),
])
def test_support_is_the_lowest_possible_sample(spec, low):
    assert support(TypeAdapter(DistributionSpec).validate_python(spec))[0] == low


@pytest.mark.parametrize("value", [0.5, 1.5, 2.5, -2.5, 2.4999999999999996, 2.0**52 + 1.0])
def test_rounding_a_single_draw_is_rint_half_to_even(value):
    """The scalar path rounds with round(); it must give np.rint's value, ties to even."""
    sampler = build(TypeAdapter(DistributionSpec).validate_python({"dist": "constant", "value": value, "round": True}))
    one = sampler.sample(np.random.default_rng(0))
    array = sampler.sample(np.random.default_rng(0), 1)[0]
    assert isinstance(one, float)
    assert one == array or (np.isnan(one) and np.isnan(array))
    assert one == np.rint(value) or np.isnan(value)


def test_a_default_run_does_not_import_scipy_stats():
    """The default scenario's families draw with numpy; importing scipy.stats (about a second)
    is left to the families and means that need it (a third of `agentsim run`'s time before)."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    code = ("import sys\n"
            "from agentsim.engine.loading import load_scenario\n"
            "from agentsim.engine.simulation import run_scenario\n"
            "run_scenario(load_scenario('scenarios/coding-agents.yaml', overrides=['duration_s=2m']))\n"
            "print('scipy.stats' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
    # A family drawn by scipy still works, importing it on first use.
    sampler = build(TypeAdapter(DistributionSpec).validate_python({"dist": "weibull", "shape": 1.5, "scale": 2.0}))
    assert sampler.sample(np.random.default_rng(0)) > 0 and sampler.mean() > 0
