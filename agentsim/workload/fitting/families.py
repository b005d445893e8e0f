"""Single-law candidate families fitted by maximum likelihood.

Each family maps an unconstrained parameter vector ``theta`` (logs of the positive parameters) to a
frozen ``scipy.stats`` law with ``loc = 0`` and to an agentsim spec. :func:`fit_family` minimises
the negative log-likelihood of a :class:`~agentsim.workload.fitting.sample.Sample` (interval
probabilities when censored, densities when exact) with Nelder-Mead, started from closed-form
moment estimates, so every fit is deterministic.

Families and their specs (see :mod:`agentsim.workload.distributions`):

===============  ==========================  =============================================
name             scipy law                   spec
===============  ==========================  =============================================
exponential      expon(scale=mean)           {dist: exponential, mean}
lognormal        lognorm(s=sigma, scale=m)   {dist: lognormal, median: m, sigma}
gamma            gamma(a=shape, scale)       {dist: gamma, shape, scale}
weibull          weibull_min(c=shape, scale) {dist: weibull, shape, scale}
loglogistic      fisk(c=shape, scale)        {dist: loglogistic, shape, scale}
lomax            lomax(c=shape, scale)       {dist: pareto, shape, scale, loc: -scale}
===============  ==========================  =============================================

The Pareto tail is the Lomax (Pareto type II) law, ``P(X > x) = (1 + x/scale)^-shape``: support
from 0 like the others (so it competes on the whole sample, not only a tail) and a power-law tail
with index ``shape``. It is exactly scipy's ``pareto(b=shape, loc=-scale, scale=scale)``, so the
existing ``pareto`` spec carries it without a new family.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import optimize, stats

from agentsim.workload.fitting.model import FittedDistribution, _round, log_interval_prob
from agentsim.workload.fitting.sample import Sample

_EULER_GAMMA = 0.5772156649015329


@dataclass(frozen=True)
class Family:
    """One candidate family: name, parameter count and the maps from ``theta``."""

    name: str
    n_params: int
    start: Callable[[np.ndarray], np.ndarray]
    """theta from positive pseudo-observations (moment estimates)."""
    law: object
    """the scipy ``rv_continuous`` (called unfrozen in the optimiser: freezing costs ~0.5 ms)."""
    shapes: Callable[[np.ndarray], tuple]
    """``(shape args, scale)`` for ``law`` from theta."""
    params: Callable[[np.ndarray], dict]
    spec: Callable[[np.ndarray], dict]

    def frozen(self, theta: np.ndarray):
        args, scale = self.shapes(theta)
        return self.law(*args, scale=scale)


def _log_moments(x: np.ndarray) -> tuple[float, float]:
    logx = np.log(x)
    return float(logx.mean()), float(max(logx.std(), 1e-3))


def _start_exponential(x):
    return np.array([math.log(x.mean())])


def _start_lognormal(x):
    mu, sd = _log_moments(x)
    return np.array([mu, math.log(sd)])


def _start_gamma(x):
    # Minka's closed-form approximation of the gamma MLE shape from s = log(mean) - mean(log).
    s = max(math.log(x.mean()) - float(np.log(x).mean()), 1e-6)
    shape = (3 - s + math.sqrt((s - 3) ** 2 + 24 * s)) / (12 * s)
    return np.array([math.log(shape), math.log(x.mean() / shape)])


def _start_weibull(x):
    # log X of a Weibull is Gumbel(min): sd = pi / (c sqrt 6), mean = log(scale) - gamma/c.
    mu, sd = _log_moments(x)
    shape = math.pi / (sd * math.sqrt(6))
    return np.array([math.log(shape), mu + _EULER_GAMMA / shape])


def _start_loglogistic(x):
    # log X of a log-logistic is logistic: sd = pi / (c sqrt 3), median = scale.
    mu, sd = _log_moments(x)
    return np.array([math.log(math.pi / (sd * math.sqrt(3))), float(np.median(np.log(x)))])


def _start_lomax(x):
    # Heavy tails: start at shape 2 (finite mean) with the mean matched: mean = scale / (shape - 1).
    return np.array([math.log(2.0), math.log(x.mean())])


FAMILIES: dict[str, Family] = {
    "exponential": Family(
        "exponential", 1, _start_exponential,
        stats.expon, lambda t: ((), math.exp(t[0])),
        lambda t: {"mean": _round(math.exp(t[0]))},
        lambda t: {"dist": "exponential", "mean": _round(math.exp(t[0]))}),
    "lognormal": Family(
        "lognormal", 2, _start_lognormal,
        stats.lognorm, lambda t: ((math.exp(t[1]),), math.exp(t[0])),
        lambda t: {"median": _round(math.exp(t[0])), "sigma": _round(math.exp(t[1]))},
        lambda t: {"dist": "lognormal", "median": _round(math.exp(t[0])), "sigma": _round(math.exp(t[1]))}),
    "gamma": Family(
        "gamma", 2, _start_gamma,
        stats.gamma, lambda t: ((math.exp(t[0]),), math.exp(t[1])),
        lambda t: {"shape": _round(math.exp(t[0])), "scale": _round(math.exp(t[1]))},
        lambda t: {"dist": "gamma", "shape": _round(math.exp(t[0])), "scale": _round(math.exp(t[1]))}),
    "weibull": Family(
        "weibull", 2, _start_weibull,
        stats.weibull_min, lambda t: ((math.exp(t[0]),), math.exp(t[1])),
        lambda t: {"shape": _round(math.exp(t[0])), "scale": _round(math.exp(t[1]))},
        lambda t: {"dist": "weibull", "shape": _round(math.exp(t[0])), "scale": _round(math.exp(t[1]))}),
    "loglogistic": Family(
        "loglogistic", 2, _start_loglogistic,
        stats.fisk, lambda t: ((math.exp(t[0]),), math.exp(t[1])),
        lambda t: {"shape": _round(math.exp(t[0])), "scale": _round(math.exp(t[1]))},
        lambda t: {"dist": "loglogistic", "shape": _round(math.exp(t[0])), "scale": _round(math.exp(t[1]))}),
    "lomax": Family(
        "lomax", 2, _start_lomax,
        stats.lomax, lambda t: ((math.exp(t[0]),), math.exp(t[1])),
        lambda t: {"shape": _round(math.exp(t[0])), "scale": _round(math.exp(t[1]))},
        lambda t: {"dist": "pareto", "shape": _round(math.exp(t[0])), "scale": _round(math.exp(t[1])),
                   "loc": -_round(math.exp(t[1]))}),
}
"""The single-law candidates by name."""


def negative_loglik(dist: FittedDistribution, sample: Sample) -> float:
    """``-log L`` of the positive part (the zero point mass, if any, is added by the caller)."""
    grouped = sample.grouped()
    if grouped.censored:
        logp = dist.cont_log_interval(grouped.lo, grouped.hi)
    else:
        logp = dist.cont_logpdf(grouped.value)
    value = -float(np.dot(grouped.count, logp))
    return value if np.isfinite(value) else math.inf


def zero_mass_loglik(sample: Sample) -> float:
    """Log-likelihood of the explicit zero point mass (exact samples only; 0 otherwise)."""
    zeros = sample.zero_count
    if sample.censored or zeros == 0:
        return 0.0
    p0 = zeros / sample.n
    positives = sample.n - zeros
    return zeros * math.log(p0) + (positives * math.log1p(-p0) if positives else 0.0)


def _build(family: Family, theta: np.ndarray, zero_mass: float, split: float) -> FittedDistribution:
    return FittedDistribution(np.array([1.0]), [family.frozen(theta)], [family.spec(theta)], zero_mass, split)


def fit_family(family: Family, sample: Sample) -> tuple[FittedDistribution, np.ndarray, float]:
    """Maximum-likelihood fit of one family.

    Returns ``(fitted, theta, loglik)`` where ``loglik`` includes the zero point mass. Raises
    ``ValueError`` when the optimiser finds no finite likelihood.
    """
    grouped = sample.grouped()
    start_x = sample.pseudo_exact()
    split = float(np.median(start_x))
    counts, lo, hi, value = grouped.count, grouped.lo, grouped.hi, grouped.value

    def objective(theta: np.ndarray) -> float:
        if not np.all(np.abs(theta) < 700):
            return math.inf
        args, scale = family.shapes(theta)
        law = family.law
        with np.errstate(all="ignore"):
            if grouped.censored:
                logp = log_interval_prob(lambda x: law.logcdf(x, *args, scale=scale),
                                         lambda x: law.logsf(x, *args, scale=scale), lo, hi, split)
            else:
                logp = law.logpdf(value, *args, scale=scale)
            total = float(np.dot(counts, logp))
        return -total if np.isfinite(total) else math.inf

    theta0 = family.start(start_x)
    with warnings.catch_warnings():
        # Infinite objective values (parameters far outside the data) are expected and rejected;
        # scipy's simplex convergence test then warns about inf - inf.
        warnings.simplefilter("ignore", RuntimeWarning)
        theta, best = _minimise(objective, theta0, family.n_params)
    if not np.isfinite(best):
        raise ValueError(f"{family.name}: no finite likelihood")
    fitted = _build(family, theta, sample.zero_fraction, split)
    return fitted, theta, -best + zero_mass_loglik(sample)


def _minimise(objective, theta0: np.ndarray, n_params: int) -> tuple[np.ndarray, float]:
    if n_params == 1:
        # A bracketed 1-D search is faster and safer than a simplex in one dimension.
        result = optimize.minimize_scalar(lambda t: objective(np.array([t])),
                                          bracket=(theta0[0] - 1.0, theta0[0] + 1.0))
        theta = np.array([result.x])
        best = float(result.fun)
    else:
        best_theta, best = theta0, objective(theta0)
        # Nelder-Mead restarted once from its own optimum: the restart rebuilds the simplex and
        # guards against the premature stops simplex searches are known for.
        for _ in range(2):
            result = optimize.minimize(objective, best_theta, method="Nelder-Mead",
                                       options={"xatol": 1e-7, "fatol": 1e-7, "maxiter": 4000})
            if result.fun <= best:
                best_theta, best = result.x, float(result.fun)
        theta = np.asarray(best_theta, dtype=float)
    return theta, best
