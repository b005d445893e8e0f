"""Disaggregated rows whose deployment another row of the same file gives: the same run, twice.

``measured_runs.csv`` holds some benchmark runs twice, once per export: a ``source_file=`` row
(InferenceX's results table) that leaves ``prefill_num_workers`` and ``decode_num_workers``
empty, and a ``db-dump/`` row (InferenceX's database) that gives the workers, their
parallelism and the decode batch. The two carry the identical measurement (``silicon_ttft_ms``
and ``silicon_tpot_ms`` equal to the nanosecond; the exports' last printed digits differ) for
the same system, engine, precision, lengths and concurrency; only the model's label may differ
(DeepSeek-R1 against DeepSeek-V3, one architecture and one model profile).
:func:`with_twin_pools` gives such a row its twin's pool columns, so it is emulated as the
deployment that was measured instead of being skipped for lack of pools (docs/validation.md,
"Twin rows"). A row whose pools are in its own columns or in an InferenceX recipe
(:mod:`.disagg_recipes`, which also says whether the run used MTP), or whose twins disagree on
the deployment, is left as it is.
"""

from __future__ import annotations

import math

import pandas as pd

from agentsim.experiments.benchmark_rows import model_profile
from agentsim.experiments.disagg_recipes import RecipeError, recipe_pools
from agentsim.experiments.disaggregated_rows import TWIN_COLUMN, DisaggRowError, concurrency, pools_source

#: A disaggregated row's deployment columns (what a twin supplies).
POOL_COLUMNS = tuple(f"{role}_{column}" for role in ("prefill", "decode")
                     for column in ("batch_size", "num_workers", "tp_size", "pp_size", "attention_dp_size",
                                    "moe_tp_size", "moe_ep_size"))
__all__ = ["POOL_COLUMNS", "TWIN_COLUMN", "with_twin_pools"]


def _measurement_key(row: dict) -> tuple | None:
    """What identifies one benchmark run across exports; None when the row lacks a part of it."""
    try:
        clients = concurrency(row)
    except DisaggRowError:
        return None
    # To the nanosecond: the exports print the same float with different last digits.
    return (round(float(row["silicon_ttft_ms"]), 6), round(float(row["silicon_tpot_ms"]), 6),
            str(row.get("system")).strip(), str(row.get("backend")).strip(), str(row.get("precision")).strip(),
            int(row["isl"]), int(row["osl"]), clients, model_profile(str(row.get("model_path") or "").strip()))


def _has_recipe(row: dict) -> bool:
    """Whether InferenceX's recipes give the row's deployment (it is emulated so then, MTP
    included, which a twin's columns do not say)."""
    try:
        recipe_pools(row, concurrency(row))
    except (RecipeError, DisaggRowError):
        return False
    return True


def _pools(row: dict) -> tuple:
    return tuple(None if (isinstance(row.get(c), float) and math.isnan(row[c])) else row.get(c)
                 for c in POOL_COLUMNS)


def with_twin_pools(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every disaggregated row that gives no worker counts and matches no recipe
    completed from its twins (rows that give them and report the same measurement,
    :func:`_measurement_key`) when they all give one deployment; :data:`TWIN_COLUMN` names the
    twin used. Other rows are unchanged; a frame without such rows comes back as it is."""
    if "mode" not in frame.columns or not set(POOL_COLUMNS) <= set(frame.columns):
        return frame
    disagg = frame[frame["mode"].astype(str).str.strip() == "disagg"]
    records = disagg.to_dict("records")
    if not records:
        return frame
    twins: dict[tuple, list[dict]] = {}
    for row in records:
        if pools_source(row) == "row":
            key = _measurement_key(row)
            if key is not None and key[-1] is not None:
                twins.setdefault(key, []).append(row)
    completed = {}
    for index, row in zip(disagg.index, records):
        if pools_source(row) == "row":
            continue
        key = _measurement_key(row)
        found = twins.get(key) if key is not None else None
        if not found or len({_pools(twin) for twin in found}) != 1 or _has_recipe(row):
            continue
        completed[index] = found[0]
    if not completed:
        return frame
    out = frame.copy()
    if TWIN_COLUMN not in out.columns:
        out[TWIN_COLUMN] = None
    for index, twin in completed.items():
        for column in POOL_COLUMNS:
            out.at[index, column] = twin.get(column)
        out.at[index, TWIN_COLUMN] = str(twin["id"])
    return out
