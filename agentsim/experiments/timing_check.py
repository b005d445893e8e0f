"""Check the simulator's step timing against measured serving benchmarks.

Each aggregated row of a measured-runs file (:mod:`.benchmark_rows`) is run through the
simulator as the benchmark client ran it on the real engine (:mod:`.benchmark_clients`):
closed-loop clients that all start at once with requests of ``isl`` random tokens and ``osl``
output tokens; the prediction is the mean TTFT and TPOT over the first ``10 x clients``
requests, the initial burst included, the means the client reports. An InferenceX row's SGLang
server gets its recipe's scheduling flags (:mod:`.benchmark_recipes`), and every engine the
KV-cache type its recipe set (:mod:`.recipe_kv_cache`); an aiconfigurator eval-harness
TensorRT-LLM or vLLM (0.12 on) row gets the step budget aiconfigurator's generator wrote (:mod:`.aic_generator`).
Every request's lengths are drawn as the row's client drew them (uniformly from ``[0.8 L, L]``
for InferenceX rows, exactly ``L`` for aiconfigurator's eval harness); ``client_lengths=False``
gives every request exactly ``L`` (clients in lock-step), see docs/validation.md.
Disaggregated rows are averaged the same way; InferenceX's ones always with its lengths (their
builder draws them, :func:`.disaggregated_rows.measured_by_inferencex`).

The error of a prediction is the factor ``exp(|log(predicted / measured)|)`` (1 = exact, 2 =
off by 2x either way); :func:`summarize` gives its median and p90 over all emulated rows and
per (system, backend, mode).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np
import pandas as pd

from agentsim.config.loader import apply_overrides
from agentsim.engine.loading import scenario_from_dict
from agentsim.engine.simulation import StopRequest, run_scenario
from agentsim.errors import InputError
from agentsim.config.disaggregation import pool_scenario
from agentsim.experiments.agg_recipes import disaggregated_only_reason, recipe_speculation
from agentsim.experiments.aic_generator import generator_serving
from agentsim.experiments.benchmark_clients import ClientProtocol, client_protocol, length_spec
from agentsim.experiments.benchmark_recipes import recipe_serving, server_prefix_caching
from agentsim.experiments.benchmark_rows import RowSkipped, row_scenario
from agentsim.experiments.prefill_capacity import (mean_lengths, prefill_capacity_per_gpu, prefill_gpus,
                                                   sustained_prompt_rate_per_gpu)
from agentsim.experiments.recipe_kv_cache import kv_bytes_at, recipe_kv_cache
from agentsim.experiments.disaggregated_rows import pools_description
from agentsim.hardware.timing.memory import engine_kv_capacity_tokens
from agentsim.hardware.timing.select import build_timer, deployment_of

#: Times the simulated duration is doubled when too few requests finished in it.
_EXTENSIONS = 3


@dataclass
class RowResult:
    """One row's prediction (ms) or the reason it was skipped."""

    id: str
    system: str
    backend: str
    mode: str
    measured_ttft_ms: float
    measured_tpot_ms: float
    predicted_ttft_ms: float | None = None
    predicted_tpot_ms: float | None = None
    skipped: str | None = None
    timing_source: str | None = None
    #: Disaggregated rows: where the pools came from (``row``: its columns; ``recipe``: the
    #: InferenceX recipe it ran; ``recipe, MTP``: only recipes with MTP fit, emulated with it;
    #: ``recipe, ambiguous``: a recipe with and one without MTP fit).
    pools: str | None = None
    #: Aggregated InferenceX rows that only MTP entries fit (:mod:`.agg_recipes`): the draft
    #: tokens they are emulated with (None: one token per step).
    draft_tokens: int | None = None
    #: Simulated requests the prediction is the mean of.
    measured_requests: int | None = None
    #: Disaggregated rows (:mod:`.prefill_capacity`): prompt tokens a second per prefill GPU the
    #: emulated pool computes at most, and the measured run sustained.
    prefill_capacity_per_gpu: float | None = None
    measured_prompt_rate_per_gpu: float | None = None

    @property
    def measured_prefill_load(self) -> float | None:
        """The measured prompt rate over the emulated prefill pool's capacity: above 1 the row's
        prefill step times are too slow for its deployment (:mod:`.prefill_capacity`)."""
        if self.prefill_capacity_per_gpu is None or self.measured_prompt_rate_per_gpu is None:
            return None
        return self.measured_prompt_rate_per_gpu / self.prefill_capacity_per_gpu

    @property
    def ttft_error(self) -> float | None:
        return error_factor(self.predicted_ttft_ms, self.measured_ttft_ms)

    @property
    def tpot_error(self) -> float | None:
        return error_factor(self.predicted_tpot_ms, self.measured_tpot_ms)

    def as_json(self) -> dict:
        return {"id": self.id, "predicted_ttft_ms": self.predicted_ttft_ms,
                "predicted_tpot_ms": self.predicted_tpot_ms, "skipped": self.skipped, "pools": self.pools,
                "draft_tokens": self.draft_tokens, "measured_prefill_load": self.measured_prefill_load}


def error_factor(predicted: float | None, measured: float | None) -> float | None:
    """``exp(|log(predicted / measured)|)``; None when either is missing or not positive."""
    if predicted is None or measured is None or not predicted > 0 or not measured > 0:
        return None
    return math.exp(abs(math.log(predicted / measured)))


def _round_estimate_s(timer, clients: int, isl: int, osl: int, max_seqs: int, batched_tokens: int) -> float:
    """Rough time of one round of requests (all clients' prefills, then their decodes)."""
    if isl <= batched_tokens:
        per_step = max(1, min(clients, batched_tokens // isl))
        steps = math.ceil(clients / per_step)
        prefill_s = steps * timer.iteration_s(tuple((isl, 0) for _ in range(per_step)), 0, 0.0)
    else:
        prefill_s = clients * timer.prefill_s(isl, 0)
    running = min(clients, max_seqs)
    decode_s = timer.decode_stretch_s(running, running * (isl + osl / 2), osl) * math.ceil(clients / running)
    return prefill_s + decode_s


def _with_engine_kv(data: dict) -> dict:
    """``data`` with the KV capacity the engine would give (when the databases can model it)."""
    scenario = scenario_from_dict(data, source="check-timing")
    tokens = engine_kv_capacity_tokens(deployment_of(scenario))
    if tokens is None:
        return data
    data = dict(data)
    token_bytes = kv_bytes_at(data["model"].get("profile"), scenario.model.kv_bytes_per_token,
                              scenario.serving.precision.kv_cache)
    if token_bytes != scenario.model.kv_bytes_per_token:
        # The profile counts BF16 values; the engine stores the recipe's FP8 (half the bytes).
        data["model"] = {**data["model"], "kv_bytes_per_token": token_bytes}
        scenario = scenario_from_dict(data, source="check-timing")
    hbm_bytes = scenario.hardware.hbm_bytes_per_gpu * scenario.hardware.gpus_per_instance
    # Never more than the HBM the simulator's own weight model leaves (its weights can count
    # more than the engine's memory model, e.g. for hybrid-attention layers).
    capacity = min(tokens * scenario.model.kv_bytes_per_token, 0.95 * hbm_bytes, hbm_bytes - scenario.weights_bytes())
    data["hardware"] = {**data["hardware"], "kv_capacity_bytes": capacity}
    if scenario.serving.disaggregation is not None:
        # The prefill pool is the aggregated deployment above; the decode pool has its own.
        decode = pool_scenario(scenario, "decode")
        tokens = engine_kv_capacity_tokens(deployment_of(decode))
        if tokens is not None:
            hbm_bytes = decode.hardware.hbm_bytes_per_gpu * decode.hardware.gpus_per_instance
            pools = dict(data["serving"]["disaggregation"])
            pools["decode"] = {**pools["decode"], "kv_capacity_bytes": min(tokens * scenario.model.kv_bytes_per_token,
                                                                           0.95 * hbm_bytes)}
            data["serving"] = {**data["serving"], "disaggregation": pools}
    return data


def _with_client_lengths(data: dict, protocol: ClientProtocol, isl: int, osl: int) -> dict:
    """``data`` with the request lengths drawn as the benchmark client of ``protocol`` drew them."""
    agent_classes = dict(data["workload"]["agent_classes"])
    agent_classes["client"] = {**agent_classes["client"], "initial_context_tokens": length_spec(isl, protocol),
                               "output_tokens": length_spec(osl, protocol)}
    return {**data, "workload": {**data["workload"], "agent_classes": agent_classes}}


def _measured_requests(finished: pd.DataFrame, clients: int, protocol: ClientProtocol,
                       partial: bool = False) -> pd.DataFrame | None:
    """The requests the benchmark averages: the first ``measured_per_client * clients`` by
    arrival, once one more round has finished (each client has at most one request in flight, so
    every earlier one has ended); None while too few have (unless ``partial``: then those there
    are)."""
    finished = finished.sort_values(["arrival_s", "request_id"])
    wanted = protocol.measured_per_client * clients
    measured = finished.iloc[:wanted]
    complete = len(finished) >= wanted + clients
    return measured if complete or partial else None


def emulate_row(row: dict, overrides: list[str] | None = None, client_lengths: bool = True,
                max_clients: int | None = None) -> RowResult:
    """Run one row through the simulator (``overrides``: ``--set`` PATH=VALUE for every row;
    ``client_lengths``: draw an aggregated row's request lengths as its benchmark client did, the
    default; False gives every request exactly ``isl`` / ``osl`` tokens, clients in lock-step;
    a row of more than ``max_clients`` clients is skipped with that reason).

    Raises InputError for a bad override; a row the simulator cannot emulate comes back with
    ``skipped`` set."""
    result = RowResult(id=str(row["id"]), system=str(row["system"]), backend=str(row["backend"]),
                       mode=str(row["mode"]), measured_ttft_ms=float(row["silicon_ttft_ms"]),
                       measured_tpot_ms=float(row["silicon_tpot_ms"]))
    # (Checked here, not in row_scenario: the disaggregated rows build their pools through it.)
    result.skipped = disaggregated_only_reason(row)
    if result.skipped is not None:
        return result
    try:
        data = row_scenario(row)
    except RowSkipped as why:
        result.skipped = str(why)
        return result
    if result.mode == "disagg":
        result.pools = pools_description(row)
    clients = data["workload"]["agent_classes"]["client"]["arrival"]["concurrent"]
    if max_clients is not None and clients > max_clients:
        result.skipped = f"more than {max_clients} clients ({clients}; --max-clients)"
        return result
    isl, osl = int(row["isl"]), int(row["osl"])
    # Rows are averaged as their benchmark client averaged them (the harness that measured
    # them); a disaggregated InferenceX row's lengths are drawn by its builder already.
    protocol = client_protocol(row)
    if client_lengths and str(row["mode"]).strip() == "agg":
        data = _with_client_lengths(data, protocol, isl, osl)
    if str(row["mode"]).strip() == "agg":
        # The scheduling flags the benchmark's recipe launched the server with.
        serving = data["serving"]
        recipe = recipe_serving(row, serving["max_num_seqs"], serving["parallelism"]["tp"],
                                serving["parallelism"].get("attention_dp", 1))
        recipe.update(generator_serving(row))   # aiconfigurator's eval rows: its generator's limits
        speculation = recipe_speculation(row, clients)
        if speculation is not None:  # only InferenceX entries with MTP fit the row: it ran MTP
            recipe["speculative_decoding"] = {"draft_tokens": speculation["draft_tokens"]}
            result.draft_tokens = speculation["draft_tokens"]
        kv_cache = recipe_kv_cache(row)
        if kv_cache is not None:  # the KV-cache type it set (its capacity, its decode reads)
            recipe["precision"] = {**serving.get("precision", {}), "kv_cache": kv_cache}
        data = {**data, "serving": {**serving, **recipe}}
    if not server_prefix_caching(row):
        # As the server ran: a preempted request recomputes all it had; and no finished
        # request's blocks are kept only to be evicted a few at a time later.
        data = {**data, "cache": {**data["cache"], "admission": "no_prefix_cache"}}
    try:
        data = _with_engine_kv(data)
    except InputError as exc:
        result.skipped = f"not a valid scenario: {exc.render()}"
        return result
    if overrides:
        data = apply_overrides(data, list(overrides))
        try:
            scenario_from_dict(data, source="check-timing")
        except InputError as exc:  # the row was valid, so the override is at fault
            raise InputError(f"{' '.join(overrides)}: {exc.render()}", "--set") from None
    scenario = scenario_from_dict(data, source="check-timing")
    timer, choice = build_timer(scenario)
    result.timing_source = choice.source
    if scenario.serving.disaggregation is not None:
        _check_prefill_load(result, scenario)
    clients = scenario.workload.agent_classes["client"].arrival.concurrent
    round_s = _round_estimate_s(timer, clients, isl, osl, scenario.serving.batch_requests(),
                                scenario.serving.instance_batch_tokens())
    rounds = 1 + protocol.measured_per_client
    duration_s = max(round_s, 1e-3) * rounds * 1.1
    for extension in range(_EXTENSIONS + 1):
        data = {**data, "duration_s": duration_s}
        # The run ends as soon as the measured requests are known (one more round served).
        stop = StopRequest(after_served=protocol.measured_per_client * clients + clients)
        records = run_scenario(scenario_from_dict(data, source="check-timing"), stop=stop).tables["requests"]
        measured = _measured_requests(records[~records["rejected"]], clients, protocol,
                                      partial=extension == _EXTENSIONS)
        if measured is not None:
            break
        duration_s *= 2
    if measured.empty:
        result.skipped = "no request finished in the simulated benchmark"
        return result
    result.measured_requests = len(measured)
    result.predicted_ttft_ms = float(measured["ttft_s"].mean() * 1e3)
    result.predicted_tpot_ms = float(measured["tpot_s"].mean() * 1e3)
    return result


def _check_prefill_load(result: RowResult, scenario) -> None:
    """Set ``result``'s prefill capacity and the prompt rate its measurement sustained."""
    prompt, output = mean_lengths(scenario)
    clients = scenario.workload.agent_classes["client"].arrival.concurrent
    result.prefill_capacity_per_gpu = prefill_capacity_per_gpu(scenario, prompt)
    result.measured_prompt_rate_per_gpu = sustained_prompt_rate_per_gpu(
        clients, prompt, output, result.measured_ttft_ms, result.measured_tpot_ms, prefill_gpus(scenario))


def stratified_sample(frame: pd.DataFrame, n: int) -> pd.DataFrame:
    """``n`` rows spread over the (system, backend, mode) strata in proportion to their size,
    at least one per stratum while ``n`` allows; within a stratum rows are taken in the order of
    a hash of their id, so the sample does not depend on the file's row order."""
    if n >= len(frame):
        return frame
    keyed = frame.assign(_rank=[hashlib.sha256(str(i).encode()).hexdigest() for i in frame["id"]])
    strata = sorted(keyed.groupby(["system", "backend", "mode"], sort=True), key=lambda g: (-len(g[1]), g[0]))
    quota = {key: 0 for key, _ in strata}
    for key, _ in strata[:n]:
        quota[key] = 1
    remaining = n - sum(quota.values())
    sizes = {key: len(group) for key, group in strata}
    while remaining > 0:  # largest remaining share first (deterministic ties: stratum order)
        key = max((k for k, _ in strata if quota[k] < sizes[k]),
                  key=lambda k: sizes[k] / len(frame) * n - quota[k])
        quota[key] += 1
        remaining -= 1
    picked = [group.sort_values("_rank").head(quota[key]) for key, group in strata if quota[key]]
    return pd.concat(picked).drop(columns="_rank").sort_values("id")


def _stats(values: Iterable[float | None]) -> dict:
    array = np.array([v for v in values if v is not None], dtype=float)
    if array.size == 0:
        return {"median": None, "p90": None}
    return {"median": float(np.median(array)), "p90": float(np.percentile(array, 90))}


def _block(results: list[RowResult]) -> dict:
    emulated = [r for r in results if r.skipped is None]
    ttft, tpot = _stats(r.ttft_error for r in emulated), _stats(r.tpot_error for r in emulated)
    loads = [r.measured_prefill_load for r in emulated if r.measured_prefill_load is not None]
    return {"rows": len(results), "emulated": len(emulated),
            # Rows whose measurement computed prompts faster than the emulated prefill pool can.
            "prefill_over_capacity": sum(load > 1.0 for load in loads) if loads else None,
            "emulated_fraction": len(emulated) / len(results) if results else 0.0,
            "ttft_error_median": ttft["median"], "ttft_error_p90": ttft["p90"],
            "tpot_error_median": tpot["median"], "tpot_error_p90": tpot["p90"]}


def summarize(results: list[RowResult]) -> dict:
    """Error-factor statistics: over every row, over the aggregated and over the disaggregated
    rows, per (system, backend, mode), and the skip reasons with their counts."""
    aggregated = [r for r in results if r.mode == "agg"]
    disaggregated = [r for r in results if r.mode == "disagg"]
    groups: dict[tuple[str, str, str], list[RowResult]] = {}
    for r in results:
        groups.setdefault((r.system, r.backend, r.mode), []).append(r)
    reasons: dict[str, int] = {}
    for r in results:
        if r.skipped is not None:
            reasons[r.skipped] = reasons.get(r.skipped, 0) + 1
    sources: dict[str, int] = {}
    for r in results:
        if r.timing_source:
            sources[r.timing_source] = sources.get(r.timing_source, 0) + 1
    by_pools: dict[str, list[RowResult]] = {}
    for r in disaggregated:
        by_pools.setdefault(r.pools or "skipped before its pools were known", []).append(r)
    return {"all": _block(results), "aggregated": _block(aggregated), "disaggregated": _block(disaggregated),
            "disaggregated_by_pools": {k: _block(rs) for k, rs in sorted(by_pools.items())},
            "groups": [{"system": s, "backend": b, "mode": m, **_block(rs)} for (s, b, m), rs in sorted(groups.items())],
            "timing_sources": dict(sorted(sources.items())),
            "skipped_reasons": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))}


def check_rows(frame: pd.DataFrame, overrides: list[str] | None = None,
               on_row: Callable[[RowResult], None] | None = None, client_lengths: bool = True,
               max_clients: int | None = None, done: dict[str, RowResult] | None = None,
               on_new_row: Callable[[RowResult], None] | None = None) -> list[RowResult]:
    """Emulate every row of ``frame`` in order (``on_row`` is called after each;
    ``client_lengths`` and ``max_clients`` as for :func:`emulate_row`). A row whose id is in
    ``done`` takes that result instead of being run again; ``on_new_row`` is called with each
    row that was run (the row log appends it)."""
    results = []
    for row in frame.to_dict("records"):
        result = done.get(str(row["id"])) if done else None
        if result is None:
            result = emulate_row(row, overrides, client_lengths, max_clients)
            if on_new_row is not None:
                on_new_row(result)
        results.append(result)
        if on_row is not None:
            on_row(result)
    return results
