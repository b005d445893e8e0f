"""Fitting math: parameter recovery, model selection, rounding/zeros, GOF statistics, specs."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import TypeAdapter
from scipy import stats

from agentsim.workload.distributions import DistributionSpec, build
from agentsim.workload.fitting import FAMILIES, Sample, fit_family, fit_lognormal_mixture, fit_quantity
from agentsim.workload.fitting.gof import ad_statistic, ks_statistic
from agentsim.workload.fitting.select import candidate_names

SPEC = TypeAdapter(DistributionSpec)

# (family, scipy law, parameters the fit must recover: name -> true value)
TRUE_LAWS = [
    ("lognormal", stats.lognorm(s=1.2, scale=9.0), {"median": 9.0, "sigma": 1.2}),
    ("gamma", stats.gamma(a=2.5, scale=4.0), {"shape": 2.5, "scale": 4.0}),
    ("weibull", stats.weibull_min(c=0.7, scale=20.0), {"shape": 0.7, "scale": 20.0}),
    ("loglogistic", stats.fisk(c=2.0, scale=10.0), {"shape": 2.0, "scale": 10.0}),
    ("exponential", stats.expon(scale=5.0), {"mean": 5.0}),
    ("lomax", stats.lomax(c=1.5, scale=10.0), {"shape": 1.5, "scale": 10.0}),
]


def _draw(law, n, seed):
    return law.rvs(size=n, random_state=np.random.default_rng(seed))


@pytest.mark.parametrize("name,law,truth", TRUE_LAWS, ids=[t[0] for t in TRUE_LAWS])
@pytest.mark.parametrize("resolution", [0.0, 1.0], ids=["exact", "rounded"])
def test_single_family_recovers_known_parameters(name, law, truth, resolution):
    x = _draw(law, 4000, seed=11)
    if resolution:
        x = np.rint(x)  # whole seconds, like WEKA think_time
    _, theta, _ = fit_family(FAMILIES[name], Sample(x, resolution))
    params = FAMILIES[name].params(theta)
    for key, true_value in truth.items():
        assert params[key] == pytest.approx(true_value, rel=0.08), (key, params)


@pytest.mark.parametrize("name,law,truth", TRUE_LAWS, ids=[t[0] for t in TRUE_LAWS])
def test_model_selection_picks_the_true_family(name, law, truth):
    x = np.rint(_draw(law, 3000, seed=5))
    fit = fit_quantity(Sample(x, 1.0), seed=0)
    assert fit.chosen.family == name, [(c.family, round(c.bic - fit.chosen.bic, 1)) for c in fit.candidates]
    # The chosen family has the smallest BIC and the candidates are ranked.
    bics = [c.bic for c in fit.candidates if c.error is None]
    assert bics == sorted(bics)


def test_em_recovers_a_two_lognormal_mixture_from_rounded_data():
    rng = np.random.default_rng(3)
    n = 6000
    first = rng.random(n) < 0.6
    x = np.where(first, stats.lognorm(s=0.3, scale=5.0).rvs(n, random_state=rng),
                 stats.lognorm(s=0.8, scale=60.0).rvs(n, random_state=rng))
    fitted, params, _ = fit_lognormal_mixture(Sample(np.rint(x), 1.0), 2, np.random.default_rng(0))
    low, high = params["components"]
    assert low["weight"] == pytest.approx(0.6, abs=0.03)
    assert low["median"] == pytest.approx(5.0, rel=0.05)
    assert low["sigma"] == pytest.approx(0.3, rel=0.1)
    assert high["median"] == pytest.approx(60.0, rel=0.05)
    assert high["sigma"] == pytest.approx(0.8, rel=0.1)
    # And model selection prefers the mixture over every single family.
    assert fit_quantity(Sample(np.rint(x), 1.0)).chosen.family.startswith("lognormal_mix")


def test_censored_fit_does_not_bias_the_median_when_rounding_is_coarse():
    # Median 2 s rounded to whole seconds: a quarter of the values become 0 or 1.
    x = _draw(stats.lognorm(s=1.0, scale=2.0), 5000, seed=8)
    rounded = np.rint(x)
    fitted, theta, _ = fit_family(FAMILIES["lognormal"], Sample(rounded, 1.0))
    censored_median = FAMILIES["lognormal"].params(theta)["median"]
    assert censored_median == pytest.approx(2.0, rel=0.04)
    # Treating the rounded values as exact (zeros become a point mass) is visibly biased, which is
    # why the censored likelihood is used.
    naive = fit_quantity(Sample(rounded, 0.0), candidates=("lognormal",))
    assert abs(naive.quantiles["p50"] - 2.0) / 2.0 > 0.08
    assert abs(float(fitted.ppf(0.5)[0]) - 2.0) / 2.0 < 0.04


def test_recorded_zeros_of_a_censored_sample_are_intervals_not_a_point_mass():
    x = np.rint(_draw(stats.lognorm(s=1.0, scale=2.0), 2000, seed=9))
    sample = Sample(x, 1.0)
    assert sample.zero_count > 0 and sample.zero_fraction == 0.0
    fit = fit_quantity(sample, candidates=("lognormal",))
    assert fit.spec["dist"] == "lognormal"


def test_exact_zeros_become_an_explicit_point_mass():
    rng = np.random.default_rng(4)
    x = stats.gamma(a=2.0, scale=3.0).rvs(3000, random_state=rng)
    x[:300] = 0.0  # 10% exact zeros
    fit = fit_quantity(Sample(x, 0.0), candidates=("gamma", "lognormal"))
    spec = fit.spec
    assert spec["dist"] == "mixture"
    zero = spec["components"][0]
    assert zero["spec"] == {"dist": "constant", "value": 0.0}
    assert zero["weight"] == pytest.approx(0.1)
    assert fit.chosen.fitted.ppf(0.05)[0] == 0.0
    assert fit.chosen.family == "gamma"
    assert fit.chosen.n_params == 3  # the zero mass counts as a parameter
    samples = build(SPEC.validate_python(spec)).sample(np.random.default_rng(0), 20000)
    assert np.mean(samples == 0) == pytest.approx(0.1, abs=0.01)


def test_ks_matches_scipy_and_ad_matches_scipy_for_the_exponential():
    x = _draw(stats.expon(scale=3.0), 800, seed=2)
    fitted, _, _ = fit_family(FAMILIES["exponential"], Sample(x, 0.0))
    sorted_x = np.sort(x)
    assert ks_statistic(fitted, sorted_x) == pytest.approx(stats.kstest(x, fitted.frozen[0].cdf).statistic, rel=1e-9)
    # scipy's anderson(..., "expon") uses the same MLE (the mean) for the scale.
    assert ad_statistic(fitted, sorted_x) == pytest.approx(stats.anderson(x, "expon", method="interpolate").statistic, rel=1e-6)


def test_gof_separates_a_good_fit_from_a_bad_one():
    x = np.rint(_draw(stats.lognorm(s=1.2, scale=9.0), 3000, seed=6))
    fit = fit_quantity(Sample(x, 1.0), seed=0)
    by_name = {c.family: c for c in fit.candidates}
    assert by_name["lognormal"].ks < 0.03
    assert by_name["exponential"].ks > 0.1
    assert by_name["exponential"].ad > 10 * by_name["lognormal"].ad


@pytest.mark.parametrize("name,law,truth", TRUE_LAWS, ids=[t[0] for t in TRUE_LAWS])
def test_every_family_spec_is_valid_and_samples_the_fitted_law(name, law, truth):
    x = _draw(law, 3000, seed=12)
    fitted, _, _ = fit_family(FAMILIES[name], Sample(x, 0.0))
    sampler = build(SPEC.validate_python(fitted.spec()))
    drawn = np.sort(sampler.sample(np.random.default_rng(1), 40000))
    # The spec draws from the same law as the fitted scipy object (Lomax goes through `pareto`).
    assert stats.kstest(drawn, fitted.frozen[0].cdf).statistic < 0.01


def test_mixture_spec_quantiles_match_the_fitted_ppf():
    x = np.rint(_draw(stats.lognorm(s=1.5, scale=9.0), 3000, seed=13))
    fitted, _, _ = fit_lognormal_mixture(Sample(x, 1.0), 3, np.random.default_rng(0))
    spec = fitted.spec()
    assert spec["dist"] == "mixture" and len(spec["components"]) == 3
    drawn = build(SPEC.validate_python(spec)).sample(np.random.default_rng(2), 100000)
    for q in (0.5, 0.9, 0.99):
        assert np.quantile(drawn, q) == pytest.approx(float(fitted.ppf(q)[0]), rel=0.05)
        assert float(fitted.cdf(fitted.ppf(q)[0])) == pytest.approx(q, abs=1e-6)


def test_fit_quantity_is_deterministic_and_reports_quantiles():
    x = np.rint(_draw(stats.lognorm(s=1.3, scale=9.0), 2000, seed=14))
    a = fit_quantity(Sample(x, 1.0), seed=3)
    b = fit_quantity(Sample(x, 1.0), seed=3)
    assert a.spec == b.spec and a.quantiles == b.quantiles
    assert [c.scores() for c in a.candidates] == [c.scores() for c in b.candidates]
    assert set(a.quantiles) == set(a.empirical_quantiles) == {"p50", "p90", "p99"}
    assert a.empirical_quantiles["p50"] == float(np.quantile(x, 0.5))
    assert a.quantiles["p50"] == pytest.approx(9.0, rel=0.06)


def test_small_samples_use_the_empirical_distribution():
    fit = fit_quantity(Sample(np.array([1.0, 2.0, 2.0, 3.0, 1.0]), 1.0))
    assert fit.chosen.family == "empirical"
    assert fit.spec == {"dist": "empirical", "values": [1.0, 1.0, 2.0, 2.0, 3.0]}
    SPEC.validate_python(fit.spec)


def test_bad_samples_and_options_are_rejected():
    with pytest.raises(ValueError):
        Sample(np.array([1.0, -2.0]))
    with pytest.raises(ValueError):
        Sample(np.array([1.0, np.nan]))
    with pytest.raises(ValueError):
        fit_quantity(Sample(np.array([]), 1.0))
    with pytest.raises(ValueError):
        fit_quantity(Sample(np.arange(1.0, 50.0), 1.0), criterion="r2")
    assert candidate_names(3)[-2:] == ("lognormal_mix2", "lognormal_mix3")
    assert not any(name.startswith("lognormal_mix") for name in candidate_names(1))
