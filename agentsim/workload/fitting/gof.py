"""Goodness-of-fit statistics: Kolmogorov-Smirnov ``D`` and Anderson-Darling ``A^2``.

Both compare the continuous part of a fitted law with the positive part of the sample. Rounded
(censored) values would put steps into the empirical CDF that no continuous law has, so they are
first spread uniformly over their rounding interval with a seeded generator (the jitter is used
for these statistics only, never for the likelihood). The parameters were estimated from the same
data, so the classical p-values do not apply; the statistics are reported for comparing families
and for spotting a bad fit (``A^2`` weights the tails, where gap distributions matter most).
"""

from __future__ import annotations

import numpy as np

from agentsim.workload.fitting.model import FittedDistribution

_LOG_FLOOR = -745.0  # log of the smallest double: keeps A^2 finite when a tail value is "impossible"


def ks_statistic(dist: FittedDistribution, sorted_x: np.ndarray) -> float:
    """``sup |F_n - G|`` for sorted positive observations."""
    n = sorted_x.size
    if n == 0:
        return float("nan")
    cdf = dist.cont_cdf(sorted_x)
    i = np.arange(1, n + 1)
    return float(max(np.max(i / n - cdf), np.max(cdf - (i - 1) / n)))


def ad_statistic(dist: FittedDistribution, sorted_x: np.ndarray) -> float:
    """``A^2 = -n - (1/n) sum_i (2i - 1) [log G(x_i) + log(1 - G(x_{n+1-i}))]``."""
    n = sorted_x.size
    if n == 0:
        return float("nan")
    log_cdf = np.maximum(dist.cont_logcdf(sorted_x), _LOG_FLOOR)
    log_sf = np.maximum(dist.cont_logsf(sorted_x), _LOG_FLOOR)
    i = np.arange(1, n + 1)
    return float(-n - np.sum((2 * i - 1) * (log_cdf + log_sf[::-1])) / n)
