"""Timed trace replay: a real trace through the serving and cache model (open- or closed-loop).

The hardware, model and serving configuration come from a scenario file (``--scenario``;
default: the packaged GB300 / DeepSeek-V3 profiles on one 4-GPU instance); the cache policy and
capacity come from the replay options; the scenario's workload section is not used.

Agentic policies get the agents and pauses the trace records (:mod:`agentsim.engine.trace_driver`);
``policy_signals_missing`` in the summary lists what the policy acts on and the trace cannot
give (as in cache-only replay: ``agent_pauses`` on a trace without tool_use / end_turn stops),
and ``tool_starts`` / ``tool_ends`` count the pauses the policy was told of.
"""

from __future__ import annotations

from pathlib import Path

from agentsim.cache.registries import EVICTION_POLICIES
from agentsim.config.loader import apply_overrides
from agentsim.engine.loading import load_scenario, scenario_from_dict
from agentsim.engine.simulation import Simulation
from agentsim.engine.trace_driver import TraceDriver
from agentsim.errors import InputError
from agentsim.replay.cache_only import make_policy, missing_signals, resolve_capacity
from agentsim.replay.params import validate_policy_params
from agentsim.replay.prefix import canonicalize
from agentsim.workload.traces import iter_weka_sessions, load_requests, resolve_format
from agentsim.workload.traces.agents import agent_signals

DEFAULT_SCENARIO = {
    "name": "trace-replay",
    "seed": 0,
    "duration_s": 1,
    "hardware": {"profile": "gb300_nvl72", "gpus_per_instance": 4},
    "model": {"profile": "deepseek_v3"},
    "workload": {"agent_classes": {"unused": {"arrival": {"kind": "population", "concurrent": 1}}}},
}


def run_timed_replay(trace, fmt: str = "auto", mode: str = "open-loop", policy: str | None = None,
                     capacity_blocks: int | None = None, capacity_fraction: float | None = None,
                     block_tokens: int | None = None, session_offset_s: float = 0.0, out_dir=None,
                     scenario_file: str | Path | None = None, overrides: list[str] | None = None,
                     policy_params: dict | None = None, param_items: list[str] | None = None):
    """Replay ``trace`` with timing; returns a :class:`~agentsim.engine.run_result.RunResult`
    whose summary also holds ``requests``, ``unique_blocks``, ``ideal_hit_ratio``,
    ``block_hit_ratio`` (hit blocks / requested blocks), ``capacity_blocks``, ``policy``, ``mode``.
    Writes the run directory when ``out_dir`` is given.

    ``policy`` None keeps the scenario's eviction policy (default scenario: ``lru``) with its
    parameters; ``policy_params`` (from ``--param``) update them. ``overrides`` (``--set``)
    apply to the scenario file or, without one, to the default scenario. The replay's
    capacity options then set ``hardware.kv_capacity_bytes`` and the trace sets
    ``cache.block_tokens``, whatever the scenario says."""
    if mode not in ("open-loop", "closed-loop"):
        raise InputError(f"unknown timed mode {mode!r}; use open-loop or closed-loop", "--mode")
    fmt = resolve_format(trace, fmt)
    requests = load_requests(trace, fmt, block_tokens=block_tokens, session_offset_s=session_offset_s)
    block = requests[0].block_tokens
    canonical = canonicalize(requests)
    capacity = resolve_capacity(canonical.unique_blocks, capacity_blocks, capacity_fraction)
    if scenario_file is not None:
        base = load_scenario(scenario_file, overrides or [])
    else:
        # --set applies to the default scenario too (its errors name --set).
        base = scenario_from_dict(apply_overrides(DEFAULT_SCENARIO, overrides or []),
                                  source="--set" if overrides else "replay options")
    # The simulated clock runs to the last arrival (and periodic samplers tick all the way):
    # a trace spanning more than the scenario allows would run for ever.
    span_s = max(r.timestamp_s for r in requests)
    if span_s > base.limits.max_duration_s:
        raise InputError(f"the trace spans {span_s:.3g} s of arrivals, above the limit of {base.limits.max_duration_s:g} s "
                         "(limits.max_duration_s; raise it with --set limits.max_duration_s=... if this is intended)",
                         str(trace))
    # A request's tokens become engine state (its KV reservation, its decode steps): 10^20 tokens
    # overflowed a machine integer deep in the run (a traceback), so the scenario's limit on
    # one sequence holds for the trace's too.
    longest = max(requests, key=lambda r: r.input_tokens + r.output_tokens)
    if longest.input_tokens + longest.output_tokens > base.limits.max_prompt_tokens:
        raise InputError(f"request {longest.index + 1} of the trace holds {longest.input_tokens:,} prompt and "
                         f"{longest.output_tokens:,} output tokens, above the limit of "
                         f"{base.limits.max_prompt_tokens:,} tokens of one sequence (limits.max_prompt_tokens; raise it "
                         "with --set limits.max_prompt_tokens=... if this is intended)", str(trace))
    data = base.model_dump(mode="json")
    data["cache"]["block_tokens"] = block
    data["cache"]["eviction"] = eviction_for_replay(data["cache"]["eviction"], policy, policy_params, param_items)
    policy = data["cache"]["eviction"]["name"]
    data["hardware"]["kv_capacity_bytes"] = float(capacity * block * data["model"]["kv_bytes_per_token"])
    data["name"] = f"replay-{Path(str(trace)).name}"
    scenario = scenario_from_dict(data, source=str(scenario_file or "replay options"))
    sessions = None
    if mode == "closed-loop" and fmt == "weka":
        sessions = list(iter_weka_sessions(trace, session_offset_s=session_offset_s))
        if block_tokens is not None and block_tokens != block:
            raise InputError("closed-loop WEKA replay keeps the trace's 64-token blocks; drop --block-size", "--block-size")

    def factory(env, sc, submit, on_mutation=None):
        return TraceDriver(env, sc, submit, requests=requests, sessions=sessions, mode=mode)

    sim = Simulation(scenario, driver_factory=factory)
    result = sim.run()
    table = result.tables["requests"]
    requested_blocks = sum(len(r.block_keys) for r in requests)
    hit_blocks = 0
    if len(table):
        # hit tokens are capped at prompt - 1; count hit blocks from the tokens actually reused
        hit_blocks = int(sum(-(-int(h) // block) for h in table.hit_tokens))
    result.summary.update({
        "mode": mode, "trace": str(trace), "format": fmt, "unique_blocks": canonical.unique_blocks,
        "ideal_hit_ratio": canonical.ideal_hit_blocks / requested_blocks if requested_blocks else 0.0,
        "block_hit_ratio": hit_blocks / requested_blocks if requested_blocks else 0.0,
        "capacity_blocks": capacity, "policy": policy,
        "tool_starts": sim.agentic.tool_starts, "tool_ends": sim.agentic.tool_ends,
        "policy_signals_missing": missing_signals(policy, make_policy(policy, data["cache"]["eviction"]["params"]),
                                                  agent_signals(requests)),
    })
    if sessions is not None:
        result.summary["trace_report"] = weka_reuse_report(table, sessions, block)
    if out_dir is not None:
        from agentsim.results import write_run

        write_run(result, out_dir)
    return result


def eviction_for_replay(current: dict, policy: str | None, params: dict | None,
                        param_items: list[str] | None = None) -> dict:
    """The ``cache.eviction`` mapping of a timed replay.

    The scenario's policy keeps its parameters unless ``--policy`` names another one (whose
    parameters start from its defaults); ``--param`` values update them. Validated here so a
    bad name or value is reported against ``--policy`` / ``--param``, not the scenario.
    """
    name = policy or current.get("name") or "lru"
    if name not in EVICTION_POLICIES:
        raise InputError(EVICTION_POLICIES.unknown_message(name), "--policy")
    merged = dict(current.get("params") or {}) if name == current.get("name") else {}
    merged.update(params or {})
    validate_policy_params(EVICTION_POLICIES, name, merged, param_items)
    return {"name": name, "params": merged}


def weka_reuse_report(table, sessions, block_tokens: int) -> dict:
    """Where reuse and recompute come from in a closed-loop WEKA replay.

    * ``session_hit_ratio_p10/p50/p90``: distribution over sessions of their token hit ratio;
    * ``prefix_hit_fraction``: share of calls (after each agent's first) whose hit covers the
      session's tools+system prefix (``tool_tokens + system_tokens``, whole blocks);
    * ``recomputed_tokens_by_kind``: recompute by what preceded the call (first call, tool gap,
      human gap, sub-agent join).
    """
    import numpy as np

    done = table[~table.rejected]
    per_session = done.groupby("session_id")[["hit_tokens", "prompt_tokens"]].sum()
    ratios = (per_session.hit_tokens / per_session.prompt_tokens.clip(lower=1)).to_numpy()
    prefix_tokens = {}
    for number, session in enumerate(sessions):
        tokens = (session.tool_tokens or 0) + (session.system_tokens or 0)
        prefix_tokens[number] = (tokens // block_tokens) * block_tokens
    later = done[done.gap_kind != "first"]
    needed = later.session_id.map(prefix_tokens).fillna(0)
    covered = later[(needed > 0) & (later.hit_tokens >= needed)]
    with_prefix = later[needed > 0]
    return {
        "sessions": int(len(per_session)),
        "session_hit_ratio_p10": float(np.percentile(ratios, 10)) if len(ratios) else None,
        "session_hit_ratio_p50": float(np.percentile(ratios, 50)) if len(ratios) else None,
        "session_hit_ratio_p90": float(np.percentile(ratios, 90)) if len(ratios) else None,
        "prefix_hit_fraction": float(len(covered) / len(with_prefix)) if len(with_prefix) else None,
        "recomputed_tokens_by_kind": {kind: int(v) for kind, v in done.groupby("gap_kind").recomputed_tokens.sum().items()},
    }
