"""The scenario's distribution specs: a ``dist`` name and that family's parameters.

Pydantic models only (validated at load time); :mod:`agentsim.workload.distributions` turns a
spec into a seeded sampler. They live in ``config/`` because the scenario models hold them and
``config/`` imports nothing above it.

A scenario writes a distribution as a mapping, e.g. ``{dist: lognormal, median: 9, sigma: 1.6}``;
a bare number means a constant. Families: constant, exponential, lognormal, gamma, weibull,
loglogistic, pareto, uniform, empirical (sample from given values), mixture (weighted
components), fit (a reference ``FILE.yaml#quantity`` to a distribution fitted by ``agentsim fit``).
All families accept ``min``/``max`` clipping and ``round`` (to integers, for token counts).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Spec(BaseModel):
    # Parameters and clip bounds must be finite: `mean: .inf` or `min: .nan` silently breaks
    # every draw (NaN compares false, so a NaN bound clips nothing).
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    min: float | None = Field(None, description="clip samples below this value")
    max: float | None = Field(None, description="clip samples above this value")
    round: bool = Field(False, description="round samples to integers")

    @model_validator(mode="after")
    def _check_bounds(self):
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max})")
        return self


# Samples beyond the float range are `inf` (numpy warns, and every gap or token count drawn there
# is infinite); a spec whose 1 - 1e-12 quantile already overflows is refused at load time. The
# log of that quantile is checked, so the check itself cannot overflow.
_LOG_FLOAT_MAX = math.log(1.7976931348623157e308)
_TAIL_Z = 7.034  # the standard normal's 1 - 1e-12 quantile
_TAIL_LOG_ODDS = math.log(1e12)  # -log(1e-12): the exponential tail's log survival at 1 - 1e-12


def _check_tail_finite(spec: "_Spec", log_quantile: float, what: str) -> None:
    """Refuse a spec whose far tail (the 1 - 1e-12 quantile) lies beyond the float range.

    A ``max`` clip keeps every sample finite, so a clipped spec is let through."""
    if spec.max is None and log_quantile > _LOG_FLOAT_MAX:
        raise ValueError(f"{what}: samples overflow the float range (the 1 - 1e-12 quantile is "
                         f"e^{log_quantile:.4g}, above the largest float, 1.8e308); give a narrower "
                         f"spread or a `max:` clip")


class Constant(_Spec):
    dist: Literal["constant"] = "constant"
    value: float


class Exponential(_Spec):
    dist: Literal["exponential"]
    mean: float = Field(gt=0)
    loc: float = 0.0


class LogNormal(_Spec):
    """Lognormal given by its ``median`` (= exp(mu)) and the log-space ``sigma``."""

    dist: Literal["lognormal"]
    median: float = Field(gt=0)
    sigma: float = Field(gt=0)
    loc: float = 0.0

    @model_validator(mode="after")
    def _tail(self):
        _check_tail_finite(self, math.log(self.median) + _TAIL_Z * self.sigma,
                           f"sigma {self.sigma:g} with median {self.median:g}")
        return self


class Gamma(_Spec):
    dist: Literal["gamma"]
    shape: float = Field(gt=0)
    scale: float = Field(gt=0)
    loc: float = 0.0


class Weibull(_Spec):
    dist: Literal["weibull"]
    shape: float = Field(gt=0)
    scale: float = Field(gt=0)
    loc: float = 0.0

    @model_validator(mode="after")
    def _tail(self):
        # quantile = scale * (-ln(1 - p)) ** (1 / shape)
        _check_tail_finite(self, math.log(self.scale) + math.log(_TAIL_LOG_ODDS) / self.shape,
                           f"shape {self.shape:g} with scale {self.scale:g}")
        return self


class LogLogistic(_Spec):
    dist: Literal["loglogistic"]
    shape: float = Field(gt=0)
    scale: float = Field(gt=0)
    loc: float = 0.0

    @model_validator(mode="after")
    def _tail(self):
        # quantile = scale * (tail odds) ** (1 / shape), the odds about 1e12 at 1 - 1e-12
        _check_tail_finite(self, math.log(self.scale) + _TAIL_LOG_ODDS / self.shape,
                           f"shape {self.shape:g} with scale {self.scale:g}")
        return self


class Pareto(_Spec):
    dist: Literal["pareto"]
    shape: float = Field(gt=0)
    scale: float = Field(gt=0)
    loc: float = 0.0

    @model_validator(mode="after")
    def _tail(self):
        # quantile = scale * (tail odds) ** (1 / shape), the odds about 1e12 at 1 - 1e-12
        _check_tail_finite(self, math.log(self.scale) + _TAIL_LOG_ODDS / self.shape,
                           f"shape {self.shape:g} with scale {self.scale:g}")
        return self


class Uniform(_Spec):
    dist: Literal["uniform"]
    low: float
    high: float

    @model_validator(mode="after")
    def _order(self):
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) is below low ({self.low})")
        return self


class Empirical(_Spec):
    """Resample uniformly from observed ``values``."""

    dist: Literal["empirical"]
    values: list[float] = Field(min_length=1)


class MixtureComponent(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    weight: float = Field(gt=0)
    spec: "DistributionSpec"


class Mixture(_Spec):
    dist: Literal["mixture"]
    components: list[MixtureComponent] = Field(min_length=1)


class FitReference(_Spec):
    """``fit: fits/claude-code.yaml#tool_gap``: the distribution chosen by ``agentsim fit``.

    The path is resolved relative to the scenario file when the scenario is loaded
    (:func:`agentsim.engine.loading.load_scenario`), which replaces this node by the fitted spec.
    """

    dist: Literal["fit"] = "fit"
    fit: str


_Families = Union[Constant, Exponential, LogNormal, Gamma, Weibull, LogLogistic, Pareto, Uniform, Empirical, Mixture, FitReference]


def _coerce(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return {"dist": "constant", "value": value}
    if isinstance(value, dict) and "dist" not in value:
        if "fit" in value:
            return {"dist": "fit", **value}
        if "value" in value:
            return {"dist": "constant", **value}
    return value


from pydantic import BeforeValidator  # noqa: E402

DistributionSpec = Annotated[_Families, BeforeValidator(_coerce), Field(discriminator="dist")]
MixtureComponent.model_rebuild()
Mixture.model_rebuild()


def support(spec: _Spec) -> tuple[float, float]:
    """The smallest and largest value a sample of ``spec`` can take, after ``min``/``max``
    clipping (before rounding). Unbounded sides are infinite."""
    if isinstance(spec, Constant):
        low, high = spec.value, spec.value
    elif isinstance(spec, Uniform):
        low, high = spec.low, spec.high
    elif isinstance(spec, Empirical):
        low, high = min(spec.values), max(spec.values)
    elif isinstance(spec, Mixture):
        parts = [support(component.spec) for component in spec.components]
        low, high = min(p[0] for p in parts), max(p[1] for p in parts)
    elif isinstance(spec, Pareto):
        low, high = spec.loc + spec.scale, float("inf")
    elif isinstance(spec, (Exponential, LogNormal, Gamma, Weibull, LogLogistic)):
        low, high = spec.loc, float("inf")
    else:  # an unresolved fit reference: nothing known yet
        low, high = float("-inf"), float("inf")
    if spec.min is not None:
        low, high = max(low, spec.min), max(high, spec.min)
    if spec.max is not None:
        low, high = min(low, spec.max), min(high, spec.max)
    return low, high


def require_support_at_least(spec: _Spec, lowest: float, what: str) -> _Spec:
    """``spec`` unchanged if no sample can fall below ``lowest``; ValueError otherwise.

    A negative gap or length is not a thing the workload can have; the engine used to clip such
    draws silently, so ``loc: -1e5`` ran as a distribution concentrated at zero."""
    low, _ = support(spec)
    if low < lowest:
        shown = "unbounded below" if low == float("-inf") else f"can be as low as {low:g}"
        raise ValueError(f"{what} must be >= {lowest:g}, but samples {shown} "
                         f"(fix the parameters or add min: {lowest:g})")
    return spec
