"""A WEKA sub-agent's ``t`` is its end when it records a duration (agentsim.workload.traces.weka)."""

import gzip
import json

import pytest

from agentsim.workload.traces import iter_weka_sessions
from tests.conftest import ROOT

SESSION = ROOT / "tests" / "fixtures" / "traces" / "weka" / "trace_0014.json.gz"


def _write(tmp_path, sub):
    session = {"id": "s", "block_size": 64, "hash_id_scope": "local", "requests": [
        {"t": 10.0, "type": "n", "in": 64, "out": 1, "hash_ids": [1], "stop": "tool_use"},
        {"t": 40.0, "type": "subagent", "agent_id": "a", "requests": [
            {"t": 0.0, "type": "n", "in": 128, "out": 1, "hash_ids": [1, 2], "stop": "tool_use"},
            {"t": 5.0, "type": "n", "in": 192, "out": 1, "hash_ids": [1, 2, 3], "stop": "end_turn"}], **sub},
        {"t": 50.0, "type": "n", "in": 128, "out": 1, "hash_ids": [1, 4], "stop": "end_turn"}]}
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(session))
    return list(iter_weka_sessions(path))[0]


def test_a_subagent_with_a_duration_ends_at_its_t(tmp_path):
    session = _write(tmp_path, {"duration_ms": 20000})
    agent = session.subagents()[0]
    assert agent.start_s == pytest.approx(20.0) and agent.duration_s == pytest.approx(20.0)
    assert [r.timestamp_s for r in agent.requests()] == pytest.approx([20.0, 25.0])


def test_a_subagent_without_a_duration_starts_at_its_t(tmp_path):
    agent = _write(tmp_path, {}).subagents()[0]
    assert agent.start_s == pytest.approx(40.0)
    assert [r.timestamp_s for r in agent.requests()] == pytest.approx([40.0, 45.0])


def test_real_subagents_run_between_the_calls_around_them():
    with gzip.open(SESSION, "rt") as fh:
        raw = json.load(fh)
    entries = raw["requests"]
    spawned = [i for i, e in enumerate(entries) if e.get("type") == "subagent" and e.get("duration_ms")]
    assert spawned
    session = list(iter_weka_sessions(SESSION))[0]
    agents = {a.agent_id: a for a in session.subagents()}
    for i in spawned:
        entry = entries[i]
        agent = agents[entry.get("agent_id", f"agent_{i:03d}")]
        calls = [r.timestamp_s for r in agent.requests()]
        before = max(e["t"] for e in entries[:i] if e.get("type") != "subagent")
        after = min(e["t"] for e in entries[i + 1:] if e.get("type") != "subagent")
        assert agent.start_s == pytest.approx(entry["t"] - entry["duration_ms"] / 1000.0)
        assert before <= calls[0] and calls[-1] <= entry["t"] <= after
