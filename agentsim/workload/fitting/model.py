"""A fitted distribution: an optional point mass at zero plus a weighted mixture of scipy laws.

Every candidate family (one component) and every lognormal mixture (2-3 components) becomes a
:class:`FittedDistribution`, so goodness of fit, quantiles and the agentsim spec are computed the
same way for all of them. The continuous part ``G`` is ``sum_k w_k F_k``; with a zero mass ``p0``
the full CDF is ``F(x) = p0 + (1 - p0) G(x)`` for ``x >= 0``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import logsumexp


def log1mexp(t: np.ndarray) -> np.ndarray:
    """``log(1 - exp(t))`` for ``t <= 0``, accurate at both ends (Maechler 2012); -inf at t = 0."""
    t = np.minimum(np.asarray(t, dtype=float), 0.0)
    with np.errstate(divide="ignore"):
        return np.where(t > -np.log(2.0), np.log(-np.expm1(t)), np.log1p(-np.exp(t)))


def log_interval_prob(logcdf, logsf, lo: np.ndarray, hi: np.ndarray, split: float) -> np.ndarray:
    """``log P(lo < X <= hi)`` given vectorised ``logcdf``/``logsf`` callables.

    Differences of CDFs lose all precision in the upper tail (both near 1), so intervals above
    ``split`` (any value near the bulk; only numerics depend on it) use survival functions.
    """
    out = np.empty(lo.shape, dtype=float)
    upper = lo > split
    if upper.any():
        s_lo = logsf(lo[upper])
        s_hi = logsf(hi[upper])
        out[upper] = s_lo + log1mexp(s_hi - s_lo)
    lower = ~upper
    if lower.any():
        with np.errstate(divide="ignore"):
            c_lo = logcdf(lo[lower])
        c_hi = logcdf(hi[lower])
        out[lower] = c_hi + log1mexp(c_lo - c_hi)
    return out


@dataclass
class FittedDistribution:
    """``p0`` at zero plus components ``(weight, frozen scipy distribution, spec dict)``.

    ``specs[k]`` is the agentsim distribution spec of component ``k`` (see
    :mod:`agentsim.workload.distributions`); weights sum to 1.
    """

    weights: np.ndarray
    frozen: list
    specs: list[dict]
    zero_mass: float = 0.0
    _split: float = field(default=1.0, repr=False)

    # -- continuous part G --------------------------------------------------------------------
    def _component_log(self, method: str, x) -> np.ndarray:
        """``log sum_k w_k f_k(x)`` for ``method`` in logpdf/logcdf/logsf; same shape as ``x``."""
        x = np.asarray(x, dtype=float)
        flat = x.reshape(-1)
        logw = np.log(self.weights)[:, None]
        with np.errstate(divide="ignore"):
            parts = np.stack([getattr(dist, method)(flat) for dist in self.frozen])
        return logsumexp(parts + logw, axis=0).reshape(x.shape)

    def cont_logpdf(self, x):
        return self._component_log("logpdf", np.asarray(x, dtype=float))

    def cont_logcdf(self, x):
        return self._component_log("logcdf", np.asarray(x, dtype=float))

    def cont_logsf(self, x):
        return self._component_log("logsf", np.asarray(x, dtype=float))

    def cont_cdf(self, x):
        return np.exp(self.cont_logcdf(x))

    def cont_log_interval(self, lo, hi):
        if len(self.frozen) == 1:
            dist = self.frozen[0]
            return log_interval_prob(dist.logcdf, dist.logsf, lo, hi, self._split)
        logw = np.log(self.weights)[:, None]
        parts = np.stack([log_interval_prob(d.logcdf, d.logsf, lo, hi, self._split) for d in self.frozen])
        return logsumexp(parts + logw, axis=0)

    def cont_ppf(self, q) -> np.ndarray:
        """Quantiles of ``G`` (bisection in log space for mixtures)."""
        q = np.atleast_1d(np.asarray(q, dtype=float))
        if len(self.frozen) == 1:
            return self.frozen[0].ppf(q)
        bounds = np.stack([d.ppf(q) for d in self.frozen])
        lo = np.log(np.maximum(bounds.min(axis=0), 1e-300))
        hi = np.log(bounds.max(axis=0))
        for _ in range(200):
            mid = (lo + hi) / 2.0
            below = self.cont_cdf(np.exp(mid)) < q
            lo = np.where(below, mid, lo)
            hi = np.where(below, hi, mid)
            if np.all(hi - lo < 1e-12):
                break
        return np.exp((lo + hi) / 2.0)

    # -- full distribution (with the zero mass) -------------------------------------------------
    def cdf(self, x):
        x = np.asarray(x, dtype=float)
        return np.where(x < 0, 0.0, self.zero_mass + (1.0 - self.zero_mass) * self.cont_cdf(np.maximum(x, 0.0)))

    def ppf(self, q) -> np.ndarray:
        q = np.atleast_1d(np.asarray(q, dtype=float))
        out = np.zeros_like(q)
        positive = q > self.zero_mass
        if positive.any():
            out[positive] = self.cont_ppf((q[positive] - self.zero_mass) / (1.0 - self.zero_mass))
        return out

    def mean(self) -> float:
        return float((1.0 - self.zero_mass) * sum(w * d.mean() for w, d in zip(self.weights, self.frozen)))

    def spec(self) -> dict:
        """The agentsim distribution spec (a mixture when there are several parts or a zero mass)."""
        parts = [(float(w), s) for w, s in zip(self.weights, self.specs)]
        if self.zero_mass > 0:
            parts = [(self.zero_mass, {"dist": "constant", "value": 0.0})] + [
                ((1.0 - self.zero_mass) * w, s) for w, s in parts]
        if len(parts) == 1:
            return dict(parts[0][1])
        return {"dist": "mixture", "components": [{"weight": _round(w), "spec": s} for w, s in parts]}


def _round(value: float, digits: int = 6) -> float:
    """Round to ``digits`` significant digits so the YAML stays readable (and exact enough)."""
    if value == 0 or not np.isfinite(value):
        return float(value)
    return float(f"{value:.{digits}g}")
