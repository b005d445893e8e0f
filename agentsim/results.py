"""Persisting and loading run results.

A run directory holds ``summary.json`` (one flat-ish mapping, snake_case keys with units),
``requests.parquet`` and the other record tables as Parquet, and ``scenario.resolved.yaml`` (the
scenario with every default filled in, so the run can be repeated exactly).

Determinism: the same scenario and seed produce byte-identical Parquet files and an identical
``summary.json`` except for the keys in :data:`WALL_CLOCK_KEYS`, which measure the machine.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd

from agentsim.errors import InputError
from agentsim.parquet_out import write_parquet
from agentsim.result_files import read_json_object, read_table
from agentsim.run_directory import StagedDirectory, check_out_dir

WALL_CLOCK_KEYS = ("wall_s", "simulated_requests_per_wall_s", "headroom_replay_wall_s")
RUN_MARKER = "summary.json"
# What every run's summary holds (simulation.py writes them first) and a run report cannot do
# without: a summary lacking one is not agentsim's (an empty ``{}``, a foreign file).
REQUIRED_RUN_KEYS = ("scenario", "requests")


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _clean(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(item) for item in value]
    if hasattr(value, "item"):
        return _clean(value.item())
    return value


def summary_json(summary: dict) -> str:
    return json.dumps(_clean(summary), indent=2, sort_keys=False) + "\n"


def prepare_out_dir(out_dir: Path, force: bool) -> None:
    """Refuse, before any work, an ``out_dir`` that cannot receive a run's results: a file,
    another run without ``force``, a directory of other files, an unwritable parent
    (:func:`agentsim.run_directory.check_out_dir`). Nothing is created."""
    check_out_dir(out_dir, force)
    parent = out_dir.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot write the output directory ({parent} is not writable)", str(out_dir))


def write_run_files(result, directory: str | Path, scenario_yaml: str | None = None) -> Path:
    """Write summary.json, one Parquet file per table and scenario.resolved.yaml into
    ``directory`` as it is (a staging directory: see :func:`write_run`)."""
    from agentsim.config.loader import scenario_to_yaml

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    for name, table in result.tables.items():
        write_parquet(table, out / f"{name}.parquet")
    if result.scenario is not None:
        text = scenario_yaml if scenario_yaml is not None else scenario_to_yaml(result.scenario)
        (out / "scenario.resolved.yaml").write_bytes(text.encode())
    # summary.json last: its presence marks a complete run directory.
    (out / "summary.json").write_bytes(summary_json(result.summary).encode())
    return out


def write_run(result, out_dir: str | Path, scenario_yaml: str | None = None) -> Path:
    """Replace ``out_dir`` by a directory holding exactly this run (staged, fsynced and swapped
    in whole under a lock: :class:`agentsim.run_directory.StagedDirectory`). The caller has
    refused another run's results (:func:`prepare_out_dir`) before doing the work."""
    with StagedDirectory(out_dir, force=True) as target:
        try:
            write_run_files(result, target.staging, scenario_yaml)
        except OSError as exc:  # disk full, quota: the staging directory goes, the old one stays
            raise InputError(f"cannot write results ({exc.strerror or exc}); the previous contents are unchanged",
                             str(out_dir)) from None
        return target.commit()


#: Summary keys that hold text (every metric of the catalogue holds a number or null).
SUMMARY_TEXT_KEYS = ("scenario", "policy")


def read_summary(path: str | Path) -> dict:
    """A run's ``summary.json`` (:func:`read_json_object`), its values checked against what
    agentsim writes: every metric of :mod:`agentsim.metrics.catalogue` a number or null, the
    scenario and policy names text. A hand-edited or foreign summary is one InputError naming
    the key, not a traceback in whatever formats it."""
    from agentsim.metrics.catalogue import CATALOGUE

    summary = read_json_object(path, "summary")
    for key, value in summary.items():
        if key in SUMMARY_TEXT_KEYS:
            if not isinstance(value, str):
                raise InputError(f"summary key {key!r} must be text, got {value!r}", str(path))
        elif key in CATALOGUE and CATALOGUE[key].unit and value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float))):
            raise InputError(f"summary key {key!r} must be a number or null, got {value!r}", str(path))
    return summary


def load_run(run_dir: str | Path) -> tuple[dict, dict[str, pd.DataFrame]]:
    """(summary, tables) of a run directory written by :func:`write_run`."""
    run_dir = Path(run_dir)
    summary_path = run_dir / "summary.json"
    if not summary_path.exists():
        raise InputError("no summary.json here: not a run directory", str(run_dir))
    from agentsim.metrics.records import RequestRecord, columns

    summary = read_summary(summary_path)
    missing = [key for key in REQUIRED_RUN_KEYS if key not in summary]
    if missing:
        raise InputError(f"summary lacks the key(s) {', '.join(map(repr, missing))} that every agentsim run "
                         "writes: not a run's summary", str(summary_path))
    # The request table is what every figure reads: a foreign Parquet file named like it is refused.
    required = {"requests": tuple(columns(RequestRecord))}
    tables = {path.stem: read_table(path, required.get(path.stem, ())) for path in sorted(run_dir.glob("*.parquet"))}
    return summary, tables
