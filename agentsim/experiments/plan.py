"""Capacity planning: the smallest value of one monotone axis that meets every SLO.

``agentsim plan SCENARIO --slo 'ttft_p99_s<=2' --slo 'sla_attainment>=0.99'
--vary hardware.kv_capacity_bytes=20GB..200GB --seeds 3``

Method: the axis ``[LOW, HIGH]`` is cut into a grid of step ``resolution`` (default: 1 for
integer axes, (HIGH-LOW)/32 otherwise). Both ends are simulated first, with every seed. If HIGH
passes and LOW fails, bisection on the grid finds the smallest passing value; if LOW passes and
HIGH fails (e.g. the axis is a load), it finds the largest passing value; if both pass the
answer is LOW; if neither passes there is none in the range. Each bisection step runs all seeds
of one point in parallel. Bisection assumes a monotone axis; after the search every SLO metric
is checked across the points made, and a metric that moves the wrong way by more than the
points' 95% confidence half-widths is reported as a monotonicity violation (the answer is then
suspect).

A point passes when, for every SLO, every seed meets it (``criterion="all"``, the default:
conservative, a tail target should hold whatever the draw) or the mean over seeds does
(``criterion="mean"``). The frontier (every point simulated, sorted by value) carries each SLO
metric's mean and CI, the pass counts, GPU-hours, the deployment's cost per hour (GPUs plus the
memory below HBM, priced per GB-month: :mod:`agentsim.engine.economics`) and cost per million
tokens.

One answer: the value the search found, with its cost per hour. Along a capacity axis the cost
per hour grows with the value (the capacity of every tier below HBM is priced by its tier kind;
HBM comes with the GPUs, so every HBM point costs the same), so the smallest passing value is also the cheapest
passing one; a passing point that costs less per hour than the answer (a non-monotone cost) is
reported as a warning rather than as a second answer.

Runs are persisted like sweep cells (:mod:`agentsim.experiments.store`), so a repeated plan
reuses every run it already made.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd

from agentsim.config.units import UnitError, parse_bandwidth, parse_bytes, parse_duration, parse_flops
from agentsim.errors import InputError, did_you_mean
from agentsim.experiments.runs import RunTask, scenario_key
from agentsim.experiments.stats import mean_ci
from agentsim.experiments.store import SweepStore
from agentsim.experiments.sweep import PlannedRun, ScenarioBuilder, execute

_OPS: dict[str, Callable[[float, float], bool]] = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}
_SLO = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(<=|>=|<|>)\s*(\S+)\s*$")


@dataclass(frozen=True)
class Slo:
    """``metric OP threshold`` on a run summary key, e.g. ``ttft_p99_s <= 2``."""

    metric: str
    op: str
    threshold: float

    def met(self, value: float | None) -> bool:
        return value is not None and not (isinstance(value, float) and math.isnan(value)) and _OPS[self.op](value, self.threshold)

    @property
    def lower_is_better(self) -> bool:
        return self.op in ("<=", "<")

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.threshold:g}"


def _require_metrics(slos: list[Slo], summary: dict) -> None:
    """Raise InputError (``--slo``) naming every SLO metric ``summary`` lacks, with the closest key."""
    missing = [slo.metric for slo in slos if slo.metric not in summary]
    if missing:
        hint = "; ".join(f"{m!r}{did_you_mean(m, summary)}" for m in missing)
        raise InputError(f"unknown summary metric {hint}", "--slo")
    for slo in slos:  # text (the policy's name) or a mapping compares with no threshold
        value = summary[slo.metric]
        if value is not None and not isinstance(value, (int, float)):
            raise InputError(f"summary metric {slo.metric!r} is not a number (it holds {type(value).__name__} "
                             f"values such as {str(value)[:40]!r}); an SLO compares a number with its threshold",
                             "--slo", str(slo))


def check_slo_metrics(builder: ScenarioBuilder, slos: list[Slo]) -> None:
    """Raise InputError for an SLO metric the scenario's summary will not have, before any run.

    The summary's keys depend on the scenario (tiers, TTL, costs), not on how long it runs, so
    a run of one simulated millisecond (no requests, well under a second of wall time, most of
    it building the cluster) tells them, instead of a whole round of the plan.
    """
    from agentsim.engine.simulation import run_scenario

    _require_metrics(slos, run_scenario(builder.resolved([("duration_s", "1ms")])).summary)


def check_plan_options(criterion: str, seeds: int) -> None:
    """Raise InputError for a ``--criterion`` or ``--seeds`` a plan cannot use, before anything
    is written: the seeds of one point are a sweep's runs, under the same limit."""
    from agentsim.experiments.spec import DEFAULT_MAX_SWEEP_RUNS, MAX_SWEEP_RUNS_ENV
    from agentsim.input_files import env_limit

    if criterion not in ("all", "mean"):
        raise InputError(f"criterion must be 'all' or 'mean', got {criterion!r}", "--criterion")
    limit = env_limit(MAX_SWEEP_RUNS_ENV, DEFAULT_MAX_SWEEP_RUNS)
    if seeds > limit:
        raise InputError(f"{seeds:,} seeds per point exceed the limit of {limit:,} runs per sweep "
                         f"(raise it with {MAX_SWEEP_RUNS_ENV}=N if this is intended)", "--seeds")


def parse_slo(text: str) -> Slo:
    """``ttft_p99_s<=2`` (a threshold may carry a unit: ``ttft_p99_s<=500ms``)."""
    match = _SLO.match(text)
    if not match:
        raise InputError(f"expected METRIC<=VALUE or METRIC>=VALUE (also < and >), got {text!r}", "--slo")
    metric, op, raw = match.groups()
    try:
        threshold = float(raw)
    except ValueError:
        try:
            threshold = parse_duration(raw)
        except UnitError:
            raise InputError(f"cannot read the threshold {raw!r} as a number", "--slo", text) from None
    if not math.isfinite(threshold):
        # No value compares with NaN, every one with infinity: the search would answer nothing.
        raise InputError(f"the threshold must be a finite number, got {raw!r}", "--slo", text)
    return Slo(metric, op, threshold)


@dataclass(frozen=True)
class VaryAxis:
    """The axis searched: ``path`` from ``low`` to ``high`` (SI numbers) in steps of ``step``."""

    path: str
    low: float
    high: float
    step: float
    integer: bool
    unit_scale: float = 1.0     # display: value / unit_scale followed by unit_suffix
    unit_suffix: str = ""

    @property
    def steps(self) -> int:
        return max(1, math.ceil((self.high - self.low) / self.step - 1e-9))

    def value(self, k: int) -> float | int:
        value = min(self.low + k * self.step, self.high)
        return int(round(value)) if self.integer else value

    def label(self, value: float) -> str:
        if self.integer:
            return str(int(value))
        return f"{value / self.unit_scale:.4g}{self.unit_suffix}"


_NUMBER_PART = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*$")


def parse_vary(text: str, builder: ScenarioBuilder, resolution: str | None = None) -> VaryAxis:
    """``PATH=LOW..HIGH`` with optional units (``60GB..400GB``); integer bounds give an integer axis."""
    if "=" not in text or ".." not in text.split("=", 1)[1]:
        raise InputError(f"expected PATH=LOW..HIGH, got {text!r}", "--vary")
    path, bounds = text.split("=", 1)
    path = path.strip()
    low_raw, high_raw = (part.strip() for part in bounds.split("..", 1))
    integer = _is_int(low_raw) and _is_int(high_raw)
    low = _option_number(builder, path, low_raw, "--vary", text)
    high = _option_number(builder, path, high_raw, "--vary", text)
    if not (math.isfinite(low) and math.isfinite(high)):
        raise InputError(f"LOW and HIGH must be finite numbers (got {low:g} and {high:g})", "--vary", text)
    if not low < high:
        raise InputError(f"LOW must be smaller than HIGH (got {low:g} and {high:g})", "--vary", text)
    match = _NUMBER_PART.match(low_raw)
    scale, suffix = 1.0, ""
    if match and match.group(2) and float(match.group(1)) != 0:
        scale, suffix = low / float(match.group(1)), match.group(2)
    if resolution is not None:
        _check_resolution_unit(resolution, low_raw)
        step = _option_number(builder, path, resolution, "--resolution", resolution)
        if not math.isfinite(step) or step <= 0:
            raise InputError(f"the resolution must be positive, got {resolution!r}", "--resolution")
        if not (high - low) / step <= MAX_GRID_STEPS:
            raise InputError(f"a resolution of {resolution} divides {low_raw}..{high_raw} into "
                             f"{(high - low) / step:.3g} steps, more than the {MAX_GRID_STEPS:.3g} a float "
                             "axis can tell apart; choose a coarser one", "--resolution")
    else:
        # About 32 grid steps, rounded down to a 1/2/2.5/5 x 10^k step in the bounds' unit so
        # the values tried read well (20GB..200GB -> 5GB).
        step = 1.0 if integer else _nice((high - low) / scale / 32.0) * scale
    if integer:
        step = max(1.0, float(round(step)))
    axis = VaryAxis(path=path, low=low, high=high, step=step, integer=integer, unit_scale=scale, unit_suffix=suffix)
    # Both ends must be valid scenarios: a bisection between invalid ends only fails, after
    # writing runs (an unknown path, a value above a limit or of the wrong type).
    for value in (axis.value(0), axis.value(axis.steps)):
        try:
            builder.resolved_data([(path, value)])
        except InputError as exc:
            raise InputError(f"{path}={axis.label(value)} is not a valid scenario: {exc.render()}", "--vary", text) from None
    return axis


#: Grid steps of a search at most: a float has 53 bits, so finer steps name the same values.
MAX_GRID_STEPS = 2.0 ** 52


def _unit_kinds(raw: str) -> set[str]:
    """The kinds of unit (bytes, time, bandwidth, flops) ``raw``'s suffix reads as; empty for a
    plain number."""
    match = _NUMBER_PART.match(raw)
    if not match or not match.group(2):
        return set()
    kinds = set()
    for kind, parse in (("bytes", parse_bytes), ("time", parse_duration), ("bandwidth", parse_bandwidth),
                        ("flops", parse_flops)):
        try:
            parse(raw)
            kinds.add(kind)
        except (UnitError, ValueError):
            pass
    return kinds


def _check_resolution_unit(resolution: str, low_raw: str) -> None:
    """InputError for a resolution in a unit of another kind than the axis bounds (``2s`` on
    ``1GB..8GB`` was read as 2 bytes)."""
    have, want = _unit_kinds(resolution), _unit_kinds(low_raw)
    if have and want and not have & want:
        raise InputError(f"the resolution {resolution!r} is a {'/'.join(sorted(have))} but the axis bounds "
                         f"({low_raw}) are {'/'.join(sorted(want))}", "--resolution")


def _option_number(builder: ScenarioBuilder, path: str, raw: str, option: str, text: str) -> float:
    """``raw`` (from ``option``) as a number for ``path``; its error is blamed on the option,
    since the value is on no line of the scenario file."""
    try:
        return builder.to_number(path, _yaml_scalar(raw))
    except InputError as exc:
        raise InputError(exc.message, option, text) from None


def _nice(x: float) -> float:
    """The largest of 1, 2, 2.5, 5 times a power of ten not above ``x``."""
    if x <= 0:
        return x
    power = 10.0 ** math.floor(math.log10(x))
    for mult in (5.0, 2.5, 2.0, 1.0):
        if mult * power <= x * (1 + 1e-9):
            return mult * power
    return power


def _is_int(text: str) -> bool:
    return re.fullmatch(r"[-+]?\d+", text) is not None


def _yaml_scalar(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            continue
    return text


@dataclass
class PointResult:
    value: float
    summaries: list[dict]
    errors: list[str]
    passed: bool = False
    slo_passes: dict[str, int] = field(default_factory=dict)


@dataclass
class PlanReport:
    axis: VaryAxis
    slos: list[Slo]
    seeds: list[int]
    criterion: str
    answer: float | None
    direction: str          # "smallest" or "largest" passing value sought
    message: str
    frontier: pd.DataFrame
    warnings: list[str]
    runs_made: int = 0
    runs_reused: int = 0


class Planner:
    """Bisection over ``axis`` with ``seeds`` per point; runs go through ``executor`` into ``store``."""

    def __init__(self, builder: ScenarioBuilder, axis: VaryAxis, slos: list[Slo], seeds: list[int], executor,
                 store: SweepStore, criterion: str = "all",
                 on_point: Callable[[PointResult], None] | None = None):
        if criterion not in ("all", "mean"):
            raise InputError(f"criterion must be 'all' or 'mean', got {criterion!r}", "--criterion")
        if not slos:
            raise InputError("give at least one --slo", "command line")
        self.builder, self.axis, self.slos, self.seeds = builder, axis, slos, seeds
        self.executor, self.store, self.criterion, self.on_point = executor, store, criterion, on_point
        self.points: dict[int, PointResult] = {}
        self.runs_made = 0
        self.runs_reused = 0

    def evaluate(self, ks: list[int]) -> list[PointResult]:
        """Simulate every seed of the grid points ``ks`` (those not simulated yet), in parallel."""
        planned, ids = [], {}
        for k in ks:
            if k in self.points:
                continue
            value = self.axis.value(k)
            try:
                data = self.builder.resolved_data([(self.axis.path, value)])
                cell_id, error = scenario_key(data), None
            except InputError as exc:
                data, error = None, exc.render()
                cell_id = "invalid-" + scenario_key(self.builder.raw_data([(self.axis.path, value)]))
            ids[k] = cell_id
            self.store.write_cell(cell_id, {"label": f"{self.axis.path}={self.axis.label(value)}",
                                            "assignments": [[self.axis.path, value]], "plan": True})
            for seed in self.seeds:
                task = RunTask(cell_id, seed, {**data, "seed": seed}) if data is not None else None
                planned.append(PlannedRun(k, cell_id, seed, task=task, error=error))
        counts = execute(planned, self.store, self.executor)
        self.runs_made += counts.ran
        self.runs_reused += counts.skipped
        for k, cell_id in ids.items():
            summaries, errors = [], []
            for seed in self.seeds:
                summary = self.store.load_summary(cell_id, seed)
                if summary is None:
                    errors.append(self.store.load_error(cell_id, seed) or "missing")
                else:
                    summaries.append(summary)
            point = PointResult(value=self.axis.value(k), summaries=summaries, errors=errors)
            if errors:
                # A run that fails says nothing about the SLOs; bisecting on it would give a wrong
                # answer. Stop and say why (an invalid value, e.g. more KV than HBM, or a bug).
                raise InputError(f"{len(errors)} of {len(self.seeds)} runs failed at {self.axis.path}="
                                 f"{self.axis.label(point.value)}: {errors[0]} (details in {self.store.cell_dir(cell_id)})",
                                 "--vary")
            self._judge(point)
            self.points[k] = point
            if self.on_point:
                self.on_point(point)
        return [self.points[k] for k in ks]

    def _judge(self, point: PointResult) -> None:
        if point.summaries:
            _require_metrics(self.slos, point.summaries[0])
        passes = {}
        for slo in self.slos:
            values = [s.get(slo.metric) for s in point.summaries]
            passes[str(slo)] = sum(slo.met(v) for v in values)
        point.slo_passes = passes
        if point.errors or not point.summaries:
            point.passed = False
        elif self.criterion == "all":
            point.passed = all(count == len(self.seeds) for count in passes.values())
        else:
            point.passed = all(slo.met(_mean([s.get(slo.metric) for s in point.summaries])) for slo in self.slos)

    def run(self) -> PlanReport:
        lo_k, hi_k = 0, self.axis.steps
        low, high = self.evaluate([lo_k, hi_k])
        label = self.axis.label
        if low.passed and high.passed:
            answer, direction = lo_k, "smallest"
            message = f"every value meets the SLOs; the smallest is LOW = {label(low.value)}"
        elif not low.passed and not high.passed:
            answer, direction = None, "smallest"
            errors = (low.errors + high.errors)[:1]
            message = (f"no value in [{label(low.value)}, {label(high.value)}] meets the SLOs" +
                       (f" (a run failed: {errors[0]})" if errors else ""))
        else:
            increasing = high.passed  # passing side is the high end: search the smallest passing value
            direction = "smallest" if increasing else "largest"
            fail_k, pass_k = (lo_k, hi_k) if increasing else (hi_k, lo_k)
            while abs(pass_k - fail_k) > 1:
                mid = (fail_k + pass_k) // 2
                (point,) = self.evaluate([mid])
                if point.passed:
                    pass_k = mid
                else:
                    fail_k = mid
            answer = pass_k
            message = (f"{direction} {self.axis.path} meeting every SLO: {label(self.axis.value(pass_k))} "
                       f"({label(self.axis.value(fail_k))} fails; resolution {label(self.axis.step) if not self.axis.integer else int(self.axis.step)})")
        frontier = self.frontier()
        warnings = self.monotonicity_warnings(frontier, direction)
        answer_value = self.axis.value(answer) if answer is not None else None
        if answer_value is not None:
            message += self._cost_note(frontier, answer_value, warnings)
        return PlanReport(axis=self.axis, slos=self.slos, seeds=self.seeds, criterion=self.criterion,
                          answer=answer_value, direction=direction, message=message, frontier=frontier,
                          warnings=warnings, runs_made=self.runs_made, runs_reused=self.runs_reused)

    def frontier(self) -> pd.DataFrame:
        """One row per point simulated, sorted by value."""
        rows = []
        for k in sorted(self.points):
            point = self.points[k]
            row: dict[str, Any] = {"value": float(point.value), "value_label": self.axis.label(point.value),
                                   "seeds": len(point.summaries), "errors": len(point.errors), "passed": point.passed}
            for slo in self.slos:
                n, mean, std, half = mean_ci([_num(s.get(slo.metric)) for s in point.summaries])
                row[f"{slo.metric}_mean"] = mean
                row[f"{slo.metric}_ci_half_width"] = half
                row[f"{slo}_passes"] = point.slo_passes.get(str(slo), 0)
            for metric in ("cost_usd_per_hour", "memory_usd_per_hour", "total_cost_per_million_tokens_usd",
                           "cost_per_million_tokens_usd", "cost_per_million_input_tokens_usd",
                           "cost_per_million_output_tokens_usd", "gpu_hours", "hit_ratio"):
                row[metric] = _mean([s.get(metric) for s in point.summaries])
            rows.append(row)
        return pd.DataFrame(rows)

    def _cost_note(self, frontier: pd.DataFrame, answer_value: float, warnings: list[str]) -> str:
        """The answer's cost per hour, as a sentence to append to the answer; adds a warning to
        ``warnings`` if a passing point costs less per hour than the answer."""
        if not len(frontier) or "cost_usd_per_hour" not in frontier:
            return ""
        row = frontier.loc[(frontier.value - float(answer_value)).abs().idxmin()]
        cost, memory = row.cost_usd_per_hour, row.memory_usd_per_hour
        if cost != cost:
            return ""
        note = f"; it costs ${cost:,.4g}/h (GPUs ${cost - memory:,.4g}/h + memory below HBM ${memory:,.4g}/h)"
        costs = frontier.cost_usd_per_hour.to_numpy(dtype=float)
        if len(costs) > 1 and abs(costs.max() - costs.min()) <= 1e-9 * max(1.0, abs(costs.max())):
            note += (f"; every point of {self.axis.path} costs the same per hour"
                     + (" (HBM comes with the GPUs)" if self.axis.path == "hardware.kv_capacity_bytes" else ""))
        passing = frontier[frontier.passed]
        cheaper = passing[passing.cost_usd_per_hour < cost - 1e-9 * max(1.0, cost)]
        if len(cheaper):
            best = cheaper.loc[cheaper.cost_usd_per_hour.idxmin()]
            warnings.append(f"cost per hour is not monotone along {self.axis.path}: {best.value_label} also passes "
                            f"and costs ${best.cost_usd_per_hour:,.4g}/h, less than the answer")
        return note

    def monotonicity_warnings(self, frontier: pd.DataFrame, direction: str) -> list[str]:
        """SLO metrics that move the wrong way between neighbouring points by more than their CIs.

        With the passing side at high values (``direction == "smallest"``) a ``<=`` metric should
        not increase with the value and a ``>=`` metric should not decrease; the reverse for
        ``"largest"``.
        """
        warnings = []
        if len(frontier) < 2:
            return warnings
        for slo in self.slos:
            means = frontier[f"{slo.metric}_mean"].to_numpy(dtype=float)
            halves = frontier[f"{slo.metric}_ci_half_width"].fillna(0.0).to_numpy(dtype=float)
            sign = 1.0 if (slo.lower_is_better == (direction == "smallest")) else -1.0  # +1: should fall with value
            for i in range(len(means) - 1):
                rise = (means[i + 1] - means[i]) * sign
                if math.isfinite(rise) and rise > halves[i] + halves[i + 1] + 1e-12 * max(1.0, abs(means[i])):
                    warnings.append(f"{slo.metric} is not monotone: {means[i]:.4g} at {frontier.value_label.iloc[i]} "
                                    f"but {means[i + 1]:.4g} at {frontier.value_label.iloc[i + 1]}")
        return warnings


def _num(value) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def _mean(values) -> float:
    numbers = [_num(v) for v in values]
    numbers = [v for v in numbers if math.isfinite(v)]
    return sum(numbers) / len(numbers) if numbers else math.nan
