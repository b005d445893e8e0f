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
configuration changed. A run is finished when its ``summary.json`` exists and reads as a JSON
object; each run directory is staged and swapped in whole, so a run killed half-way is simply
recomputed, and an empty or corrupt summary (a disk that filled) is recomputed too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from agentsim.errors import InputError
from agentsim.experiments.runs import RunOutcome
from agentsim.result_files import read_json_object
from agentsim.results import read_summary, summary_json
from agentsim.run_directory import StagedDirectory, check_out_dir


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all: a unique temporary name, fsync, rename; the
    temporary file is removed if the write fails (disk full), so no ``.tmp`` is left behind."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"cannot write results ({exc.strerror or exc}); finished runs are kept", str(path)) from None


class SweepStore:
    """Reads and writes the run directories under ``out_dir``."""

    def __init__(self, out_dir: str | Path):
        self.out_dir = Path(out_dir)
        # An existing sweep (or plan) is resumed; anything else in the way is refused.
        check_out_dir(self.out_dir, force=True)
        try:
            (self.out_dir / "cells").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create output directory ({exc.strerror})", str(self.out_dir)) from None

    def cell_dir(self, cell_id: str) -> Path:
        return self.out_dir / "cells" / cell_id

    def run_dir(self, cell_id: str, seed: int) -> Path:
        return self.cell_dir(cell_id) / f"seed-{seed}"

    def is_done(self, cell_id: str, seed: int) -> bool:
        """True if the run has a readable summary: an empty or corrupt summary.json (a disk
        that filled, a hand edit) is a run to redo, not a finished one."""
        return self.load_summary(cell_id, seed) is not None

    def write_cell(self, cell_id: str, info: dict) -> None:
        directory = self.cell_dir(cell_id)
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write(directory / "cell.json", (json.dumps(info, indent=2, default=str) + "\n").encode())

    def write_manifest(self, manifest: dict) -> None:
        atomic_write(self.out_dir / "sweep.json", (json.dumps(manifest, indent=2, default=str) + "\n").encode())

    def write_outcome(self, outcome: RunOutcome) -> Path:
        """Persist one run at once, replacing its directory whole (staged, fsynced, swapped:
        :class:`agentsim.run_directory.StagedDirectory`): tables, resolved scenario and
        summary.json, or error.json."""
        directory = self.run_dir(outcome.cell_id, outcome.seed)
        with StagedDirectory(directory, force=True, what="a run", owned=True) as target:
            try:
                if not outcome.ok:
                    (target.staging / "error.json").write_bytes((json.dumps(
                        {"error": outcome.error, "traceback": outcome.traceback}, indent=2) + "\n").encode())
                else:
                    for name, data in outcome.tables_parquet.items():
                        (target.staging / f"{name}.parquet").write_bytes(data)
                    if outcome.scenario_yaml is not None:
                        (target.staging / "scenario.resolved.yaml").write_bytes(outcome.scenario_yaml.encode())
                    (target.staging / "summary.json").write_bytes(summary_json(outcome.summary).encode())
            except OSError as exc:
                raise InputError(f"cannot write results ({exc.strerror or exc}); finished runs are kept",
                                 str(directory)) from None
            target.commit()
        return directory

    def write_error(self, cell_id: str, seed: int, message: str) -> None:
        """Record a cell that could not even be built (e.g. its scenario fails validation)."""
        self.write_outcome(RunOutcome(cell_id=cell_id, seed=seed, error=message))

    def load_summary(self, cell_id: str, seed: int) -> dict | None:
        """The run's summary, or None if it has none or an unreadable one."""
        path = self.run_dir(cell_id, seed) / "summary.json"
        if not path.exists():
            return None
        try:
            return read_summary(path)
        except InputError:
            return None

    def load_error(self, cell_id: str, seed: int) -> str | None:
        path = self.run_dir(cell_id, seed) / "error.json"
        if not path.exists():
            return None
        try:
            return str(read_json_object(path, "error.json").get("error"))
        except InputError as exc:
            return exc.message
