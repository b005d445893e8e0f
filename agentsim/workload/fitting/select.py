"""Fit every candidate to one quantity and choose by an information criterion.

:func:`fit_quantity` runs the single-law families and the 2- and 3-lognormal mixtures, scores
each by log-likelihood, AIC (``2k - 2 log L``), BIC (``k log n - 2 log L``), KS and AD, and keeps
the one with the smallest criterion (BIC by default: with thousands of observations AIC tends to
reward the extra mixture components for fitting rounding noise). ``k`` counts the zero point mass
as a parameter when there is one. Samples smaller than :data:`MIN_FIT_SAMPLES` are not fitted:
their spec is the empirical distribution of the values themselves (honest for, e.g., the five
sub-agent fan-outs in the shared traces).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from agentsim.workload.fitting.families import FAMILIES, fit_family
from agentsim.workload.fitting.gof import ad_statistic, ks_statistic
from agentsim.workload.fitting.mixture import fit_lognormal_mixture
from agentsim.workload.fitting.model import FittedDistribution, _round
from agentsim.workload.fitting.sample import Sample

MIN_FIT_SAMPLES = 20
"""Below this many observations the empirical distribution is used instead of a fit."""

DEFAULT_CANDIDATES = ("lognormal", "gamma", "weibull", "exponential", "loglogistic", "lomax",
                      "lognormal_mix2", "lognormal_mix3")
CRITERIA = ("bic", "aic")


def candidate_names(max_components: int = 3) -> tuple[str, ...]:
    """The single-law families plus lognormal mixtures of 2..``max_components`` components.

    The default (3) is the documented candidate set; 4 or more can fit long tails better, but EM
    then has several local optima and the choice can depend on the seed (see docs/fitting.md).
    """
    if max_components < 1:
        raise ValueError("max_components must be >= 1")
    return tuple(name for name in DEFAULT_CANDIDATES if not name.startswith("lognormal_mix")) + tuple(
        f"lognormal_mix{k}" for k in range(2, max_components + 1))


QUANTILE_LEVELS = {"p50": 0.50, "p90": 0.90, "p99": 0.99}


@dataclass
class Candidate:
    """One fitted family with its scores (``error`` set, and scores NaN, if the fit failed)."""

    family: str
    n_params: int
    params: dict
    loglik: float
    aic: float
    bic: float
    ks: float
    ad: float
    fitted: FittedDistribution | None = field(default=None, repr=False)
    error: str | None = None

    def scores(self) -> dict:
        out = {"family": self.family, "n_params": self.n_params}
        if self.error:
            out["error"] = self.error
            return out
        values = dict(loglik=_round(self.loglik, 8), aic=_round(self.aic, 8), bic=_round(self.bic, 8),
                      ks=_round(self.ks, 4), ad=_round(self.ad, 4))
        # The empirical fallback has no likelihood: leave its scores out rather than write NaN.
        out.update({key: value for key, value in values.items() if math.isfinite(value)})
        return out


@dataclass
class QuantityFit:
    """The result for one quantity: the chosen candidate, all candidates, quantiles."""

    n: int
    chosen: Candidate
    candidates: list[Candidate]
    criterion: str
    spec: dict
    quantiles: dict
    empirical_quantiles: dict
    zero_count: int
    resolution: float

    @property
    def runners_up(self) -> list[Candidate]:
        return [c for c in self.candidates if c is not self.chosen]


def _candidate(name: str, sample: Sample, rng: np.random.Generator, gof_x: np.ndarray) -> Candidate:
    zero_param = 1 if sample.zero_fraction > 0 else 0
    try:
        if name in FAMILIES:
            family = FAMILIES[name]
            fitted, theta, loglik = fit_family(family, sample)
            params, k = family.params(theta), family.n_params
        elif name.startswith("lognormal_mix"):
            components = int(name.removeprefix("lognormal_mix"))
            fitted, params, loglik = fit_lognormal_mixture(sample, components, rng)
            k = 3 * components - 1
        else:
            raise KeyError(name)
    except KeyError:
        raise ValueError(f"unknown candidate family {name!r}; known: {', '.join(DEFAULT_CANDIDATES)}, "
                         "lognormal_mixK") from None
    except (ValueError, FloatingPointError) as exc:
        nan = float("nan")
        return Candidate(name, 0, {}, nan, nan, nan, nan, nan, None, str(exc))
    k += zero_param
    n = sample.n
    with np.errstate(all="ignore"):
        ks, ad = ks_statistic(fitted, gof_x), ad_statistic(fitted, gof_x)
    return Candidate(name, k, params, loglik, 2 * k - 2 * loglik, k * math.log(n) - 2 * loglik, ks, ad, fitted)


def empirical_quantiles(values: np.ndarray) -> dict:
    """p50/p90/p99 of the observations (numpy's default linear interpolation)."""
    return {key: _round(float(np.quantile(values, q))) for key, q in QUANTILE_LEVELS.items()}


def fit_quantity(sample: Sample, seed: int = 0, candidates=DEFAULT_CANDIDATES,
                 criterion: str = "bic") -> QuantityFit:
    """Fit all ``candidates`` to ``sample`` and choose the smallest ``criterion`` ("bic" or "aic").

    Deterministic for a given ``seed`` (mixture starts and the KS/AD jitter use it). Raises
    ``ValueError`` for an empty sample or an unknown criterion/family.
    """
    if criterion not in CRITERIA:
        raise ValueError(f"unknown criterion {criterion!r}; use one of {', '.join(CRITERIA)}")
    if sample.n == 0:
        raise ValueError("no observations")
    empirical = empirical_quantiles(sample.values)
    if sample.n < MIN_FIT_SAMPLES or np.unique(sample.values).size < 3:
        values = sorted(float(v) for v in sample.values)
        cand = Candidate("empirical", 0, {"values": values}, float("nan"), float("nan"), float("nan"),
                         float("nan"), float("nan"))
        return QuantityFit(sample.n, cand, [cand], criterion, {"dist": "empirical", "values": values},
                           empirical, empirical, sample.zero_count, sample.resolution)
    rng = np.random.default_rng(seed)
    gof_x = sample.jittered(np.random.default_rng([seed, 1]))
    fitted = [_candidate(name, sample, rng, gof_x) for name in candidates]
    ok = [c for c in fitted if c.error is None]
    if not ok:
        raise ValueError("every candidate family failed: " + "; ".join(f"{c.family}: {c.error}" for c in fitted))
    # Stable order: by criterion, then by name, so ties never depend on candidate order.
    ranked = sorted(ok, key=lambda c: (getattr(c, criterion), c.family)) + [c for c in fitted if c.error]
    chosen = ranked[0]
    quantiles = {key: _round(float(chosen.fitted.ppf(q)[0])) for key, q in QUANTILE_LEVELS.items()}
    return QuantityFit(sample.n, chosen, ranked, criterion, chosen.fitted.spec(), quantiles, empirical,
                       sample.zero_count, sample.resolution)
