"""Which aggregated InferenceX rows ran speculative decoding, from InferenceX's benchmark entries.

The aggregated InferenceX rows of ``measured_runs.csv`` (:data:`.benchmark_clients.INFERENCEX`)
give the model, system, engine, precision, lengths, TP, expert split and concurrency, and most
name the container image (``image=`` in ``silicon_data_source``, or the last field of the
database dump's), but not whether the server ran multi-token prediction. InferenceX's
``nvidia-master.yaml`` says: each single-node ``search-space`` entry has ``tp``, ``ep``, a
concurrency range and an optional ``spec-decoding: mtp``, which runs the ``..._mtp.sh`` script
(SGLang ``--speculative-algorithm EAGLE`` over the model's MTP layers, TensorRT-LLM
``speculative_config: MTP``) instead of the one without. MTP entries often sit beside plain ones
of the same model at other parallelism or on another image (Qwen3.5-397B FP8 on B200, March 2026:
plain at TP 8 and at TP 4 with EP 4 on ``v0.5.9-cu130-amd64``, MTP at TP 4 without EP on
``v0.5.9-cu130``), so what a row says often leaves one of them.
``agentsim/data/inferencex_agg_recipes.csv`` holds every entry of every version of that file up
to the dump (``scripts/inferencex_agg_recipes.py``), with the MTP depth of the script it ran.

:func:`recipe_speculation` finds the entries that fit a row (model, system, engine, precision,
``isl``/``osl``, TP, expert split, the concurrency within the entry's range, the image when the
row names one) among those that existed when the row was measured (else those of the first
version after). When every one runs MTP, the row ran it and is emulated with it
(``serving.speculative_decoding``); when any fitting entry runs without, or none fits, the row
is emulated without, as before.
"""

from __future__ import annotations

import io
import math
from functools import lru_cache
from importlib import resources

import pandas as pd

from agentsim.experiments.benchmark_clients import INFERENCEX, client_protocol
from agentsim.experiments.benchmark_recipes import measured_date, row_image
from agentsim.experiments.disagg_recipes import RUNNER_SYSTEMS
from agentsim.experiments.disagg_recipes import recipes as disagg_entries

#: InferenceX framework name -> the rows' ``backend``.
_BACKENDS = {"trt": "trtllm", "sglang": "sglang", "vllm": "vllm"}
#: Model-name fragment of a row's ``model_path`` -> InferenceX ``model-prefix`` (the database
#: dump writes DeepSeek-V3's path for InferenceX's ``dsr1`` runs, the same architecture).
_PREFIXES = {"deepseek-r1": "dsr1", "deepseek-v3": "dsr1", "qwen3.5": "qwen3.5", "glm-5": "glm5",
             "kimi-k2.5": "kimik2.5", "gpt-oss": "gptoss", "minimax-m2.5": "minimaxm2.5"}
#: MTP depth when the script an entry ran was not found: aiconfigurator's default for DeepSeek
#: (as for the disaggregated rows, :data:`.disagg_recipes.DEFAULT_DRAFT_TOKENS`).
DEFAULT_DRAFT_TOKENS = 1


@lru_cache(maxsize=1)
def recipes() -> pd.DataFrame:
    """Every single-node entry (one row per entry and first version that has it), keyed as the
    measured rows are."""
    text = resources.files("agentsim").joinpath("data/inferencex_agg_recipes.csv").open().read()
    frame = pd.read_csv(io.StringIO(text), comment="#", keep_default_na=False, na_values={"draft_tokens": [""]})
    frame["system"] = frame["runner"].str.split("-").str[0].map(RUNNER_SYSTEMS)
    frame["backend"] = frame["framework"].map(_BACKENDS)
    frame["date"] = frame["date"].astype(str)
    return frame


def _number(value, default: float | None = None) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return default if math.isnan(number) else number


def _in_range(frame: pd.DataFrame, clients: int) -> pd.Series:
    """Entries whose concurrencies include ``clients`` (the list when given, else the range)."""
    listed = frame["conc_list"].astype(str)
    by_list = listed.str.split().map(lambda values: str(clients) in values)
    by_range = (frame["conc_start"] <= clients) & (frame["conc_end"] >= clients)
    return by_list.where(listed.str.strip() != "", by_range).astype(bool)


def fitting_entries(row: dict, clients: int) -> pd.DataFrame:
    """The entries that fit what ``row`` says (empty when none does or the row is not an
    InferenceX one), among those existing when it was measured (else those of the first
    version after)."""
    table = recipes()
    if client_protocol(row) is not INFERENCEX:
        return table.iloc[0:0]
    name = str(row.get("model_path") or "").lower()
    prefix = next((p for fragment, p in _PREFIXES.items() if fragment in name), None)
    found = table[(table["model_prefix"] == prefix)
                  & (table["system"] == str(row.get("system") or "").strip())
                  & (table["backend"] == str(row.get("backend") or "").strip())
                  & (table["precision"] == str(row.get("precision") or "").strip().lower())
                  & (table["isl"] == _number(row.get("isl"))) & (table["osl"] == _number(row.get("osl")))
                  & (table["tp"] == _number(row.get("tp_size"), 1.0))
                  & (table["ep"] == _number(row.get("moe_ep_size"), 1.0))]
    found = found[_in_range(found, clients)]
    image = row_image(row)
    if image is not None:
        found = found[found["image"] == image]
    measured = measured_date(row)
    if measured and not found.empty:
        before = found[found["date"] <= measured]
        found = before if not before.empty else found[found["commit"] == found.iloc[0]["commit"]]
    return found


def recipe_speculation(row: dict, clients: int) -> dict | None:
    """``{"draft_tokens", "config", "commit"}`` when every InferenceX entry that fits ``row``
    (at ``clients``, the benchmark's concurrency) ran MTP; None when any ran without it or none
    fits. The depth is the script's, from the entries whose attention DP is the row's when any
    are (TensorRT-LLM's scripts run 3 draft tokens, 1 with attention DP)."""
    found = fitting_entries(row, clients)
    if found.empty or (found["spec_decoding"] != "mtp").any():
        return None
    attention_dp = _number(row.get("attention_dp_size"), 1.0) > 1
    same_dp = found[found["dp_attn"].astype(str).str.lower() == str(attention_dp).lower()]
    chosen = (same_dp if not same_dp.empty else found).iloc[-1]
    depth = _number(chosen["draft_tokens"])
    return {"draft_tokens": int(depth) if depth else DEFAULT_DRAFT_TOKENS, "config": str(chosen["config"]),
            "commit": str(chosen["commit"])}


def disaggregated_only_reason(row: dict) -> str | None:
    """Why an aggregated InferenceX ``row`` describes no worker an engine ran, or None. On a
    system where InferenceX only ever benchmarked disaggregated deployments (no single-node
    entry in any version of its configuration, disaggregated ones present: GB200), a row the
    export labels ``agg`` is a disaggregated run whose ``tp`` is the whole deployment's GPUs
    (20 to 72, no expert split, attention DP 1), as the disaggregated rows of the same export
    read: :data:`.disagg_recipes.DEPLOYMENT_COLUMNS_REASON`, which those are skipped for."""
    if client_protocol(row) is not INFERENCEX or str(row.get("mode") or "").strip() != "agg":
        return None
    system = str(row.get("system") or "").strip()
    if (recipes()["system"] == system).any() or not (disagg_entries()["system"] == system).any():
        return None
    tp = _number(row.get("tp_size"), 1.0)
    return (f"InferenceX benchmarked {system} only disaggregated (no single-node entry in any version of its "
            f"nvidia-master.yaml): this row's tp {int(tp)} is a disaggregated deployment's GPUs, not an "
            f"aggregated worker's")

