"""The ``FITS.yaml`` document written by ``agentsim fit`` and read by scenario fit references.

Layout (every ``spec`` is a valid :data:`agentsim.workload.distributions.DistributionSpec`)::

    provenance: {sources: [...], files: N, format: weka, date: ..., command: ..., seed: 0, criterion: bic}
    quantities:
      tool_gap:
        description: ...
        unit: s
        spec: {dist: mixture, components: [...], min: 0.0}
        family: lognormal_mix3
        parameters: {components: [{weight, median, sigma}, ...]}
        n: 6906
        resolution: 1.0          # recording step; > 0 means an interval-censored fit
        zeros: 37                # observations recorded as 0
        criterion: bic
        scores: {loglik, aic, bic, ks, ad}
        runners_up: [{family, n_params, loglik, aic, bic, ks, ad}, ...]   # best first
        quantiles: {p50, p90, p99}            # of the fitted law (before rounding/clipping)
        empirical_quantiles: {p50, p90, p99}
        excluded: {reason: count}
        provenance: {files, format, date, command}
    skipped: {quantity: reason}   # quantities with no observations in these traces
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from pydantic import TypeAdapter

from agentsim.workload.distributions import DistributionSpec
from agentsim.workload.fitting.model import _round
from agentsim.workload.fitting.quantities import Quantity
from agentsim.workload.fitting.select import (DEFAULT_CANDIDATES, QUANTILE_LEVELS, QuantityFit, empirical_quantiles,
                                              fit_quantity)

_SPEC = TypeAdapter(DistributionSpec)


def _zero_inflated(quantity: Quantity, part: QuantityFit, part_extra: dict) -> dict:
    """``subagents_per_call``: 0 with probability 1 - p, else the fan-out distribution."""
    p = float(quantity.spawn_probability or 0.0)
    sample = quantity.sample
    if p <= 0.0:
        spec = {"dist": "constant", "value": 0.0}
        family, quantiles = "constant", {key: 0.0 for key in QUANTILE_LEVELS}
    else:
        inner = {**part.spec, **part_extra}
        spec = {"dist": "mixture", "components": [
            {"weight": _round(1.0 - p), "spec": {"dist": "constant", "value": 0.0}},
            {"weight": _round(p), "spec": inner}]}
        family = f"zero_inflated({part.chosen.family})"
        quantiles = {}
        for key, q in QUANTILE_LEVELS.items():
            if q <= 1.0 - p:
                quantiles[key] = 0.0
            else:
                level = (q - (1.0 - p)) / p
                if part.chosen.fitted is None:  # empirical fan-out
                    quantiles[key] = _round(float(np.quantile(np.asarray(part.chosen.params["values"]), level)))
                else:
                    quantiles[key] = _round(float(part.chosen.fitted.ppf(level)[0]))
    return {
        "spec": {**spec, **quantity.spec_extra},
        "family": family,
        "parameters": {"spawn_probability": _round(p),
                       "rate": _round(float(sample.values.mean()) if sample.n else 0.0),
                       "fanout_family": part.chosen.family},
        "quantiles": quantiles,
    }


def fit_document(quantities: list[Quantity], *, provenance: dict, seed: int = 0, criterion: str = "bic",
                 candidates=DEFAULT_CANDIDATES,
                 progress: Callable[[str, QuantityFit | str | None], None] | None = None) -> dict:
    """Fit every quantity and build the FITS document (plain dict, ready for ``yaml.safe_dump``).

    ``progress(name, fit)`` is called per quantity: ``fit`` is the QuantityFit, the family name of
    a derived quantity, or None for a skipped one.
    """
    short_provenance = {key: provenance[key] for key in ("files", "format", "date", "command") if key in provenance}
    document: dict = {"provenance": provenance, "quantities": {}}
    skipped: dict[str, str] = {}
    fits: dict[str, QuantityFit] = {}
    by_name = {q.name: q for q in quantities}
    for index, quantity in enumerate(quantities):
        if quantity.sample.n == 0:
            skipped[quantity.name] = "no observations in these traces"
            if progress:
                progress(quantity.name, None)
            continue
        entry: dict = {"description": quantity.description, "unit": quantity.unit}
        part_name = quantity.zero_inflated_by
        if part_name is not None and part_name in fits:
            # Not fitted on its own: a spawn probability times the fitted fan-out.
            fit = None
            entry.update(_zero_inflated(quantity, fits[part_name], by_name[part_name].spec_extra))
            entry["n"] = quantity.sample.n
            entry["resolution"] = quantity.sample.resolution
            entry["zeros"] = quantity.sample.zero_count
            entry["empirical_quantiles"] = empirical_quantiles(quantity.sample.values)
        else:
            fit = fit_quantity(quantity.sample, seed=seed + index, candidates=candidates, criterion=criterion)
            fits[quantity.name] = fit
            entry.update({
                "spec": {**fit.spec, **quantity.spec_extra},
                "family": fit.chosen.family,
                "parameters": fit.chosen.params,
                "n": fit.n,
                "resolution": quantity.sample.resolution,
                "zeros": fit.zero_count,
                "criterion": fit.criterion,
                "scores": {k: v for k, v in fit.chosen.scores().items() if k not in ("family",)},
                "runners_up": [c.scores() for c in fit.runners_up],
                "quantiles": fit.quantiles,
                "empirical_quantiles": fit.empirical_quantiles,
            })
        if quantity.excluded:
            entry["excluded"] = dict(quantity.excluded)
        entry["provenance"] = dict(short_provenance)  # a copy: shared objects become YAML anchors
        _SPEC.validate_python(entry["spec"])  # a bug here must never reach a scenario
        document["quantities"][quantity.name] = entry
        if progress:
            progress(quantity.name, fit if fit is not None else entry["family"])
    if skipped:
        document["skipped"] = skipped
    return document
