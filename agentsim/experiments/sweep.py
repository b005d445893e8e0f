"""Running a sweep: cells x seeds through an executor, each run persisted as it finishes.

:func:`run_sweep` is the API behind ``agentsim sweep``::

    sweep = load_sweep("sweeps/policies.yaml")
    report = run_sweep(sweep, "out/policies", LocalExecutor(workers=2))
    report.table        # one row per cell and seed (also OUT/results.parquet)
    report.stats        # mean and 95% CI per cell and metric (OUT/stats.parquet)
    report.paired       # cell - baseline per seed, mean and 95% CI (OUT/paired.parquet)

Rerunning with the same ``out_dir`` skips every run whose ``summary.json`` exists; failed runs
(``error.json``) are retried. A run that fails records its error and the sweep continues.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from agentsim.config.loader import apply_overrides, parse_override
from agentsim.config.yaml_paths import LineMap
from agentsim.engine.loading import scenario_from_dict
from agentsim.config.units import UnitError, parse_bandwidth, parse_bytes, parse_duration, parse_flops
from agentsim.errors import InputError, closest_name
from agentsim.experiments.metric_names import check_sweep_metrics
from agentsim.experiments.runs import RunOutcome, RunTask, scenario_key
from agentsim.experiments.spec import Cell, LoadedSweep, baseline_index, check_baseline, expand_cells, format_value
from agentsim.experiments.stats import cell_statistics, numeric_metrics, paired_differences
from agentsim.experiments.store import SweepStore
from agentsim.results import WALL_CLOCK_KEYS


def override_text(path: str, value: Any) -> str:
    """``PATH=VALUE`` for :func:`apply_overrides`; JSON is YAML, so any value survives the round trip."""
    return f"{path}={json.dumps(value)}"


class ScenarioBuilder:
    """Base scenario mapping + fixed overrides -> resolved scenario data for a cell and seed."""

    def __init__(self, base_data: dict, source: str, base_lines: dict | None = None, base_dir: Path | None = None,
                 fixed: dict[str, Any] | None = None, fixed_texts: list[str] | None = None,
                 given_at: Callable[[str], tuple[str, int | None]] | None = None):
        """``fixed_texts`` are ``--set PATH=VALUE`` options, ``fixed`` a sweep's ``set:``
        mapping; ``given_at(path)`` is the (file, line) that wrote a ``fixed`` or axis value, so
        an error in it names that line rather than the base file's line it replaced."""
        self.source = source
        self.base_lines = base_lines or {}
        self.base_dir = base_dir
        self.given_at = given_at
        self.replaced: dict[tuple, str | tuple[str, int | None]] = {}
        data = copy.deepcopy(base_data)
        if fixed_texts:
            data = apply_overrides(data, fixed_texts)
            for text in fixed_texts:
                self.replaced[_path_key(parse_override(text)[0])] = text.strip()
        if fixed:
            data = apply_overrides(data, [override_text(p, v) for p, v in fixed.items()])
            self.replaced.update(self._origins(fixed))
        self.data = data

    @classmethod
    def for_sweep(cls, sweep: LoadedSweep) -> "ScenarioBuilder":
        """The builder of a sweep's cells: its base scenario, its ``set:``, errors in a value the
        sweep file gave blamed on that file's line."""
        def given_at(path: str) -> tuple[str, int | None]:
            for where in (("set", path), ("axes", "grid", path), ("axes", "zip", path), ("axes", "random", "params", path)):
                if where in sweep.lines:
                    return sweep.source, sweep.lines[where]
            return sweep.source, None
        return cls(sweep.base_data, str(sweep.base_path), sweep.base_lines, sweep.base_path.parent,
                   fixed=sweep.spec.set, given_at=given_at)

    def _origins(self, paths) -> dict[tuple, tuple[str, int | None]]:
        if self.given_at is None:
            return {}
        return {_path_key(path.split(".")): self.given_at(path) for path in paths}

    def _lines(self, assignments) -> LineMap:
        lines = LineMap(self.base_lines)
        lines.overrides.update(getattr(self.base_lines, "overrides", {}))
        lines.overrides.update(self.replaced)
        lines.overrides.update(self._origins(path for path, _ in assignments))
        return lines

    def raw_data(self, assignments, seed: int | None = None) -> dict:
        data = apply_overrides(self.data, [override_text(p, v) for p, v in assignments])
        if seed is not None:
            data["seed"] = seed
        return data

    def resolved(self, assignments, seed: int | None = None):
        """The validated Scenario (raises InputError naming the base file and the path)."""
        return scenario_from_dict(self.raw_data(assignments, seed), source=self.source,
                                  lines=self._lines(assignments), base_dir=self.base_dir)

    def resolved_data(self, assignments, seed: int | None = None) -> dict:
        return self.resolved(assignments, seed).model_dump(mode="json")

    def to_number(self, path: str, raw: Any) -> float:
        """A bound like ``60GB`` for ``path`` in SI units: read back through the schema where the
        path is a typed field, else by the first unit parser that accepts it."""
        if isinstance(raw, bool):
            raise InputError(f"expected a number for {path}, got {raw!r}", self.source, path)
        if isinstance(raw, (int, float)):
            return float(raw)
        try:
            value = value_at(self.resolved_data([(path, raw)]), path)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
        except InputError:
            pass
        for parser in (parse_duration, parse_bytes, parse_bandwidth, parse_flops):
            try:
                return parser(raw)
            except UnitError:
                continue
        raise InputError(f"cannot read {raw!r} as a number for {path}", self.source, path)


def _path_key(parts) -> tuple:
    """A dotted path's parts as a line-map key (list indices as integers)."""
    return tuple(int(p) if isinstance(p, str) and p.isdigit() else p for p in parts)


def value_at(data: Any, path: str) -> Any:
    """``data['a']['b']`` for ``path='a.b'`` (list items by index); KeyError-free: None if absent."""
    node = data
    for part in path.split("."):
        if isinstance(node, list):
            try:
                node = node[int(part)]
            except (ValueError, IndexError):
                return None
        elif isinstance(node, dict):
            node = node.get(part)
        else:
            return None
    return node


@dataclass
class PlannedRun:
    """A (cell, seed) to run, or the reason it cannot be built."""

    cell_index: int
    cell_id: str
    seed: int
    task: RunTask | None = None
    error: str | None = None


@dataclass
class ExecutionCounts:
    total: int = 0
    skipped: int = 0
    ran: int = 0
    failed: int = 0


def no_valid_cell(sweep: LoadedSweep, first_error: str) -> InputError:
    """The error of a sweep none of whose cells is a valid scenario (a broken sweep file or
    base, not one bad cell), quoting the first cell's problem (which names its file and line)."""
    problem = first_error.removeprefix("InputError: ")
    return InputError(f"no cell of the sweep is a valid scenario; the first: {problem}", sweep.source)


def plan_runs(builder: ScenarioBuilder, cells: list[Cell], seeds: list[int]) -> tuple[list[PlannedRun], dict[int, str]]:
    """Build every run's task; a cell whose scenario is invalid gets an error instead."""
    planned, cell_ids = [], {}
    for cell in cells:
        try:
            data = builder.resolved_data(cell.assignments)
            cell_id = scenario_key(data)
            error = None
        except InputError as exc:
            data = None
            cell_id = "invalid-" + scenario_key(builder.raw_data(cell.assignments))
            error = f"InputError: {exc.render()}"
        cell_ids[cell.index] = cell_id
        for seed in seeds:
            if data is None:
                planned.append(PlannedRun(cell.index, cell_id, seed, error=error))
            else:
                planned.append(PlannedRun(cell.index, cell_id, seed, task=RunTask(cell_id, seed, {**data, "seed": seed})))
    return planned, cell_ids


def execute(planned: list[PlannedRun], store: SweepStore, executor,
            on_done: Callable[[PlannedRun | RunOutcome, bool], None] | None = None) -> ExecutionCounts:
    """Run what is not finished yet; persist each outcome as soon as it arrives.

    ``on_done(item, skipped)`` is called once per planned run (skipped ones first).
    """
    counts = ExecutionCounts(total=len(planned))
    todo: dict[tuple[str, int], RunTask] = {}
    for run in planned:
        if store.is_done(run.cell_id, run.seed):
            counts.skipped += 1
            if on_done:
                on_done(run, True)
        elif run.task is None:
            store.write_error(run.cell_id, run.seed, run.error or "cannot build the scenario")
            counts.failed += 1
            if on_done:
                on_done(run, False)
        elif (run.cell_id, run.seed) in todo:
            counts.skipped += 1  # the same configuration appears twice: run it once
            if on_done:
                on_done(run, True)
        else:
            todo[(run.cell_id, run.seed)] = run.task
    for outcome in executor.run(list(todo.values())):
        store.write_outcome(outcome)
        counts.ran += 1
        if not outcome.ok:
            counts.failed += 1
        if on_done:
            on_done(outcome, False)
    return counts


def combined_table(cells: list[Cell], cell_ids: dict[int, str], seeds: list[int], store: SweepStore) -> pd.DataFrame:
    """One row per cell and seed: cell_index, cell_id, label, one column per axis path (the
    value as written in the sweep), seed, status (ok / error / missing), error, then every
    summary key (nested mappings flattened with dots)."""
    axis_paths = list(dict.fromkeys(path for cell in cells for path, _ in cell.assignments))
    rows = []
    for cell in cells:
        cell_id = cell_ids[cell.index]
        for seed in seeds:
            row: dict[str, Any] = {"cell_index": cell.index, "cell_id": cell_id, "label": cell.label}
            row.update({path: value for path, value in cell.assignments})
            row["seed"] = seed
            summary = store.load_summary(cell_id, seed)
            if summary is not None:
                row["status"], row["error"] = "ok", None
                for key, value in _flatten(summary).items():
                    if key not in row:
                        row[key] = value
            else:
                error = store.load_error(cell_id, seed)
                row["status"], row["error"] = ("error", error) if error is not None else ("missing", None)
            rows.append(row)
    table = pd.DataFrame(rows)
    for path in axis_paths:
        if path in table and table[path].map(type).nunique() > 1:
            table[path] = table[path].map(format_value)  # mixed types cannot share a Parquet column
        elif path in table and table[path].map(lambda v: isinstance(v, (dict, list))).any():
            table[path] = table[path].map(format_value)
    return table


def _flatten(summary: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        elif value is None:
            out[name] = math.nan
        else:
            out[name] = value
    return out


BOOKKEEPING = {"cell_index", "seed", "complete", *WALL_CLOCK_KEYS}  # complete: run-status flag, not a metric


@dataclass
class SweepReport:
    cells: list[Cell]
    seeds: list[int]
    counts: ExecutionCounts
    table: pd.DataFrame
    stats: pd.DataFrame
    paired: pd.DataFrame
    metrics: list[str]
    out_dir: Path
    executor: str = ""
    failures: list[tuple[str, int, str]] = field(default_factory=list)
    #: Requested ``metrics`` that no finished run has as a numeric summary key (typos), each
    #: with the closest key that runs do have ("" if none is close).
    unknown_metrics: dict[str, str] = field(default_factory=dict)


def run_sweep(sweep: LoadedSweep, out_dir: str | Path, executor,
              on_progress: Callable[[int, int, int, int], None] | None = None) -> SweepReport:
    """Run (or resume) a sweep into ``out_dir``; write the combined table and statistics.

    ``on_progress(runs_done, runs_total, cells_done, cells_total)`` at the start and after each
    run (finished or skipped).
    Raises InputError if every cell's scenario is invalid (a broken sweep file, not a bad cell).
    """
    builder = ScenarioBuilder.for_sweep(sweep)
    cells = expand_cells(sweep, builder.to_number)
    check_baseline(sweep, cells)
    seeds = sweep.seeds()
    planned, cell_ids = plan_runs(builder, cells, seeds)
    invalid = [run for run in planned if run.task is None]
    if planned and len(invalid) == len(planned):
        raise no_valid_cell(sweep, invalid[0].error)
    check_sweep_metrics(sweep, builder, cells, {run.cell_index for run in planned if run.task is not None})
    store = SweepStore(out_dir)
    manifest = {"name": sweep.spec.name, "sweep_file": sweep.source, "base": str(sweep.base_path), "seeds": seeds,
                "cells": [{"index": c.index, "cell_id": cell_ids[c.index], "label": c.label,
                           "assignments": [[p, v] for p, v in c.assignments]} for c in cells]}
    store.write_manifest(manifest)
    for cell in cells:
        store.write_cell(cell_ids[cell.index], {"label": cell.label, "assignments": [[p, v] for p, v in cell.assignments],
                                                "sweep": sweep.spec.name})
    done_per_cell = {cell.index: 0 for cell in cells}
    index_of = {}
    for run in planned:
        index_of.setdefault((run.cell_id, run.seed), []).append(run.cell_index)
    progress = {"runs": 0, "cells": 0}

    def on_done(item, skipped: bool) -> None:
        # A PlannedRun (skipped or unbuildable) names its cell; an outcome belongs to the first
        # cell that asked for its (cell_id, seed) - duplicates were reported as skipped.
        index = item.cell_index if isinstance(item, PlannedRun) else index_of[(item.cell_id, item.seed)][0]
        done_per_cell[index] += 1
        progress["runs"] += 1
        if done_per_cell[index] == len(seeds):
            progress["cells"] += 1
        if on_progress:
            on_progress(progress["runs"], len(planned), progress["cells"], len(cells))

    if on_progress:
        on_progress(0, len(planned), 0, len(cells))
    counts = execute(planned, store, executor, on_done)
    table = combined_table(cells, cell_ids, seeds, store)
    metrics_all = numeric_metrics(table, BOOKKEEPING | set(p for c in cells for p, _ in c.assignments))
    stats = cell_statistics(table, metrics_all)
    paired = paired_differences(table, baseline_index(cells, sweep.spec.baseline), metrics_all)
    write_tables(store.out_dir, table, stats, paired, sweep.spec.metrics)
    failures = [(row.label, int(row.seed), row.error) for row in table.itertuples() if row.status == "error"]
    return SweepReport(cells=cells, seeds=seeds, counts=counts, table=table, stats=stats, paired=paired,
                       metrics=sweep.spec.metrics, out_dir=store.out_dir,
                       executor=getattr(executor, "description", ""), failures=failures,
                       unknown_metrics=_unknown_metrics(sweep.spec.metrics, metrics_all, table))


def _unknown_metrics(requested: list[str], known: list[str], table: pd.DataFrame) -> dict[str, str]:
    """Requested metrics absent from every finished run, with their closest known metric.

    Judged after the runs (every metric is stored whatever the sweep prints), because a summary's
    keys depend on the cell: an axis that turns tiers on adds the tiers' keys.
    """
    if not len(table) or not (table["status"] == "ok").any():
        return {}
    return {m: closest_name(m, known) or "" for m in requested if m not in known}


def write_tables(out_dir: Path, table: pd.DataFrame, stats: pd.DataFrame, paired: pd.DataFrame, metrics: list[str]) -> None:
    import io

    from agentsim.experiments.store import atomic_write

    for name, frame in (("results", table), ("stats", stats), ("paired", paired)):
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False, engine="pyarrow")
        atomic_write(out_dir / f"{name}.parquet", buffer.getvalue())
    shown_stats = stats[stats.metric.isin(metrics)] if len(stats) else stats
    shown_paired = paired[paired.metric.isin(metrics)] if len(paired) else paired
    text = json.dumps({"metrics": metrics,
                       "stats": json.loads(shown_stats.to_json(orient="records")),
                       "paired": json.loads(shown_paired.to_json(orient="records"))}, indent=2)
    atomic_write(out_dir / "stats.json", (text + "\n").encode())
