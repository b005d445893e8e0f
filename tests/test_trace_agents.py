"""Agents and pauses derived from a flat trace (agentsim.workload.traces.agents), and the
cache-only replay that gives them to agentic policies."""

import math
from array import array

import pytest

from agentsim.replay.cache_only import replay_cache_only
from agentsim.workload.traces import load_requests
from agentsim.workload.traces.agents import agent_signals
from agentsim.workload.traces.records import TraceRequest
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "traces"


def _call(index, t_s, agent="main", parent=None, stop="tool_use", session="s"):
    return TraceRequest(index=index, timestamp_s=t_s, session_id=session, input_tokens=64, output_tokens=1,
                        block_keys=array("q", [index]), block_tokens=64, agent_id=agent, parent_agent_id=parent,
                        depth=0 if parent is None else 1, stop=stop)


def test_stop_reasons_give_tool_and_human_pauses_and_a_spawn_gives_a_join():
    requests = [
        _call(0, 0.0, stop="tool_use"),                    # main: tool, then calls at 5
        _call(1, 5.0, stop="end_turn"),                    # main: human, then calls at 30
        _call(2, 30.0, stop="tool_use"),                   # main: spawns a sub-agent next -> join
        _call(3, 31.0, agent="a1", parent="main"),         # sub-agent a1 starts: tool, calls at 41
        _call(4, 40.0, stop="tool_use"),                   # main again (a1 still running)
        _call(5, 41.0, agent="a1", parent="main", stop="end_turn"),  # a1's later call
        _call(6, 50.0, stop=""),                           # main: unknown stop -> no pause
        _call(7, 60.0, stop="tool_use"),                   # main's last call -> no pause
        _call(8, 61.0, session=""),                        # no session (Mooncake): no agent
    ]
    signals = agent_signals(requests)
    kinds = [p[1] if p is not None else None for p in signals.pauses]
    # A later call of a sub-agent spawned earlier does not make the parent's next pause a join.
    assert kinds == ["tool", "human", "join", "tool", "tool", "", "", "", None]
    assert signals.pauses[0] == (("s", "main"), "tool", 5.0)
    assert signals.pauses[1][2] == 25.0 and signals.pauses[4][2] == 10.0
    assert math.isnan(signals.pauses[7][2])
    assert signals.pauses[3][0] == ("s", "a1")
    assert signals.agents == 2 and signals.paused_requests == 4 and signals.subagent_joins == 1


def test_cache_only_ttl_pin_pins_on_claude_code_sessions_and_warns_without_pauses():
    sessions = load_requests(FIXTURES / "weka", session_offset_s=1200)
    pinned = replay_cache_only(sessions, capacity_fraction=0.1, policy="ttl_pin").summary()
    lru = replay_cache_only(sessions, capacity_fraction=0.1, policy="lru", clock="trace").summary()
    assert pinned["policy_signals_missing"] == [] and pinned["tool_starts"] > 0
    assert pinned["pins_created"] > 0 and pinned["hit_blocks"] != lru["hit_blocks"]
    mooncake = replay_cache_only(load_requests(FIXTURES / "mooncake_head40.jsonl"), policy="ttl_pin").summary()
    assert mooncake["policy_signals_missing"] == ["agent_pauses"] and mooncake.get("pins_created", 0) == 0


@pytest.mark.parametrize("name", ["trace_0014.json.gz", "trace_0020.json.gz"])
def test_every_pause_of_a_real_session_is_followed_by_the_same_agent(name):
    requests = load_requests(FIXTURES / "weka" / name)
    signals = agent_signals(requests)
    assert signals.has_pauses
    for i, pause in enumerate(signals.pauses):
        owner, kind, gap_s = pause
        if kind in ("tool", "human", "join"):
            later = [j for j in range(i + 1, len(requests))
                     if (requests[j].session_id, requests[j].agent_id) == owner]
            assert later and gap_s == pytest.approx(requests[later[0]].timestamp_s - requests[i].timestamp_s)
            assert kind == "join" or kind == {"tool_use": "tool", "end_turn": "human"}[requests[i].stop]


@pytest.mark.parametrize("policy", ["ttl_pin", "continuum", "kvflow", "infercept", "belady_oracle"])
def test_every_agentic_policy_hears_the_sessions_pauses_and_differs_from_lru(policy):
    """Issue 22, item 2: on a trace that records agents, each pause-driven policy is told of
    every pause (no missing signal) and ends with other hits and evictions than LRU on the same
    clock (they all once replayed exactly as LRU, with no warning)."""
    sessions = load_requests(FIXTURES / "weka", session_offset_s=1200)
    lru = replay_cache_only(sessions, capacity_fraction=0.1, policy="lru", clock="trace").summary()
    result = replay_cache_only(sessions, capacity_fraction=0.1, policy=policy).summary()
    assert result["clock"] == "trace" and result["policy_signals_missing"] == []
    assert result["tool_starts"] > 0 and result["tool_ends"] > 0
    assert result["hit_blocks"] != lru["hit_blocks"]
    assert result["evicted_blocks"] != lru["evicted_blocks"]
