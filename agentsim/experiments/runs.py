"""One run of a sweep: the task sent to a worker and the outcome it sends back.

The task carries the fully resolved scenario mapping (profiles and fit references already
resolved, seed set), so a worker needs no files: it works the same in a local process, in a
Dask worker on this machine, or on another machine of a Dask cluster. The outcome carries the
summary and each record table as Parquet bytes; the client persists them, so workers need no
shared file system either.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from agentsim.parquet_out import write_parquet


def scenario_key(scenario_data: dict) -> str:
    """Content address of a resolved scenario, seed excluded: equal keys => equal configuration.

    Used as the cell's directory name, so a rerun finds a cell's results even if the sweep
    file was reordered, and recomputes them if anything in the configuration changed.
    """
    without_seed = {k: v for k, v in scenario_data.items() if k != "seed"}
    text = json.dumps(without_seed, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class RunTask:
    """Simulate ``scenario_data`` (a resolved scenario as JSON-compatible data) once."""

    cell_id: str
    seed: int
    scenario_data: dict


@dataclass
class RunOutcome:
    """What a worker returns. ``error`` is set (and ``summary`` None) if the run failed."""

    cell_id: str
    seed: int
    summary: dict | None = None
    tables_parquet: dict[str, bytes] = field(default_factory=dict)
    scenario_yaml: str | None = None
    error: str | None = None
    traceback: str | None = None
    worker_wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    def tables(self) -> dict[str, pd.DataFrame]:
        return {name: pd.read_parquet(io.BytesIO(data)) for name, data in self.tables_parquet.items()}


def execute_run(task: RunTask) -> RunOutcome:
    """Run one task; never raises (a failure becomes an outcome with ``error``)."""
    started = time.perf_counter()
    try:
        from agentsim.config.loader import scenario_to_yaml
        from agentsim.engine.loading import scenario_from_dict
        from agentsim.engine.simulation import run_scenario

        scenario = scenario_from_dict(task.scenario_data, source=f"cell {task.cell_id}")
        result = run_scenario(scenario)
        tables = {}
        for name, table in result.tables.items():
            buffer = io.BytesIO()
            write_parquet(table, buffer)
            tables[name] = buffer.getvalue()
        return RunOutcome(cell_id=task.cell_id, seed=task.seed, summary=_plain(result.summary), tables_parquet=tables,
                          scenario_yaml=scenario_to_yaml(scenario), worker_wall_s=time.perf_counter() - started)
    except Exception as exc:  # noqa: BLE001 - a failing cell is recorded, the sweep goes on
        return RunOutcome(cell_id=task.cell_id, seed=task.seed, error=f"{type(exc).__name__}: {exc}",
                          traceback=traceback.format_exc(), worker_wall_s=time.perf_counter() - started)


def _plain(value: Any) -> Any:
    """numpy scalars -> Python scalars, so outcomes pickle small and compare exactly."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    return value
