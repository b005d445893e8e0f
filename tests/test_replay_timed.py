"""Timed trace replay (open-loop and closed-loop) on small real-trace fixtures."""

import json

import pytest

from agentsim.replay.timed import run_timed_replay
from agentsim.workload.traces import iter_weka_sessions
from tests.conftest import ROOT, run_cli

FIXTURES = ROOT / "tests" / "fixtures" / "traces"
MOONCAKE = FIXTURES / "mooncake_head40.jsonl"
WEKA = FIXTURES / "weka_trace_0014_excerpt.json.gz"
WEKA_FIXTURES = FIXTURES / "weka"  # whole sessions (see fixtures/traces/README.md)


def test_open_loop_requests_arrive_at_their_timestamps():
    result = run_timed_replay(MOONCAKE, mode="open-loop", capacity_fraction=0.5)
    table = result.tables["requests"]
    from agentsim.workload.traces import load_requests

    trace = load_requests(MOONCAKE)
    assert len(table) == len(trace)
    assert list(table.arrival_s) == pytest.approx([r.timestamp_s for r in trace])
    assert (table.hit_tokens + table.recomputed_tokens == table.prompt_tokens).all()
    assert result.summary["unique_blocks"] > 0 and 0 <= result.summary["block_hit_ratio"] <= result.summary["ideal_hit_ratio"] + 1e-9


def test_closed_loop_keeps_think_times_and_joins_subagents():
    result = run_timed_replay(WEKA, mode="closed-loop", capacity_fraction=1.0)
    table = result.tables["requests"]
    sessions = list(iter_weka_sessions(WEKA))
    n_requests = sum(len(s.all_requests()) for s in sessions)
    assert len(table) == n_requests
    main = table[table.depth == 0].sort_values("call_index")
    # Each next main-agent call starts after the previous one finished plus its gap.
    for (_, prev), (_, nxt) in zip(main.iloc[:-1].iterrows(), main.iloc[1:].iterrows()):
        assert nxt.arrival_s >= prev.finish_s - 1e-9
        if nxt.gap_kind in ("tool", "human"):
            assert nxt.arrival_s == pytest.approx(prev.finish_s + nxt.gap_before_s)
    report = result.summary["trace_report"]
    assert report["sessions"] == len(sessions)
    assert 0 <= report["session_hit_ratio_p10"] <= report["session_hit_ratio_p50"] <= report["session_hit_ratio_p90"] <= 1
    assert sum(report["recomputed_tokens_by_kind"].values()) == int(table.recomputed_tokens.sum())
    if any(s.subagents() for s in sessions):
        assert result.summary["subagents"] > 0
        assert (table.gap_kind == "join").any()


def test_closed_loop_is_slower_when_the_cache_is_smaller(tmp_path):
    # Four real sessions (copied to tests/fixtures/traces/weka) replayed together compete for the cache.
    for name in ("0001", "0008", "0014", "0020"):
        (tmp_path / f"trace_{name}.json.gz").symlink_to(WEKA_FIXTURES / f"trace_{name}.json.gz")
    big = run_timed_replay(tmp_path, mode="closed-loop", capacity_fraction=1.0).summary
    small = run_timed_replay(tmp_path, mode="closed-loop", capacity_fraction=0.1).summary
    assert big["requests"] == small["requests"] and small["requests_rejected"] == 0
    assert small["hit_ratio"] < big["hit_ratio"]
    # A slower cache delays the agents: the sessions take longer in simulated time.
    assert small["simulated_s"] > big["simulated_s"]


def test_replay_cli_timed_json(tmp_path):
    proc = run_cli("replay", str(MOONCAKE), "--mode", "open-loop", "--capacity-fraction", "0.2", "--json",
                   "--out", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    for key in ("requests", "unique_blocks", "ideal_hit_ratio", "hit_ratio", "capacity_blocks", "policy", "ttft_p99_s"):
        assert key in summary
    assert (tmp_path / "r" / "requests.parquet").exists()


def test_replay_refuses_to_overwrite_a_run_without_force(tmp_path):
    out = tmp_path / "r"
    args = ["replay", str(MOONCAKE), "--json", "--out", str(out)]
    assert run_cli(*args).returncode == 0
    before = (out / "summary.json").read_bytes()
    again = run_cli(*args, "--mode", "open-loop")
    assert again.returncode == 2 and "--force" in again.stderr
    assert (out / "summary.json").read_bytes() == before
    assert run_cli(*args, "--mode", "open-loop", "--force").returncode == 0
