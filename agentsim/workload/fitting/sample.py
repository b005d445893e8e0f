"""Observed samples of one positive quantity, grouped for fast likelihoods.

Trace quantities are recorded with a finite *resolution*: WEKA ``think_time`` in whole seconds,
``api_time`` in hundredths of a second, token counts as integers. A recorded value ``v`` then
stands for the unknown true value somewhere in ``[v - r/2, v + r/2)`` (clipped at 0), and the
honest likelihood of a continuous model is the probability of that interval (interval censoring),
not the density at ``v``. A recorded 0 needs no special case: it is the interval ``[0, r/2)``.

With ``resolution == 0`` values are taken as exact and the likelihood is the density. Exact zeros
then have probability zero under every continuous family, so they are split off as a point mass
(:attr:`Sample.zero_fraction`) and the families are fitted to the positive part.

Values are grouped by unique value with counts, so a likelihood evaluation costs one scipy call
over a few hundred or thousand distinct values instead of one per observation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Sample:
    """Observations of a quantity that is >= 0.

    Attributes:
        values: the recorded values (any order), all finite and >= 0.
        resolution: the recording step (e.g. 1.0 for whole seconds); 0 means exact values.
    """

    values: np.ndarray
    resolution: float = 0.0

    def __post_init__(self):
        values = np.asarray(self.values, dtype=float).ravel()
        if values.size and (not np.all(np.isfinite(values)) or values.min() < 0):
            raise ValueError("sample values must be finite and >= 0")
        if self.resolution < 0:
            raise ValueError("resolution must be >= 0")
        object.__setattr__(self, "values", values)

    @property
    def n(self) -> int:
        return int(self.values.size)

    @property
    def censored(self) -> bool:
        """True when values are interval-censored (resolution > 0)."""
        return self.resolution > 0

    @property
    def zero_count(self) -> int:
        return int(np.count_nonzero(self.values == 0))

    @property
    def zero_fraction(self) -> float:
        """Mass of the explicit point at zero: only for exact samples (censored zeros are intervals)."""
        if self.censored or self.n == 0:
            return 0.0
        return self.zero_count / self.n

    def grouped(self) -> "Grouped":
        """Unique observations (without the point-mass zeros of exact samples) with counts."""
        values = self.values if self.censored else self.values[self.values > 0]
        unique, counts = np.unique(values, return_counts=True)
        if self.censored:
            half = self.resolution / 2.0
            lo = np.maximum(unique - half, 0.0)
            hi = unique + half
        else:
            lo = hi = unique
        return Grouped(unique, counts.astype(float), lo, hi, self.censored)

    def pseudo_exact(self) -> np.ndarray:
        """Deterministic stand-ins for the true values, used only to start optimisers.

        The midpoint of each interval, except that an interval starting at 0 uses a quarter of the
        resolution (the midpoint of ``[0, r/2)``), so logs stay finite.
        """
        values = self.values if self.censored else self.values[self.values > 0]
        if self.censored:
            return np.where(values > 0, values, self.resolution / 4.0)
        return values

    def jittered(self, rng: np.random.Generator) -> np.ndarray:
        """Positive-part values with censored ones spread uniformly over their interval (for KS/AD)."""
        if not self.censored:
            return np.sort(self.values[self.values > 0])
        half = self.resolution / 2.0
        lo = np.maximum(self.values - half, 0.0)
        hi = self.values + half
        return np.sort(lo + rng.random(self.values.size) * (hi - lo))


@dataclass(frozen=True)
class Grouped:
    """Unique observations ``value`` seen ``count`` times, standing for ``[lo, hi)`` (or exact)."""

    value: np.ndarray
    count: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    censored: bool

    @property
    def total(self) -> float:
        return float(self.count.sum())
