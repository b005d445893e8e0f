"""Distributions fitted to trace quantities (gaps, service times, token counts, counts).

Public API:

* :class:`Sample` - observations of a quantity >= 0 with their recording resolution.
* :func:`fit_quantity` - fit the candidate families (lognormal, gamma, Weibull, exponential,
  log-logistic, Lomax/Pareto-II, 2- and 3-lognormal mixtures by EM) by maximum likelihood,
  rank them by BIC or AIC, report KS/AD, fitted and empirical quantiles.
* :mod:`agentsim.workload.fitting.quantities` - extraction of the quantities from traces.
* :mod:`agentsim.workload.fitting.report` - the ``FITS.yaml`` document written by ``agentsim fit``.

Methods and choices are explained in ``docs/fitting.md``.
"""

from agentsim.workload.fitting.families import FAMILIES, fit_family
from agentsim.workload.fitting.mixture import fit_lognormal_mixture
from agentsim.workload.fitting.model import FittedDistribution
from agentsim.workload.fitting.sample import Sample
from agentsim.workload.fitting.select import (CRITERIA, DEFAULT_CANDIDATES, MIN_FIT_SAMPLES, Candidate,
                                              QuantityFit, fit_quantity)

__all__ = ["FAMILIES", "fit_family", "fit_lognormal_mixture", "FittedDistribution", "Sample", "CRITERIA",
           "DEFAULT_CANDIDATES", "MIN_FIT_SAMPLES", "Candidate", "QuantityFit", "fit_quantity"]
