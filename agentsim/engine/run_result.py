"""A finished run's :class:`RunResult`: its summary dict and long-form tables.

:func:`build_result` reads everything it needs of the simulation's live state first (counters,
diagnostics, the tiers' and hand-offs' summaries with their request keys left to fill, the link
tables), then, when asked, has the simulation let go of that state, and only then builds the
request table and the record tables from the record buffers. A run's peak memory is then the
larger of its live state and its tables, not their sum (docs/design.md, "Record columns").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from agentsim.engine.agents import AgentDriver
from agentsim.engine.deployment import deployment_summary
from agentsim.engine.disaggregated import fill_request_summary as fill_disaggregated_summary
from agentsim.engine.economics import economics_summary
from agentsim.engine.hierarchy import request_summary as hierarchy_request_summary
from agentsim.engine.run_warnings import kv_capacity_warning
from agentsim.cluster.serving.kv_growth import KV_STATS
from agentsim.hardware.links import link_frame
from agentsim.hardware.tier_kinds import tier_names
from agentsim.metrics.request_table import request_table
from agentsim.metrics.summary import rows_where, summarize_requests
from agentsim.metrics.timeseries import series_tables


@dataclass
class RunResult:
    """What one run produces. ``summary`` keys are snake_case with units in the name."""

    summary: dict
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    scenario: object = None


def build_result(sim, wall_s: float, release_state: bool = False) -> RunResult:
    """The run's summary and tables. Everything read from the live state (caches, instances,
    links, diagnostics) is read first; with ``release_state`` the simulation then lets go
    of that state (:meth:`_release_state`) before the request table is built, so the
    table's columns take the memory the state held instead of adding to it."""
    scenario = sim.scenario
    simulated_s = float(sim.env.now)
    requests_count = len(sim.request_records)
    state = _state_summary(sim, wall_s, simulated_s, requests_count)
    kv_admission = kv_admission_summary(scenario.serving, sim.instances)
    # The diagnostics' statistics over every recorded eviction age, and the headroom replay,
    # need none of the live state: they run once it has gone (DeferredDiagnostics).
    diagnostics, deferred_diagnostics = sim.diagnostics.summary_before_release()
    later: dict = {}
    if sim.prefill_ahead is not None:
        later.update(sim.prefill_ahead.summary(simulated_s))
    elif scenario.serving.prefill_ahead.name != "none":
        # A trace replay has no tool gaps whose output could stream in ahead of the call.
        later["prefill_ahead"] = f"{scenario.serving.prefill_ahead.name} (not applied: the workload has no agent tool gaps)"
    if sim.recompute is not None:
        later["recomputed_tokens_evicted_by_tier"] = dict(sim.recompute.evicted_by_tier_tokens)
    else:   # run.recompute_split off: not worked out
        later.update(dict.fromkeys(("recomputed_tokens_cold", "recomputed_tokens_evicted",
                                    "recomputed_tokens_invalidated", "recomputed_tokens_evicted_by_tier")))
    # Too little KV for one request at the context limit (a trace's prompts have no such limit).
    later["kv_capacity_warning"] = kv_capacity_warning(scenario) if isinstance(sim.driver, AgentDriver) else None
    later["recompute_record_bytes"] = sim.recompute.state_bytes() if sim.recompute is not None else 0
    hierarchy_state = sim.hierarchy.state_summary(simulated_s) if sim.hierarchy is not None else None
    disaggregated_state = (sim.disaggregated.state_summary(simulated_s) if sim.disaggregated is not None
                           else None)
    # The link tables' rows now (the links go with the state), their frames after.
    hierarchy_links = sim.hierarchy.link_rows(simulated_s) if sim.hierarchy is not None else None
    handoff_links = sim.disaggregated.link_rows(simulated_s) if sim.disaggregated is not None else None
    # The record buffers outlive the state; their tables are built after it has gone.
    occupancy, series = sim.occupancy, sim.timeseries.buffers()
    if release_state:
        sim._release_state()
    deferred_diagnostics.finish(diagnostics)
    del deferred_diagnostics

    # Released: the buffers go as the table takes their values (nothing else reads them).
    requests = request_table(sim.request_records, sim.tier_hit_records, tier_names(), consume=release_state)
    tables = {"requests": requests, "occupancy": occupancy.frame()}
    del occupancy
    if hierarchy_links is not None or handoff_links is not None:
        frames = [link_frame(rows) for rows in (hierarchy_links, handoff_links) if rows is not None]
        tables["links"] = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    tables.update(series_tables(*series))
    del series
    summary = {"scenario": scenario.name, "seed": scenario.seed, "policy": scenario.cache.eviction.name}
    summary.update(summarize_requests(requests, scenario.run.warmup_s, simulated_s))
    summary.update(state)
    summary.update(kv_admission)
    summary.update(economics_summary(scenario, requests, summary))  # GPU cost and provider cache bill
    ttft_p99 = summary["ttft_p99_s"]
    summary["slo_ttft_p99_met"] = (bool(ttft_p99 <= scenario.slo.ttft_p99_s) if scenario.slo.ttft_p99_s is not None else None)
    summary["sla_target_met"] = bool(summary["sla_attainment"] >= scenario.slo.attainment_target) if summary["requests"] else False
    summary.update(diagnostics)
    summary.update(later)
    if hierarchy_state is not None or disaggregated_state is not None:
        measured = rows_where(requests, requests.arrival_s >= scenario.run.warmup_s)
        if hierarchy_state is not None:
            summary.update(hierarchy_request_summary(measured))
            summary.update(hierarchy_state)
        if disaggregated_state is not None:
            summary.update(fill_disaggregated_summary(disaggregated_state, measured))
        del measured
    # A run stopped early (Ctrl-C, SIGTERM) summarises the requests finished so far.
    summary["complete"] = sim.stop_reason is None
    if sim.stop_reason is not None:
        summary["incomplete_reason"] = sim.stop_reason
    return RunResult(summary=summary, tables=tables, scenario=scenario)


def _state_summary(sim, wall_s: float, simulated_s: float, requests_count: int) -> dict:
    """The summary's keys read from the counters of the driver, caches and instances, and
    the deployment (after the request summary's keys, before the KV admission's)."""
    scenario = sim.scenario
    counters = sim.driver.counters
    caches = [inst.cache for inst in sim.instances]
    busy_s = sum(inst.busy_s for inst in sim.instances)
    gpus = (scenario.hardware.gpus_per_instance * len(sim.instances) if sim.disaggregated is None
            else sim.disaggregated.gpus)
    return {
        "sessions": counters.sessions_started,
        "sessions_finished": counters.sessions_finished,
        "sessions_context_full": counters.sessions_context_full,
        "subagents": counters.subagents_spawned,
        "compactions": counters.compactions,
        "edits": counters.edits,
        "invalidated_blocks": counters.invalidated_blocks,
        "kv_capacity_blocks": sim.capacity_blocks * len(sim.instances),
        "kv_capacity_bytes": sim.capacity_blocks * len(sim.instances) * sim.block_tokens * scenario.model.kv_bytes_per_token,
        "block_tokens": sim.block_tokens,
        "evicted_blocks": sum(c.evicted_blocks for c in caches),
        "evicted_blocks_by_reason": _merge_counts(c.evicted_by_reason for c in caches),
        "inserted_blocks": sum(c.inserted_blocks for c in caches),
        "gpu_busy_fraction": busy_s / (simulated_s * len(sim.instances)) if simulated_s > 0 else 0.0,
        "gpu_seconds": simulated_s * gpus,
        "iterations": sum(inst.iterations for inst in sim.instances),   # decode workers' when disaggregated
        "timing_source": sim.timing.source,
        "timing_reason": sim.timing.reason,
        "timing_deployment": sim.timing.deployment,
        "deployment": deployment_summary(scenario, sim.instances, sim.timing, pool_timings=(
            {role: timer for role, (_cost, timer) in sim.disaggregated.timers.items()}
            if sim.disaggregated is not None else None)),
        "simulated_s": simulated_s,
        "drain_limit_s": sim.drain.limit_s,
        "calls_cut_at_drain_limit": sim.drain.cut_calls,
        "wall_s": wall_s,
        "simulated_requests_per_wall_s": requests_count / wall_s if wall_s > 0 else math.inf,
    }


def kv_admission_summary(serving, instances) -> dict:
    """The KV admission rule in force and its preemption counters, summed over the instances
    (over the whole run, warm-up included, as the cache counters are)."""
    out: dict = {"kv_admission": serving.kv_admission_rule(), "preemption": serving.preemption}
    for key in KV_STATS:
        out[key] = sum(inst.kv_stats[key] for inst in instances)
    return out


def _merge_counts(dicts) -> dict[str, int]:
    out: dict[str, int] = {}
    for counts in dicts:
        for key, value in counts.items():
            out[key] = out.get(key, 0) + value
    return dict(sorted(out.items()))
