"""Sweep files: a base scenario, axes over scenario paths, and seeds.

A sweep file (YAML)::

    name: policy-vs-dram
    base: ../scenarios/coding-agents.yaml     # relative to the sweep file
    set: {duration_s: 10m}                    # fixed overrides applied to every cell (optional)
    seeds: 3                                  # seeds base.seed, base.seed+1, ...; or a list [1, 7, 9]
    axes:
      grid:                                   # cartesian product
        cache.eviction.name: [lru, fifo]
        hardware.kv_capacity_bytes: [60GB, 120GB]
      zip:                                    # values taken together (equal lengths); or a list of such groups
        serving.max_batch_requests: [32, 64]
        serving.prefill_chunk_tokens: [4096, 8192]
      random:                                 # `samples` random points, crossed with the rest
        samples: 4
        seed: 0
        params:
          workload.agent_classes.coding.arrival.concurrent: {randint: [8, 32]}
          hardware.kv_capacity_bytes: {loguniform: [30GB, 240GB]}
          cache.block_tokens: {choice: [16, 64]}
    baseline: {cache.eviction.name: lru}      # paired differences are taken against this cell
    metrics: [hit_ratio, ttft_p99_s]          # printed statistics (all numeric metrics are stored)

A **cell** is one assignment of every axis; a **run** is a cell with one seed. Every cell uses
the same seeds, and the engine seeds each session from ``SeedSequence(seed, spawn_key=...)``, so
all cells see the same sampled workload for a seed (common random numbers): differences between
cells at one seed come from the configuration, not from the draw.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentsim.config.loader import read_yaml, validation_error_to_input_error
from agentsim.config.yaml_paths import locate
from agentsim.config.scenario import check_output_name
from agentsim.errors import FieldError, InputError
from agentsim.input_files import env_limit, resolved_path

DEFAULT_METRICS = ["hit_ratio", "ttft_p50_s", "ttft_p99_s", "tpot_p99_s", "e2e_p99_s", "sla_attainment",
                   "cost_per_million_tokens_usd", "provider_bill_usd"]


#: Most runs (cells x seeds) one sweep may ask for; far above any study in docs/ (a few
#: hundred). Raised on purpose with the environment variable.
DEFAULT_MAX_SWEEP_RUNS = 100_000
MAX_SWEEP_RUNS_ENV = "AGENTSIM_MAX_SWEEP_RUNS"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class RandomParam(_Strict):
    """One randomly sampled path: exactly one of uniform, loguniform, randint (inclusive), choice.
    Bounds may carry units (``30GB``); they are converted through the scenario schema."""

    uniform: tuple[Any, Any] | None = None
    loguniform: tuple[Any, Any] | None = None
    randint: tuple[int, int] | None = None
    choice: list[Any] | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _exactly_one(self):
        given = [name for name in ("uniform", "loguniform", "randint", "choice") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of uniform, loguniform, randint, choice")
        if self.randint is not None and self.randint[0] > self.randint[1]:
            raise ValueError("randint needs low <= high")
        return self


class RandomAxes(_Strict):
    samples: int = Field(gt=0, description="random points drawn")
    seed: int = Field(0, ge=0, description="seed of the sampler (not of the simulations)")
    params: dict[str, RandomParam] = Field(min_length=1)


class Axes(_Strict):
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    zip: list[dict[str, list[Any]]] = Field(default_factory=list)
    random: RandomAxes | None = None

    @field_validator("zip", mode="before")
    @classmethod
    def _one_group(cls, value):
        return [value] if isinstance(value, dict) else value

    @field_validator("grid")
    @classmethod
    def _non_empty(cls, value):
        for path, values in value.items():
            if not values:
                raise ValueError(f"axis {path!r} has no values")
        return value

    @model_validator(mode="after")
    def _zip_lengths(self):
        for group in self.zip:
            lengths = {path: len(values) for path, values in group.items()}
            if len(set(lengths.values())) > 1:
                raise ValueError(f"zip axes need equal lengths, got {lengths}")
            if any(n == 0 for n in lengths.values()):
                raise ValueError("zip axes need at least one value")
        seen: set[str] = set()
        paths = list(self.grid) + [p for g in self.zip for p in g] + (list(self.random.params) if self.random else [])
        for path in paths:
            if path in seen:
                raise ValueError(f"path {path!r} appears on more than one axis")
            seen.add(path)
        return self


class SweepSpec(_Strict):
    name: str = "sweep"
    base: str = Field(description="base scenario file, relative to the sweep file")
    set: dict[str, Any] = Field(default_factory=dict, description="overrides applied to every cell")
    seeds: int | list[int] = Field(1, description="number of seeds (from the base scenario's seed) or an explicit list")
    axes: Axes = Field(default_factory=Axes)
    baseline: dict[str, Any] | None = None
    metrics: list[str] = Field(default_factory=lambda: list(DEFAULT_METRICS))

    @field_validator("seeds")
    @classmethod
    def _seeds_ok(cls, value):
        if isinstance(value, int) and value <= 0:
            raise ValueError("seeds must be a positive count or a list of seeds")
        if isinstance(value, list):
            if not value or any(s < 0 for s in value) or len(set(value)) != len(value):
                raise ValueError("seeds must be a non-empty list of distinct non-negative integers")
        return value

    @field_validator("name")
    @classmethod
    def _name_ok(cls, value: str) -> str:
        return check_output_name(value)

    @model_validator(mode="after")
    def _runs_within_limit(self):
        """Cells x seeds counted from the axes' lengths, before any cell is built: a 30^8 grid
        or ``seeds: 1000000000`` is refused at once, also under ``--dry-run``."""
        limit = env_limit(MAX_SWEEP_RUNS_ENV, DEFAULT_MAX_SWEEP_RUNS)
        seeds = self.seeds if isinstance(self.seeds, int) else len(self.seeds)
        cells = 1
        for values in self.axes.grid.values():
            cells *= len(values)
        for group in self.axes.zip:
            cells *= len(next(iter(group.values())))
        if self.axes.random is not None:
            cells *= self.axes.random.samples
        if seeds > limit:
            raise FieldError(("seeds",), f"{seeds:,} seeds exceed the limit of {limit:,} runs per sweep "
                                         f"(raise it with {MAX_SWEEP_RUNS_ENV}=N if this is intended)")
        if cells * seeds > limit:
            raise FieldError(("axes",), f"{cells:,} cells x {seeds:,} seeds = {cells * seeds:,} runs exceed the limit "
                                        f"of {limit:,} runs per sweep (raise it with {MAX_SWEEP_RUNS_ENV}=N if this is intended)")
        return self


@dataclass(frozen=True)
class Cell:
    """One point of the sweep: ``assignments`` is ((path, value), ...) in axis order."""

    index: int
    assignments: tuple[tuple[str, Any], ...]

    @property
    def label(self) -> str:
        return ", ".join(f"{path}={format_value(value, path)}" for path, value in self.assignments) or "(base)"

    def as_dict(self) -> dict[str, Any]:
        return dict(self.assignments)


def format_value(value: Any, path: str = "") -> str:
    """A cell's value as text; a number on a path whose last name carries a unit
    (``hardware.kv_capacity_bytes``) in that unit (``216.5GB``), as a user would write it."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and path:
        from agentsim.config.units import format_by_name

        name = path.rsplit(".", 1)[-1]
        text = format_by_name(name, value)
        if text != format_by_name("", value):
            return text
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


@dataclass
class LoadedSweep:
    """A parsed sweep file: the spec, the base scenario mapping and where it came from."""

    spec: SweepSpec
    source: str
    base_path: Path
    base_data: dict
    base_lines: dict
    lines: dict = field(default_factory=dict)

    def seeds(self) -> list[int]:
        if isinstance(self.spec.seeds, list):
            return list(self.spec.seeds)
        first = int(self.base_data.get("seed", 0) or 0)
        return [first + i for i in range(self.spec.seeds)]

    def location(self, *path) -> str:
        """``line N: a.b`` for a path in the sweep file (for error messages)."""
        return locate(self.lines, tuple(path))


def load_sweep(path: str | Path) -> LoadedSweep:
    """Read and validate a sweep file and its base scenario (raises InputError)."""
    path = Path(path)
    data, lines = read_yaml(path)
    if not isinstance(data, dict):
        raise InputError("a sweep file must be a mapping (base, axes, seeds ...)", str(path), "line 1")
    if "base" not in data and ("workload" in data or "hardware" in data):
        raise InputError("this is a scenario, not a sweep file: a sweep file names its base scenario "
                         "(base: FILE) and the axes to vary (see sweeps/policy-capacity.yaml)", str(path), "line 1")
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise validation_error_to_input_error(exc, str(path), lines, root=SweepSpec) from None
    try:
        base_path = resolved_path(path.parent / spec.base, "base scenario") if not Path(spec.base).is_absolute() else Path(spec.base)
        base_data, base_lines = read_yaml(base_path)
    except InputError as exc:  # blame the sweep file's base: line, and say what is wrong with the file
        raise InputError(f"base scenario {exc.render()}", str(path), locate(lines, ("base",))) from None
    if not isinstance(base_data, dict):
        raise InputError(f"base scenario {base_path} must be a mapping of sections", str(path), locate(lines, ("base",)))
    if "base" in base_data and "axes" in base_data and "workload" not in base_data:
        raise InputError(f"base {base_path} is a sweep file, not a scenario", str(path), locate(lines, ("base",)))
    return LoadedSweep(spec=spec, source=str(path), base_path=base_path, base_data=base_data,
                       base_lines=base_lines, lines=lines)


# --- expanding axes into cells ----------------------------------------------------------------------

def expand_cells(sweep: LoadedSweep, to_number) -> list[Cell]:
    """All cells: grid product x each zip group x random samples (in that nesting order).

    ``to_number(path, raw)`` converts a bound with units (``30GB``) into a number, so random
    sampling is uniform in SI units. Random points are drawn from ``random.seed`` only, so the
    same file always gives the same cells.
    """
    axes = sweep.spec.axes
    factors: list[list[tuple[tuple[str, Any], ...]]] = []
    for path, values in axes.grid.items():
        factors.append([((path, value),) for value in values])
    for group in axes.zip:
        paths = list(group)
        n = len(group[paths[0]])
        factors.append([tuple((path, group[path][i]) for path in paths) for i in range(n)])
    if axes.random is not None:
        factors.append(_random_points(sweep, to_number))
    cells = []
    for index, combo in enumerate(itertools.product(*factors)):
        cells.append(Cell(index=index, assignments=tuple(item for part in combo for item in part)))
    return cells


def _random_points(sweep: LoadedSweep, to_number) -> list[tuple[tuple[str, Any], ...]]:
    random = sweep.spec.axes.random
    rng = np.random.default_rng(random.seed)
    bounds = {}
    for path, param in random.params.items():
        for kind in ("uniform", "loguniform"):
            pair = getattr(param, kind)
            if pair is not None:
                low, high = (to_number(path, pair[0]), to_number(path, pair[1]))
                if not low < high or (kind == "loguniform" and low <= 0):
                    raise InputError(f"{kind} needs 0 < low < high for loguniform, low < high otherwise (got {low:g}, {high:g})",
                                     sweep.source, sweep.location("axes", "random", "params", path, kind))
                bounds[path] = (low, high)
    points = []
    for _ in range(random.samples):
        point = []
        for path, param in random.params.items():  # insertion order: deterministic draws
            if param.choice is not None:
                value = param.choice[int(rng.integers(len(param.choice)))]
            elif param.randint is not None:
                value = int(rng.integers(param.randint[0], param.randint[1] + 1))
            elif param.uniform is not None:
                low, high = bounds[path]
                value = float(rng.uniform(low, high))
            else:
                low, high = bounds[path]
                value = float(np.exp(rng.uniform(np.log(low), np.log(high))))
            point.append((path, value))
        points.append(tuple(point))
    return points


def check_baseline(sweep: LoadedSweep, cells: list[Cell]) -> None:
    """InputError (at the sweep file's ``baseline:`` line) if the baseline names a path that no
    axis varies or a value no cell has: the paired comparison would be empty without a word."""
    baseline = sweep.spec.baseline
    if not baseline or not cells:
        return
    for path, value in baseline.items():
        values = [cell.as_dict()[path] for cell in cells if path in cell.as_dict()]
        if not values:
            raise InputError(f"baseline path {path!r} is not an axis of this sweep", sweep.source,
                             locate(sweep.lines, ("baseline", path)))
        if value not in values:
            shown = ", ".join(dict.fromkeys(format_value(v, path) for v in values))
            raise InputError(f"baseline value {format_value(value, path)} of {path} is no cell's value ({shown})",
                             sweep.source, locate(sweep.lines, ("baseline", path)))


def baseline_index(cells: list[Cell], baseline: dict[str, Any] | None) -> dict[int, int]:
    """For each cell, the index of its baseline cell (same assignment except on the baseline's
    paths, where it takes the baseline's values). Cells that are their own baseline, or whose
    baseline is not in the sweep, are left out.

    Without an explicit baseline the first value of the first grid (or zip) axis is the baseline.
    """
    if not cells:
        return {}
    if baseline is None:
        first = cells[0].assignments
        if not first:
            return {}
        baseline = {first[0][0]: first[0][1]}
    key = lambda assignments: json.dumps([[p, v] for p, v in assignments], sort_keys=True, default=str)  # noqa: E731
    by_key = {key(cell.assignments): cell.index for cell in cells}
    out = {}
    for cell in cells:
        if not all(path in cell.as_dict() for path in baseline):
            continue
        target = tuple((path, baseline.get(path, value)) for path, value in cell.assignments)
        found = by_key.get(key(target))
        if found is not None and found != cell.index:
            out[cell.index] = found
    return out
