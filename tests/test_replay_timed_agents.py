"""Timed trace replay gives agentic policies the agents and pauses the trace records.

The fixture sessions in tests/fixtures/traces/weka are whole Claude Code sessions (WEKA
format, see fixtures/traces/README.md): their ``stop`` reasons say whether a tool runs
(``tool_use``) or the human answers (``end_turn``) before the agent's next call.
"""

import json
import math

import pytest
import simpy

from agentsim.engine.trace_driver import TraceDriver
from agentsim.replay.timed import run_timed_replay
from agentsim.workload.traces import iter_weka_sessions, load_requests
from agentsim.workload.traces.agents import agent_signals
from tests.conftest import ROOT, run_cli

FIXTURES = ROOT / "tests" / "fixtures" / "traces"
WEKA_FIXTURES = FIXTURES / "weka"
SESSION_WITH_SUBAGENTS = WEKA_FIXTURES / "trace_0014.json.gz"
MOONCAKE = FIXTURES / "mooncake_head40.jsonl"


def _issued(mode: str, trace=SESSION_WITH_SUBAGENTS):
    """Every request a TraceDriver issues for ``trace``, each served at once (no engine)."""
    env = simpy.Environment()
    issued = []

    def submit(request):
        issued.append(request)
        request.done.succeed()

    sessions = list(iter_weka_sessions(trace)) if mode == "closed-loop" else None
    driver = TraceDriver(env, None, submit, requests=load_requests(trace), sessions=sessions, mode=mode)
    resumed = []
    driver.on_resume = lambda agent_id, request: resumed.append((agent_id, request.request_id, env.now))
    driver.start()
    env.run()
    return issued, resumed


def _expected_pauses(trace=SESSION_WITH_SUBAGENTS):
    """(agent_id path, turn) -> what follows the request, from the trace's stop reasons."""
    requests = load_requests(trace)
    signals = agent_signals(requests)
    return {(r.agent_id, r.turn): signals.pauses[i] for i, r in enumerate(requests)}, requests


@pytest.mark.parametrize("mode", ["closed-loop", "open-loop"])
def test_driver_gives_requests_their_agent_and_the_pause_the_trace_records(mode):
    issued, resumed = _issued(mode)
    expected, requests = _expected_pauses()
    assert len(issued) == len(requests)
    by_key = {(r.agent_id, r.turn): r for r in requests}
    # Pair each issued request with its trace request: an agent's calls in order (one session:
    # agent_class is the sub-agent's id path, "main" for the main agent).
    calls: dict[str, list] = {}
    for trace in sorted(requests, key=lambda r: r.turn):
        calls.setdefault(trace.agent_id, []).append(trace)
    agents = {}
    kinds = set()
    for request in issued:
        trace = calls[request.agent_class].pop(0)
        assert list(trace.block_keys) == list(request.prompt_keys)
        owner, kind, gap_s = expected[(trace.agent_id, trace.turn)]
        assert agents.setdefault(owner, request.agent_id) == request.agent_id  # one id per agent
        assert request.next_gap_kind == kind, (trace.agent_id, trace.turn)
        kinds.add(kind)
        if kind in ("tool", "human") and mode == "open-loop":
            assert request.next_gap_s == pytest.approx(gap_s)
        if kind in ("tool", "human") and mode == "closed-loop":
            following = by_key[(trace.agent_id, trace.turn + 1)]
            assert request.next_gap_s == pytest.approx(max(0.0, following.think_time_s or 0.0))
        if kind == "" or kind == "join" and mode == "closed-loop":  # no pause, or one not known yet
            assert math.isnan(request.next_gap_s)
    assert len(set(agents.values())) == len(agents) > 1  # the main agent and its sub-agents
    assert {"tool", "join", ""} <= kinds
    # The engine is told of the end of every tool / human pause, once, by the agent that paused.
    paused = [r for r in issued if r.next_gap_kind in ("tool", "human")]
    assert sorted(rid for _, rid, _ in resumed) == sorted(r.request_id for r in paused)
    for agent_id, rid, _ in resumed:
        assert issued[[r.request_id for r in issued].index(rid)].agent_id == agent_id


def test_closed_loop_resumes_an_agent_after_its_think_time():
    issued, resumed = _issued("closed-loop")
    ids = {r.request_id: r for r in issued}
    assert resumed
    for _agent, rid, at_s in resumed:
        request = ids[rid]
        # served at once here, so the pause ends its recorded gap after the call...
        assert at_s == pytest.approx(request.arrival_s + request.next_gap_s)
        # ...and the agent's next call is issued at that moment
        later = [r for r in issued if r.agent_id == request.agent_id and r.request_id > rid]
        assert later and later[0].arrival_s == pytest.approx(at_s)


def test_closed_loop_ttl_pin_pins_on_claude_code_sessions_and_differs_from_lru(tmp_path):
    for name in ("0001", "0008", "0014", "0020"):
        (tmp_path / f"trace_{name}.json.gz").symlink_to(WEKA_FIXTURES / f"trace_{name}.json.gz")
    pinned = run_timed_replay(tmp_path, mode="closed-loop", policy="ttl_pin", capacity_fraction=0.1).summary
    lru = run_timed_replay(tmp_path, mode="closed-loop", policy="lru", capacity_fraction=0.1).summary
    assert pinned["policy_signals_missing"] == [] and lru["policy_signals_missing"] == []
    assert pinned["tool_starts"] > 0 and pinned["tool_starts"] == pinned["tool_ends"]
    assert pinned["pins_created"] > 0 and 0 < pinned["pins_honored"] <= pinned["pins_created"]
    assert lru["tool_starts"] == 0 and lru["pins_created"] == 0
    assert pinned["requests"] == lru["requests"]
    assert pinned["capacity_evictions_blocks"] != lru["capacity_evictions_blocks"]
    assert pinned["hit_ratio"] != lru["hit_ratio"]


def test_a_policy_without_its_signals_warns_and_says_so_in_the_summary(tmp_path):
    proc = run_cli("replay", str(MOONCAKE), "--mode", "open-loop", "--policy", "ttl_pin", "--capacity-fraction", "0.2",
                   "--json", "--out", str(tmp_path / "pin"))
    assert proc.returncode == 0, proc.stderr
    assert "warning: policy 'ttl_pin' acts on agents' tool and human pauses" in proc.stderr
    written = json.loads((tmp_path / "pin" / "summary.json").read_text())
    assert written["policy_signals_missing"] == ["agent_pauses"] and written["tool_starts"] == 0
    plain = run_cli("replay", str(MOONCAKE), "--mode", "open-loop", "--capacity-fraction", "0.2", "--json")
    assert plain.returncode == 0 and "warning" not in plain.stderr
    assert json.loads(plain.stdout)["policy_signals_missing"] == []
