"""Named probability distributions for gaps, lengths and counts.

A scenario writes a distribution as a mapping with a ``dist`` name and that family's
parameters, e.g. ``{dist: lognormal, median: 9, sigma: 1.6}``; a bare number means a constant.
Each spec is a pydantic model (validated at load time, defined in
:mod:`agentsim.config.distributions` and re-exported here); :func:`build` turns it into a
:class:`Sampler` backed by ``scipy.stats`` that draws from the numpy ``Generator`` it is given,
so every component owns its own seeded stream.

Families: constant, exponential, lognormal, gamma, weibull, loglogistic, pareto, uniform,
empirical (sample from given values), mixture (weighted components), fit (a reference
``FILE.yaml#quantity`` to a distribution fitted by ``agentsim fit``).
All families accept ``min``/``max`` clipping and ``round`` (to integers, for token counts).
"""

from __future__ import annotations

from bisect import bisect_right

import numpy as np

from agentsim.config.distributions import (  # noqa: F401  (re-exported: the specs belong to the scenario)
    Constant, DistributionSpec, Empirical, Exponential, FitReference, Gamma, LogLogistic, LogNormal, Mixture,
    MixtureComponent, Pareto, Uniform, Weibull, _Spec,
)


class Sampler:
    """Draws samples of one distribution from a given numpy Generator."""

    def __init__(self, spec: _Spec):
        self.spec = spec

    def _raw(self, rng: np.random.Generator, n: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _raw_one(self, rng: np.random.Generator) -> float:
        """One raw draw: the same value, and the same stream position afterwards, as
        ``_raw(rng, 1)[0]``. Subclasses override it when they can skip building arrays."""
        return self._raw(rng, 1)[0]

    def sample(self, rng: np.random.Generator, n: int | None = None) -> float | np.ndarray:
        """One float (``n is None``) or an array of ``n`` samples, clipped and rounded per spec.

        One draw takes a scalar path (the simulation draws every gap and length singly, so
        numpy's per-call array overhead dominated); it returns exactly ``sample(rng, 1)[0]``."""
        spec = self.spec
        if n is None:
            value = self._raw_one(rng)
            # np.clip(v, lo, hi) is minimum(maximum(v, lo), hi): the same comparisons in order.
            if spec.min is not None and value < spec.min:
                value = spec.min
            if spec.max is not None and value > spec.max:
                value = spec.max
            return float(np.rint(value)) if spec.round else float(value)
        values = np.asarray(self._raw(rng, n), dtype=float)
        if spec.min is not None or spec.max is not None:
            values = np.clip(values, spec.min, spec.max)
        if spec.round:
            values = np.rint(values)
        return values

    def mean(self) -> float:
        """The mean (before clipping); used for sizing and summaries."""
        raise NotImplementedError


class _ScipySampler(Sampler):
    """A ``scipy.stats`` family drawn by ``frozen.rvs``, frozen when the sampler is built (so
    the import of ``scipy.stats``, about a second, happens before a run, not in its event
    loop). :class:`_DirectSampler` freezes only on first use: its draws do not need scipy, and
    a run whose families all draw directly and never ask for a mean does not import it."""

    def __init__(self, spec: _Spec, make_frozen, lazy: bool = False):
        super().__init__(spec)
        self._make_frozen = make_frozen
        self._frozen = None if lazy else make_frozen(_scipy_stats())

    @property
    def frozen(self):
        if self._frozen is None:
            self._frozen = self._make_frozen(_scipy_stats())
        return self._frozen

    def _raw(self, rng, n):
        return self.frozen.rvs(size=n, random_state=rng)

    def mean(self) -> float:
        return float(self.frozen.mean())


class _DirectSampler(_ScipySampler):
    """A scipy family whose variates are one numpy draw and an affine map: ``draw(rng, size) *
    scale + loc``, exactly what ``frozen.rvs`` computes (scipy's ``_rvs`` of the family, then
    ``vals * scale + loc``), so the same stream gives the same floats. It skips ``rvs``'s
    per-call argument checking and broadcasting (~90% of a single draw's cost), which the
    simulation pays for every sampled gap and length."""

    def __init__(self, spec: _Spec, make_frozen, draw, scale: float, loc: float):
        super().__init__(spec, make_frozen, lazy=True)
        self.draw = draw  # draw(rng, size): numpy's standard variates; size None gives a scalar
        self.scale = scale
        self.loc = loc

    def _raw(self, rng, n):
        return self.draw(rng, n) * self.scale + self.loc

    def _raw_one(self, rng):
        # ``draw(rng, None)`` is ``draw(rng, 1)[0]`` without the array: numpy's Generator gives
        # the same variate for size=None as for size=1, and np.exp runs the same loop on a scalar
        # (checked bit for bit in tests/test_distributions.py); the affine map is the same IEEE
        # arithmetic.
        return self.draw(rng, None) * self.scale + self.loc


class _ConstantSampler(Sampler):
    def _raw(self, rng, n):
        return np.full(n, self.spec.value)

    def mean(self) -> float:
        return float(self.spec.value)


class _EmpiricalSampler(Sampler):
    def __init__(self, spec: Empirical):
        super().__init__(spec)
        self.values = np.asarray(spec.values, dtype=float)

    def _raw(self, rng, n):
        return self.values[rng.integers(0, len(self.values), size=n)]

    def mean(self) -> float:
        return float(self.values.mean())


class _MixtureSampler(Sampler):
    def __init__(self, spec: Mixture):
        super().__init__(spec)
        weights = np.array([c.weight for c in spec.components], dtype=float)
        self.weights = weights / weights.sum()
        self.parts = [build(c.spec) for c in spec.components]
        # What ``rng.choice(len(parts), p=weights)`` computes on every call (cumulative sum,
        # normalised, then a right-sided search of uniform draws): computed once here, so a
        # draw skips choice's per-call validation of ``p`` and gives the same components.
        cdf = self.weights.cumsum()
        cdf /= cdf[-1]
        self.cdf = cdf
        self._cdf_list = cdf.tolist()   # bisect_right on it == searchsorted(side="right")

    def _raw_one(self, rng):
        return self.parts[bisect_right(self._cdf_list, rng.random())].sample(rng)

    def _raw(self, rng, n):
        which = self.cdf.searchsorted(rng.random(n), side="right")
        out = np.empty(n)
        for index, part in enumerate(self.parts):
            mask = which == index
            count = int(mask.sum())
            if count:
                out[mask] = part.sample(rng, count)
        return out

    def mean(self) -> float:
        return float(sum(w * p.mean() for w, p in zip(self.weights, self.parts)))


def _scipy_stats():
    """``scipy.stats``, imported on first need (about a second; most runs never need it)."""
    from scipy import stats

    return stats


def build(spec: _Spec) -> Sampler:
    """A sampler for a validated spec (when each imports ``scipy.stats``: see
    :class:`_ScipySampler`)."""
    if isinstance(spec, Constant):
        return _ConstantSampler(spec)
    if isinstance(spec, Exponential):
        return _DirectSampler(spec, lambda stats: stats.expon(loc=spec.loc, scale=spec.mean),
                              lambda rng, size: rng.standard_exponential(size), spec.mean, spec.loc)
    if isinstance(spec, LogNormal):
        sigma = spec.sigma
        return _DirectSampler(spec, lambda stats: stats.lognorm(s=sigma, loc=spec.loc, scale=spec.median),
                              lambda rng, size: np.exp(sigma * rng.standard_normal(size)), spec.median, spec.loc)
    if isinstance(spec, Gamma):
        shape = spec.shape
        return _DirectSampler(spec, lambda stats: stats.gamma(a=shape, loc=spec.loc, scale=spec.scale),
                              lambda rng, size: rng.standard_gamma(shape, size), spec.scale, spec.loc)
    if isinstance(spec, Weibull):
        return _ScipySampler(spec, lambda stats: stats.weibull_min(c=spec.shape, loc=spec.loc, scale=spec.scale))
    if isinstance(spec, LogLogistic):
        return _ScipySampler(spec, lambda stats: stats.fisk(c=spec.shape, loc=spec.loc, scale=spec.scale))
    if isinstance(spec, Pareto):
        return _ScipySampler(spec, lambda stats: stats.pareto(b=spec.shape, loc=spec.loc, scale=spec.scale))
    if isinstance(spec, Uniform):
        # scipy's uniform draws ``random_state.uniform(0.0, 1.0, size)`` and maps it affinely.
        width = spec.high - spec.low
        return _DirectSampler(spec, lambda stats: stats.uniform(loc=spec.low, scale=width),
                              lambda rng, size: rng.uniform(0.0, 1.0, size), width, spec.low)
    if isinstance(spec, Empirical):
        return _EmpiricalSampler(spec)
    if isinstance(spec, Mixture):
        return _MixtureSampler(spec)
    if isinstance(spec, FitReference):
        raise ValueError(f"fit reference {spec.fit!r} was not resolved; load the scenario with load_scenario()")
    raise TypeError(f"unknown distribution spec {type(spec).__name__}")


FAMILY_NAMES = ["constant", "exponential", "lognormal", "gamma", "weibull", "loglogistic", "pareto", "uniform", "empirical", "mixture", "fit"]
