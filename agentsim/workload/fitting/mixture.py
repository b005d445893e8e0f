"""Mixtures of K lognormals fitted by EM, with interval censoring.

In log space a lognormal mixture is a Gaussian mixture, ``Y = log X ~ sum_k w_k N(mu_k, s_k^2)``.
Exact observations give the textbook EM. A censored observation only says ``Y`` lies in
``[a, b) = [log lo, log hi)`` (``a = -inf`` for a recorded 0), so the E-step also takes the
first two moments of ``Y`` under each component truncated to that interval (truncated-normal
moments), and the M-step uses those in place of ``y`` and ``y^2``: this is the exact EM for
interval-censored Gaussian mixtures, and every iteration increases the censored likelihood.

Starts are deterministic: one from an equal-count split of the sorted data, plus a few seeded
random starts; the best final likelihood wins. Components are returned in increasing median.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats
from scipy.special import log_ndtr

from agentsim.workload.fitting.families import zero_mass_loglik
from agentsim.workload.fitting.model import FittedDistribution, _round, log1mexp
from agentsim.workload.fitting.sample import Sample

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_SCREEN_ITER = 25
_FINALISTS = 2  # screened starts run to convergence
_MIN_SIGMA = 1e-3  # keeps exact-data EM away from the degenerate zero-variance spikes


def _log_phi(z: np.ndarray) -> np.ndarray:
    return -0.5 * z * z - _LOG_SQRT_2PI


def _log_interval(alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """``log(Phi(beta) - Phi(alpha))``, stable in both tails (uses the upper tail when alpha > 0)."""
    upper = alpha > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        via_sf = log_ndtr(-alpha) + log1mexp(log_ndtr(-beta) - log_ndtr(-alpha))
        via_cdf = log_ndtr(beta) + log1mexp(log_ndtr(alpha) - log_ndtr(beta))
    return np.where(upper, via_sf, via_cdf)


class _Data:
    """Grouped log-space data: intervals [a, b) (censored) or points y (exact), with counts."""

    def __init__(self, sample: Sample):
        grouped = sample.grouped()
        self.censored = grouped.censored
        self.count = grouped.count
        with np.errstate(divide="ignore"):
            self.a = np.log(grouped.lo)
        self.b = np.log(grouped.hi)
        self.y = np.log(grouped.value) if not self.censored else None
        # Narrow intervals (relative to any component) behave as points: use their centre there.
        self.centre = np.where(np.isfinite(self.a), (self.a + self.b) / 2.0, self.b - 1.0)
        self.log_jacobian = float(np.dot(self.count, self.y)) if not self.censored else 0.0

    def component_terms(self, mu: np.ndarray, sigma: np.ndarray):
        """Per (component, observation): log-likelihood, E[Y], E[Y^2] under that component."""
        mu = mu[:, None]
        sigma = sigma[:, None]
        if not self.censored:
            z = (self.y[None, :] - mu) / sigma
            logl = _log_phi(z) - np.log(sigma)
            ey = np.broadcast_to(self.y[None, :], logl.shape)
            return logl, ey, ey * ey
        alpha = (self.a[None, :] - mu) / sigma
        beta = (self.b[None, :] - mu) / sigma
        logz = _log_interval(alpha, beta)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            pa = np.where(np.isfinite(alpha), np.exp(_log_phi(alpha) - logz), 0.0)
            pb = np.exp(_log_phi(beta) - logz)
            apa = np.where(np.isfinite(alpha), alpha * pa, 0.0)
            m1 = pa - pb
            m2 = apa - beta * pb
            ey = mu + sigma * m1
            var = sigma * sigma * (1.0 + m2 - m1 * m1)
        # Where the ratios lose precision (tiny interval mass), fall back to the interval centre.
        bad = ~np.isfinite(ey) | ~np.isfinite(var) | (var < 0)
        if bad.any():
            centre = np.broadcast_to(self.centre[None, :], ey.shape)
            width = np.broadcast_to(np.where(np.isfinite(self.a), self.b - self.a, 1.0)[None, :], ey.shape)
            ey = np.where(bad, centre, ey)
            var = np.where(bad, width * width / 12.0, var)
        return logz, ey, var + ey * ey


def _lse0(x: np.ndarray) -> np.ndarray:
    """``logsumexp`` over axis 0 (scipy's is ~10x slower on these small arrays)."""
    top = x.max(axis=0)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return top + np.log(np.exp(x - top).sum(axis=0))


def _em(data: _Data, weights, mu, sigma, max_iter: int, tol: float):
    loglik = -math.inf
    for _ in range(max_iter):
        logl, ey, ey2 = data.component_terms(mu, sigma)
        joint = logl + np.log(weights)[:, None]
        norm = _lse0(joint)
        new_loglik = float(np.dot(data.count, norm))
        resp = np.exp(joint - norm[None, :]) * data.count[None, :]
        mass = resp.sum(axis=1)
        if np.any(mass <= 1e-9 * data.count.sum()):
            return None  # a component died: this start is no good
        weights = mass / mass.sum()
        mu = (resp * ey).sum(axis=1) / mass
        sigma = np.sqrt(np.maximum((resp * ey2).sum(axis=1) / mass - mu * mu, _MIN_SIGMA ** 2))
        if not np.isfinite(new_loglik):
            return None
        if new_loglik - loglik < tol * abs(new_loglik):
            loglik = new_loglik
            break
        loglik = new_loglik
    # The likelihood of the final parameters (the loop's value belongs to the previous step).
    logl, _, _ = data.component_terms(mu, sigma)
    loglik = float(np.dot(data.count, _lse0(logl + np.log(weights)[:, None])))
    return weights, mu, sigma, loglik


def fit_lognormal_mixture(sample: Sample, components: int, rng: np.random.Generator,
                          random_starts: int = 6, max_iter: int = 500,
                          tol: float = 1e-9) -> tuple[FittedDistribution, dict, float]:
    """EM fit of a ``components``-lognormal mixture.

    Returns ``(fitted, params, loglik)``; ``params`` lists ``weight``, ``median``, ``sigma`` per
    component and ``loglik`` includes the zero point mass of exact samples. Raises ``ValueError``
    if no start converges (e.g. fewer distinct values than components).
    """
    data = _Data(sample)
    if data.count.size < 3 * components:
        raise ValueError(f"{components}-lognormal mixture: too few distinct values ({data.count.size})")
    y = np.log(sample.pseudo_exact())
    y.sort()
    starts = []
    chunks = np.array_split(y, components)
    starts.append((np.full(components, 1.0 / components), np.array([c.mean() for c in chunks]),
                   np.array([max(c.std(), 0.1) for c in chunks])))
    spread = max(float(y.std()), 0.1)
    for _ in range(random_starts):
        centres = np.sort(rng.choice(y, size=components, replace=False))
        starts.append((np.full(components, 1.0 / components), centres, np.full(components, spread / components)))
    # Short-run EM: every start gets a few iterations, only the most likely ones run to
    # convergence (the usual cheap screen; full runs from every start cost several times more).
    screened = []
    for weights, mu, sigma in starts:
        result = _em(data, weights, mu, np.maximum(sigma, _MIN_SIGMA), _SCREEN_ITER, tol)
        if result is not None:
            screened.append(result)
    screened.sort(key=lambda r: -r[3])
    best = None
    for weights, mu, sigma, _ in screened[:_FINALISTS]:
        result = _em(data, weights, mu, sigma, max_iter, tol)
        if result is not None and (best is None or result[3] > best[3]):
            best = result
    if best is None:
        raise ValueError(f"{components}-lognormal mixture: EM found no solution")
    weights, mu, sigma, loglik = best
    order = np.argsort(mu)
    weights, mu, sigma = weights[order], mu[order], sigma[order]
    # Exact data: the density of X = exp(Y) carries the Jacobian 1/x.
    loglik -= data.log_jacobian
    fitted = FittedDistribution(
        weights, [stats.lognorm(s=s, scale=math.exp(m)) for m, s in zip(mu, sigma)],
        [{"dist": "lognormal", "median": _round(math.exp(m)), "sigma": _round(s)} for m, s in zip(mu, sigma)],
        sample.zero_fraction, float(np.median(sample.pseudo_exact())))
    params = {"components": [{"weight": _round(w), "median": _round(math.exp(m)), "sigma": _round(s)}
                             for w, m, s in zip(weights, mu, sigma)]}
    return fitted, params, loglik + zero_mass_loglik(sample)
