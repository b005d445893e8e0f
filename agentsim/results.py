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

WALL_CLOCK_KEYS = ("wall_s", "simulated_requests_per_wall_s", "headroom_replay_wall_s")
RUN_MARKER = "summary.json"


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


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def prepare_out_dir(out_dir: Path, force: bool) -> None:
    """Create ``out_dir``; refuse to overwrite another run's results unless ``force``."""
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError("exists and is not a directory", str(out_dir))
    if (out_dir / RUN_MARKER).exists() and not force:
        raise InputError("already holds a run's results; pass --force to overwrite or choose another --out", str(out_dir))
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create output directory ({exc.strerror})", str(out_dir)) from None


def write_run(result, out_dir: str | Path, scenario_yaml: str | None = None) -> Path:
    """Write summary.json, one Parquet file per table and scenario.resolved.yaml into ``out_dir``."""
    from agentsim.config.loader import scenario_to_yaml

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, table in result.tables.items():
        tmp = out / f"{name}.parquet.tmp"
        table.to_parquet(tmp, index=False, engine="pyarrow")
        os.replace(tmp, out / f"{name}.parquet")
    if result.scenario is not None:
        text = scenario_yaml if scenario_yaml is not None else scenario_to_yaml(result.scenario)
        _atomic_write_bytes(out / "scenario.resolved.yaml", text.encode())
    # summary.json last: its presence marks a complete run directory.
    _atomic_write_bytes(out / "summary.json", summary_json(result.summary).encode())
    return out


def load_run(run_dir: str | Path) -> tuple[dict, dict[str, pd.DataFrame]]:
    """(summary, tables) of a run directory written by :func:`write_run`."""
    run_dir = Path(run_dir)
    summary_path = run_dir / "summary.json"
    if not summary_path.exists():
        raise InputError("no summary.json here: not a run directory", str(run_dir))
    summary = json.loads(summary_path.read_text())
    tables = {path.stem: pd.read_parquet(path) for path in sorted(run_dir.glob("*.parquet"))}
    return summary, tables
