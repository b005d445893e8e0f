"""A ``mode: disagg`` row of ``measured_runs.csv`` as a disaggregated scenario.

Such a row is one closed-loop benchmark of a disaggregated deployment (Dynamo with TensorRT-LLM,
SGLang or vLLM workers): ``silicon_concurrency`` clients (in ``silicon_data_source``) against
``prefill_num_workers`` prefill workers and ``decode_num_workers`` decode workers, each pool with
its own parallelism (``prefill_tp_size`` ... ``decode_moe_ep_size``) and batch size
(``prefill_batch_size``, ``decode_batch_size``: the engine's most sequences per attention-DP
rank, as ``batch_size`` of aggregated rows; on every row with a ``silicon_concurrency``,
concurrency = ``decode_batch_size * decode_attention_dp_size * decode_num_workers``).

:func:`disaggregated_row_scenario` takes the row and the builder of *aggregated* rows' scenarios
(``row -> scenario mapping``, the one check-timing uses) and returns the same benchmark with
``serving.disaggregation`` pools: the aggregated builder is given the row with the prefill pool's
parallelism and the full concurrency (so the model, system, engine, precision and workload are
built once, in one place), and the pools are then set from the row's columns.

Rows that leave the worker counts empty (the InferenceX exports, ``silicon_data_source``
starting ``source_file=``) take their pools from the recipe they ran
(:mod:`agentsim.experiments.disagg_recipes`); :func:`pools_source` says which.
"""

from __future__ import annotations

import math
import re
from typing import Callable

_CONCURRENCY = re.compile(r"silicon_concurrency=(\d+)")
_PARALLELISM = (("tp_size", "tp"), ("pp_size", "pp"), ("attention_dp_size", "attention_dp"),
                ("moe_tp_size", "moe_tp"), ("moe_ep_size", "moe_ep"))
#: Column naming the row whose pool columns a row took (:mod:`.twin_rows`; absent or empty: none).
TWIN_COLUMN = "pools_from_twin"


#: Token budget of one attention-DP rank's prefill iteration on InferenceX's prefill workers: what
#: its srt-slurm recipes deploy on all three engines. TensorRT-LLM prefill workers run
#: ``max_num_tokens: 16384`` (1k/1k: ``max_batch_size: 16``; 8k/1k: ``max_batch_size: 2`` with
#: 16,384-16,896 tokens), SGLang ones ``chunked-prefill-size: 131072`` over ``dp-size: 8``
#: (16,384 per rank, SGLang's default ``max-prefill-tokens`` too) and vLLM ones
#: ``max-num-batched-tokens: 16384``. So a prefill rank batches as many prompts as fit 16K tokens,
#: whatever the row's ``prefill_batch_size`` (1 on every row: aiconfigurator's static estimate
#: prefills one prompt per rank, the deployed engines do not).
INFERENCEX_PREFILL_RANK_TOKENS = 16384


class DisaggRowError(ValueError):
    """The row lacks what a disaggregated emulation needs; the message says what."""


def _int(value) -> int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)) or str(value).strip() == "":
        return None
    return int(float(value))


def concurrency(row: dict) -> int:
    """The benchmark's clients: ``silicon_concurrency`` in the source column, else the decode
    pool's batch slots (``decode_batch_size`` x attention-DP ranks x ``decode_num_workers``)."""
    found = _CONCURRENCY.search(str(row.get("silicon_data_source") or ""))
    if found:
        return int(found.group(1))
    batch, workers = _int(row.get("decode_batch_size")), _int(row.get("decode_num_workers"))
    if not batch or not workers:
        raise DisaggRowError("no silicon_concurrency in silicon_data_source and no decode_batch_size x decode_num_workers")
    return batch * (_int(row.get("decode_attention_dp_size")) or 1) * workers


def pool(row: dict, role: str) -> dict:
    """One pool's ``serving.disaggregation`` entry from the row's ``{role}_*`` columns (0 or
    empty parallelism: the engine's default, 1 for TP/PP/DP and the default expert split)."""
    workers = _int(row.get(f"{role}_num_workers"))
    if not workers:
        raise DisaggRowError(f"column {role}_num_workers is empty")
    parallelism = {}
    for column, key in _PARALLELISM:
        value = _int(row.get(f"{role}_{column}"))
        if value:
            parallelism[key] = value
    for key in ("tp", "pp", "attention_dp"):
        parallelism.setdefault(key, 1)
    entry = {"workers": workers, "gpus_per_worker": parallelism["tp"] * parallelism["pp"] * parallelism["attention_dp"],
             "parallelism": parallelism}
    batch = _int(row.get(f"{role}_batch_size"))
    if batch:
        entry["max_num_seqs"] = batch * parallelism["attention_dp"]   # the batch size is per DP rank
    return entry


def pools_source(row: dict) -> str:
    """``"row"`` when the row gives its worker counts, ``"recipe"`` when they come from the
    InferenceX recipe it ran (:mod:`.disagg_recipes`)."""
    return "row" if _int(row.get("prefill_num_workers")) and _int(row.get("decode_num_workers")) else "recipe"


def pools_description(row: dict) -> str:
    """Where a buildable row's pools come from: ``row``, ``twin row`` (the columns of another
    row of the same measurement, :mod:`.twin_rows`), ``recipe``, ``recipe, MTP`` (only
    recipes with MTP speculative decoding fit; emulated with it) or ``recipe, ambiguous`` (both a
    recipe with MTP and one without fit; the one without is used)."""
    if pools_source(row) == "row":
        twin = row.get(TWIN_COLUMN)
        return "twin row" if isinstance(twin, str) and twin else "row"
    from agentsim.experiments.disagg_recipes import recipe_pools

    info = recipe_pools(row, concurrency(row))[2]
    if info["draft_tokens"]:
        return "recipe, MTP"
    return "recipe, ambiguous" if info["ambiguous"] else "recipe"


def row_pools(row: dict, clients: int) -> tuple[dict, dict]:
    """The row's prefill and decode pools: from its columns, else from its recipe."""
    prefill, decode, _ = row_deployment(row, clients)
    return prefill, decode


def row_deployment(row: dict, clients: int) -> tuple[dict, dict, int | None]:
    """``(prefill pool, decode pool, MTP draft tokens or None)``: from the row's columns (no
    MTP; the decode workers' most sequences from the recipe of the same deployment when one
    names it, :func:`~.disagg_recipes.recipe_decode_batch`), else from its recipe."""
    if pools_source(row) == "row":
        prefill, decode = pool(row, "prefill"), pool(row, "decode")
        from agentsim.experiments.disagg_recipes import recipe_decode_batch

        # The column is the clients' share; the recipe gives the engine's cap, when one ran it.
        batch = recipe_decode_batch(row, clients, prefill, decode)
        if batch:
            decode["max_num_seqs"] = batch
        return prefill, decode, None
    from agentsim.experiments.disagg_recipes import RecipeError, recipe_pools

    try:
        prefill, decode, info = recipe_pools(row, clients)
    except RecipeError as why:
        empty = next(c for c in ("prefill_num_workers", "decode_num_workers") if not _int(row.get(c)))
        raise DisaggRowError(f"column {empty} is empty and {why}") from None
    return prefill, decode, info["draft_tokens"]


def measured_by_inferencex(row: dict) -> bool:
    """Whether InferenceX's benchmark (srt-slurm's sa-bench) measured disaggregated ``row``: every
    row but those of aiconfigurator's eval harness (:func:`~.benchmark_clients.client_protocol`),
    i.e. the recipe rows and the database dump's rows (InferenceX's own runs, by config and
    workflow id). sa-bench draws lengths uniformly from ``[0.8 x len, len]`` and measures all of
    its ``10 x concurrency`` prompts from the first burst on; the eval harness uses exact lengths
    and measures its ``10 x concurrency`` after a warm-up of its own."""
    from agentsim.experiments.benchmark_clients import INFERENCEX, client_protocol

    return str(row.get("mode")).strip() == "disagg" and client_protocol(row) is INFERENCEX


def _sa_bench_lengths(data: dict, row: dict) -> dict:
    """The workload with InferenceX's random lengths (uniform over ``[0.8 x len, len]``)."""
    from agentsim.experiments.disagg_recipes import SA_BENCH_RANGE_RATIO

    isl, osl = _int(row.get("isl")), _int(row.get("osl"))
    lengths = {"initial_context_tokens": {"dist": "uniform", "low": math.floor(isl * SA_BENCH_RANGE_RATIO), "high": isl},
               "output_tokens": {"dist": "uniform", "low": math.floor(osl * SA_BENCH_RANGE_RATIO), "high": osl}}
    return {**data, "workload": {**data["workload"], "agent_classes": {
        name: {**cls, **lengths} for name, cls in data["workload"]["agent_classes"].items()}}}


def disaggregated_row_scenario(row: dict, aggregated_scenario: Callable[[dict], dict]) -> dict:
    """The scenario mapping that emulates disaggregated ``row`` (raises DisaggRowError)."""
    clients = concurrency(row)
    prefill, decode, draft_tokens = row_deployment(row, clients)
    # ``batch_size`` of an aggregated row is per attention-DP rank, as ``prefill_batch_size``
    # is: giving it the prefill worker's whole batch (per-rank batch x DP) would count the DP
    # ranks twice (the builder multiplies by attention_dp_size again).
    as_aggregated = {**row, "mode": "agg", "batch_size": float(_int(row.get("prefill_batch_size")) or 1)}
    for column, key in _PARALLELISM:
        as_aggregated[column] = float(prefill["parallelism"].get(key, 0))
    data = aggregated_scenario(as_aggregated)
    # The clients are the row's, not the prefill pool's batch slots.
    data = {**data, "workload": {**data["workload"], "agent_classes": {
        name: {**cls, "arrival": {**cls["arrival"], "concurrent": clients}}
        for name, cls in data["workload"]["agent_classes"].items()}}}
    if measured_by_inferencex(row):
        data = _sa_bench_lengths(data, row)
        # InferenceX's prefill workers batch by tokens (INFERENCEX_PREFILL_RANK_TOKENS), not by
        # the row's ``prefill_batch_size``: one prompt per rank per step would pay the step's host
        # time (agentsim.hardware.timing.prefill_host) once per prompt and, at thousands of
        # clients, queue them for tens of seconds in front of the prefill pool.
        prefill = {**prefill, "max_num_batched_tokens": INFERENCEX_PREFILL_RANK_TOKENS}
        prefill.pop("max_num_seqs", None)
    serving = dict(data["serving"])
    serving["max_num_seqs"] = clients
    # The benchmark's front end routes both hops in turn: the recipes run Dynamo's frontend
    # (``frontend: type: dynamo``) without a ``router-mode``, and its default is round-robin.
    # Round-robin does not see load: with a decode worker of few slots (the low-latency recipes'
    # ``batch 1-4``) a request can land on a full worker while another is idle and wait there
    # for a whole request's decode, which a least-loaded choice never does.
    serving["router"] = "round_robin"
    if draft_tokens:
        serving["speculative_decoding"] = {"draft_tokens": draft_tokens}
    serving["disaggregation"] = {"prefill": prefill, "decode": {**decode, "max_num_seqs": decode.get("max_num_seqs", clients)},
                                 "decode_router": "round_robin"}
    return {**data, "serving": serving}
