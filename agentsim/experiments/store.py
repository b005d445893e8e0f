"""Persistence of a sweep's runs, one directory per cell, written as each run finishes.

Layout of ``OUT``::

    OUT/sweep.json                         name, cells (index, id, label, assignments), seeds
    OUT/cells/<cell_id>/cell.json          the cell's assignments and label
    OUT/cells/<cell_id>/seed-<S>/          one run, as `agentsim run` writes it:
        summary.json  requests.parquet  occupancy.parquet ...  scenario.resolved.yaml
    OUT/cells/<cell_id>/seed-<S>/error.json   instead of summary.json when the run failed
    OUT/results.parquet                    one row per cell and seed (see :func:`combined_table`)
    OUT/stats.parquet, OUT/paired.parquet, OUT/stats.json   statistics across seeds

``cell_id`` is the content address of the cell's resolved scenario (seed excluded), so a
rerun finds a finished run however the sweep file was reordered, and recomputes a run whose
configuration changed. A run is finished when its ``summary.json`` exists; it is written last
and atomically (rename), so a run killed half-way is simply recomputed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from agentsim.errors import InputError
from agentsim.experiments.runs import RunOutcome
from agentsim.results import summary_json


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class SweepStore:
    """Reads and writes the run directories under ``out_dir``."""

    def __init__(self, out_dir: str | Path):
        self.out_dir = Path(out_dir)
        if self.out_dir.exists() and not self.out_dir.is_dir():
            raise InputError("exists and is not a directory", str(self.out_dir))
        try:
            (self.out_dir / "cells").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create output directory ({exc.strerror})", str(self.out_dir)) from None

    def cell_dir(self, cell_id: str) -> Path:
        return self.out_dir / "cells" / cell_id

    def run_dir(self, cell_id: str, seed: int) -> Path:
        return self.cell_dir(cell_id) / f"seed-{seed}"

    def is_done(self, cell_id: str, seed: int) -> bool:
        return (self.run_dir(cell_id, seed) / "summary.json").exists()

    def write_cell(self, cell_id: str, info: dict) -> None:
        directory = self.cell_dir(cell_id)
        directory.mkdir(parents=True, exist_ok=True)
        _atomic_write(directory / "cell.json", (json.dumps(info, indent=2, default=str) + "\n").encode())

    def write_manifest(self, manifest: dict) -> None:
        _atomic_write(self.out_dir / "sweep.json", (json.dumps(manifest, indent=2, default=str) + "\n").encode())

    def write_outcome(self, outcome: RunOutcome) -> Path:
        """Persist one run at once: tables, resolved scenario, then summary.json last (or error.json)."""
        directory = self.run_dir(outcome.cell_id, outcome.seed)
        directory.mkdir(parents=True, exist_ok=True)
        if not outcome.ok:
            _atomic_write(directory / "error.json", (json.dumps(
                {"error": outcome.error, "traceback": outcome.traceback}, indent=2) + "\n").encode())
            return directory
        for name, data in outcome.tables_parquet.items():
            _atomic_write(directory / f"{name}.parquet", data)
        if outcome.scenario_yaml is not None:
            _atomic_write(directory / "scenario.resolved.yaml", outcome.scenario_yaml.encode())
        _atomic_write(directory / "summary.json", summary_json(outcome.summary).encode())
        error = directory / "error.json"
        if error.exists():
            error.unlink()
        return directory

    def write_error(self, cell_id: str, seed: int, message: str) -> None:
        """Record a cell that could not even be built (e.g. its scenario fails validation)."""
        self.write_outcome(RunOutcome(cell_id=cell_id, seed=seed, error=message))

    def load_summary(self, cell_id: str, seed: int) -> dict | None:
        path = self.run_dir(cell_id, seed) / "summary.json"
        return json.loads(path.read_text()) if path.exists() else None

    def load_error(self, cell_id: str, seed: int) -> str | None:
        path = self.run_dir(cell_id, seed) / "error.json"
        return json.loads(path.read_text()).get("error") if path.exists() else None
