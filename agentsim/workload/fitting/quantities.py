"""The quantities ``agentsim fit`` extracts from traces (through the trace readers).

WEKA/AgentX sessions (:func:`weka_quantities`), from the main agent's calls unless named
``subagent_*``:

===================  ==========================================================================
tool_gap             s: ``think_time`` of a call whose predecessor stopped with ``tool_use``
human_gap            s: ``think_time`` of a call whose predecessor stopped with ``end_turn``
api_time             s: ``api_time`` (server time) of each call that records it
appended_tokens      tokens: ``in`` growth between consecutive calls, positive part (a decrease
                     is a compaction or a new context: counted in ``excluded``, not fitted)
output_tokens        tokens: ``out`` of each call
calls_per_session    main-agent calls per session
subagent_fanout      sub-agents spawned together (a run of consecutive sub-agent entries)
subagents_per_call   sub-agents spawned after one call: 0 with probability 1 - p, else a fan-out
subagent_calls       calls per sub-agent
subagent_tool_gap    s: the tool gap inside sub-agents
===================  ==========================================================================

``think_time`` is recorded in whole seconds (resolution 1: interval-censored fit); gaps the
reader derives from timestamps when ``think_time`` is missing are not used (they are not on the
same footing), and are counted in ``excluded``. Calls after a ``""`` stop (interrupted or
streamed) are neither tool nor human gaps.

Mooncake (:func:`jsonl_quantities`): input_tokens, output_tokens, interarrival. Bailian adds
calls_per_session and turn_gap (time from a request to its child turn, service included).
Mooncake's timestamps are quantised (most requests share a 3 s tick), so inter-arrival times are
computed after spreading each tick's arrivals uniformly over the tick with a seeded generator:
the documented jitter; without it 90% of the gaps would be 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from agentsim.workload.fitting.sample import Sample
from agentsim.workload.traces import SubAgent, iter_requests, iter_weka_gaps, iter_weka_sessions


@dataclass
class Quantity:
    """One quantity's observations and how its spec is to be written.

    ``spec_extra`` is merged into the fitted spec (``round: true`` for counts, ``min`` bounds);
    ``excluded`` counts observations left out, by reason.
    """

    name: str
    description: str
    unit: str
    sample: Sample
    spec_extra: dict = field(default_factory=dict)
    excluded: dict = field(default_factory=dict)
    zero_inflated_by: str | None = None
    """For ``subagents_per_call``: the quantity whose fitted spec is the non-zero part."""
    spawn_probability: float | None = None


def _sample(values, resolution: float) -> Sample:
    return Sample(np.asarray(values, dtype=float), resolution)


def weka_quantities(files: list[Path], progress=None) -> list[Quantity]:
    """Extract the WEKA quantities from session files (read with ``iter_weka_sessions``)."""
    tool, human, sub_tool, api, appended, output = [], [], [], [], [], []
    calls, fanouts, sub_calls, per_call = [], [], [], []
    missing_think = {"tool": 0, "human": 0, "sub_tool": 0}
    decreases = zero_growth = 0
    for number, file in enumerate(files, 1):
        for session in iter_weka_sessions(file):
            main = session.requests()
            calls.append(len(main))
            api.extend(r.api_time_s for r in main if r.api_time_s is not None)
            output.extend(r.output_tokens for r in main)
            for gap in iter_weka_gaps(session):
                recorded = gap.next.think_time_s
                if gap.prev.agent_id == "main":
                    key, target = {"tool": ("tool", tool), "human": ("human", human)}.get(gap.kind, (None, None))
                    if gap.appended_tokens > 0:
                        appended.append(gap.appended_tokens)
                    elif gap.appended_tokens < 0:
                        decreases += 1
                    else:
                        zero_growth += 1
                elif gap.kind == "tool":
                    key, target = "sub_tool", sub_tool
                else:
                    key, target = None, None
                if target is None:
                    continue
                if recorded is None:
                    missing_think[key] += 1
                else:
                    target.append(recorded)
            # Fan-out: runs of consecutive sub-agent entries in any agent's item list.
            agents = [session.items] + [agent.items for agent in session.subagents()]
            for items in agents:
                spawned_after_call = []  # one entry per call of this agent
                run, seen_call = 0, False
                for item in items:
                    if isinstance(item, SubAgent):
                        run += 1
                        continue
                    if run:
                        fanouts.append(run)
                    if seen_call:
                        spawned_after_call.append(run)
                    seen_call, run = True, 0
                if run:
                    fanouts.append(run)
                if seen_call:
                    spawned_after_call.append(run)
                per_call.extend(spawned_after_call)
            sub_calls.extend(len(agent.requests()) for agent in session.subagents())
        if progress:
            progress(number, len(files), file)
    spawns = np.asarray(per_call, dtype=float)
    p_spawn = float(np.mean(spawns > 0)) if spawns.size else 0.0
    counts = {"round": True, "min": 1.0}
    tokens = {"round": True, "min": 0.0}
    out = [
        Quantity("tool_gap", "gap after a tool call: think_time of the call after stop == tool_use (main agent)",
                 "s", _sample(tool, 1.0), {"min": 0.0}, {"think_time_missing": missing_think["tool"]}),
        Quantity("human_gap", "gap after a human turn: think_time of the call after stop == end_turn (main agent)",
                 "s", _sample(human, 1.0), {"min": 0.0}, {"think_time_missing": missing_think["human"]}),
        Quantity("api_time", "API/service time of a call (api_time, main agent)", "s", _sample(api, 0.01), {"min": 0.0}),
        Quantity("appended_tokens", "input tokens appended between consecutive calls (main agent, positive part)",
                 "tokens", _sample(appended, 1.0), tokens, {"decrease": decreases, "no_growth": zero_growth}),
        Quantity("output_tokens", "output tokens of a call (main agent)", "tokens", _sample(output, 1.0), tokens),
        Quantity("calls_per_session", "main-agent calls per session", "calls", _sample(calls, 1.0), counts),
        Quantity("subagent_fanout", "sub-agents spawned together at one spawn point", "sub-agents",
                 _sample(fanouts, 1.0), counts),
        Quantity("subagents_per_call", "sub-agents spawned after one call (0 with probability 1 - spawn_probability)",
                 "sub-agents", _sample(spawns, 1.0), {"round": True, "min": 0.0},
                 zero_inflated_by="subagent_fanout", spawn_probability=p_spawn),
        Quantity("subagent_calls", "calls per sub-agent", "calls", _sample(sub_calls, 1.0), counts),
        Quantity("subagent_tool_gap", "gap after a tool call inside a sub-agent", "s", _sample(sub_tool, 1.0),
                 {"min": 0.0}, {"think_time_missing": missing_think["sub_tool"]}),
    ]
    return out


def _spread_ties(timestamps_s: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Spread arrivals sharing a timestamp uniformly over the gap to the next distinct timestamp."""
    ts = np.sort(timestamps_s)
    unique, first, counts = np.unique(ts, return_index=True, return_counts=True)
    if unique.size == ts.size:
        return ts
    width = np.diff(unique, append=unique[-1])  # the last tick has no known width: keep its ties
    tick_width = np.repeat(width, counts)
    return np.sort(ts + rng.random(ts.size) * tick_width)


def jsonl_quantities(fmt: str, files: list[Path], seed: int, progress=None) -> list[Quantity]:
    """Quantities of Mooncake or Bailian JSONL traces (all files pooled; arrivals per file)."""
    inputs, outputs, interarrival, turn_gap = [], [], [], []
    sessions: dict[tuple[int, str], int] = {}
    rng = np.random.default_rng([seed, 7])
    quantised = False
    for number, file in enumerate(files, 1):
        timestamps = []
        time_of: dict[int, float] = {}
        for request in iter_requests(file, fmt):
            inputs.append(request.input_tokens)
            outputs.append(request.output_tokens)
            timestamps.append(request.timestamp_s)
            if fmt == "bailian":
                key = (number, request.session_id)
                sessions[key] = sessions.get(key, 0) + 1
                if request.request_id is not None:
                    time_of[request.request_id] = request.timestamp_s
                parent = request.parent_request_id
                if parent is not None and parent in time_of:
                    turn_gap.append(max(request.timestamp_s - time_of[parent], 0.0))
        ts = np.asarray(timestamps, dtype=float)
        if ts.size > 1:
            quantised = quantised or np.unique(ts).size < ts.size
            interarrival.extend(np.diff(_spread_ties(ts, rng)))
        if progress:
            progress(number, len(files), file)
    tokens = {"round": True, "min": 0.0}
    out = [
        Quantity("input_tokens", "input (prompt) tokens of a request", "tokens", _sample(inputs, 1.0), tokens),
        Quantity("output_tokens", "output tokens of a request", "tokens", _sample(outputs, 1.0), tokens),
        Quantity("interarrival", "time between consecutive arrivals" + (" (ties spread over their tick)" if quantised else ""),
                 "s", _sample(interarrival, 0.0), {"min": 0.0}),
    ]
    if fmt == "bailian":
        out.append(Quantity("calls_per_session", "requests per conversation", "calls",
                            _sample(list(sessions.values()), 1.0), {"round": True, "min": 1.0}))
        out.append(Quantity("turn_gap", "time from a request to its next turn (service time included)", "s",
                            _sample(turn_gap, 0.0), {"min": 0.0}))
    return out
