"""Calibrate the host time of a prefilling iteration per deployment from measured benchmark rows.

:mod:`agentsim.hardware.timing.prefill_host` adds a host time per layer to every iteration that
prefills (what per-kernel timing does not see). Its figure by engine and model kind is a median
over very different deployments: at the benchmark rows of at most 4 clients the gap between the
measured TTFT and the kernels' time ranges from 0 (Llama-3.1-70B on TensorRT-LLM) to 6 ms a layer
(DeepSeek-R1 on TensorRT-LLM / H200) within one engine. This module measures the gap per
deployment (engine, model, system), so that a deployment the measurements cover gets its own
figure and any other keeps the engine's.

A row of at most :data:`MAX_CLIENTS` clients is emulated as ``check-timing`` emulates it
(:func:`~agentsim.experiments.timing_check.emulate_row`) with no host time; with no queue, its
measured TTFT minus the predicted one is the host time of the row's prefilling iterations plus
what else the kernels miss. Divided by the model's layers, the median over a deployment's rows
(negative gaps count as 0) is its figure. Only aggregated rows are used; rows of more clients are
left to test the figures.
"""

from __future__ import annotations

import math

import pandas as pd

from agentsim.engine.loading import scenario_from_dict
from agentsim.errors import InputError
from agentsim.experiments.benchmark_rows import RowSkipped, row_scenario
from agentsim.experiments.timing_check import emulate_row
from agentsim.hardware.timing.prefill_host import deployment_key

#: Most concurrent clients of a row used for calibration: a row of so few clients has no queue.
MAX_CLIENTS = 4
#: The column order of the calibration table (``agentsim/data/prefill_host_by_deployment.csv``).
COLUMNS = ["engine", "model", "system", "rows", "layers", "host_ms_per_layer"]


def calibration_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The aggregated rows of ``frame`` (a measured-runs table) of at most :data:`MAX_CLIENTS`
    clients, the ones :func:`calibrate` uses."""
    mode = frame["mode"].astype(str).str.strip()
    return frame[(mode == "agg") & (frame["batch_size"] <= MAX_CLIENTS)]


def row_gap(row: dict) -> dict | None:
    """``{engine, model, system, layers, gap_ms}`` of one row emulated without host time, or None
    when the row cannot be emulated or its model gives no layer count."""
    try:
        scenario = scenario_from_dict(row_scenario(row), source="calibration")
    except (RowSkipped, InputError):  # a row that is no valid scenario is simply not used
        return None
    if not scenario.model.layers:
        return None
    result = emulate_row(row, ["serving.prefill_host_s_per_layer=0"])
    if result.skipped is not None or result.predicted_ttft_ms is None:
        return None
    engine, model, system = deployment_key(scenario)   # the key prefill_host looks figures up by
    return {"engine": engine, "model": model, "system": system, "layers": int(scenario.model.layers),
            "gap_ms": result.measured_ttft_ms - result.predicted_ttft_ms}


def calibrate(frame: pd.DataFrame, map_rows=map) -> pd.DataFrame:
    """The calibration table (:data:`COLUMNS`, sorted) from a measured-runs table.

    ``map_rows`` maps :func:`row_gap` over the rows (``map``, or an executor's ``map`` to run
    them in parallel)."""
    rows = calibration_rows(frame).to_dict("records")
    gaps = pd.DataFrame([g for g in map_rows(row_gap, rows) if g is not None])
    if gaps.empty:
        return pd.DataFrame(columns=COLUMNS)
    gaps["ms_per_layer"] = (gaps["gap_ms"] / gaps["layers"]).clip(lower=0.0)
    table = gaps.groupby(["engine", "model", "system"], sort=True).agg(
        rows=("gap_ms", "size"), layers=("layers", "first"), host_ms_per_layer=("ms_per_layer", "median"))
    table = table.reset_index()
    table["host_ms_per_layer"] = [round(v, 3) if math.isfinite(v) else 0.0 for v in table["host_ms_per_layer"]]
    return table[COLUMNS]
