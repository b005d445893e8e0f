"""Requests that can never be scheduled end with a counted reason, on every serving path, and no
run drains for ever (agentsim/engine/drain.py, agentsim/cluster/serving/admission.py)."""

from __future__ import annotations

import math

import pytest

from agentsim.cache.policies.fifo import FIFO
from agentsim.cache.registries import EVICTION_POLICIES
from agentsim.engine.loading import load_scenario
from agentsim.engine.run_warnings import result_warnings
from agentsim.engine.simulation import run_scenario
from tests.conftest import ROOT

#: A few coding sessions for a minute.
BRIEF = ["duration_s=1m", "workload.agent_classes.coding.arrival.concurrent=12",
         "workload.agent_classes.coding.arrival.ramp_s=5s"]


def _blocks(table, block_tokens: int):
    return -(-(table.prompt_tokens + table.output_tokens) // block_tokens)


def _check_reasons(summary: dict, table, reason: str, capacity_blocks: int, block_tokens: int) -> None:
    """Calls whose prompt and output need more KV blocks than ``capacity_blocks`` are rejected
    with ``reason``, the others are served, and the summary counts the reasons."""
    assert set(table.reject_reason[table.rejected]) == {reason}
    assert (table.reject_reason[~table.rejected] == "").all()
    too_big = _blocks(table, block_tokens) > capacity_blocks
    assert too_big.any() and (~too_big).any(), "the case needs calls on both sides of the capacity"
    assert (table.rejected == too_big).all()
    measured = table[table.arrival_s >= 0.0]
    assert summary["requests_rejected_by_reason"] == {reason: int(measured.rejected.sum())}
    assert summary["requests_rejected"] == int(measured.rejected.sum()) > 0
    assert summary["calls_cut_at_drain_limit"] == 0


def test_aggregated_calls_too_big_for_the_kv_are_rejected_as_kv_capacity(small_scenario_yaml):
    scenario = load_scenario(small_scenario_yaml, BRIEF + ["hardware.kv_capacity_bytes=0.25GB"])
    result = run_scenario(scenario)
    _check_reasons(result.summary, result.tables["requests"], "kv_capacity",
                   scenario.kv_capacity_blocks_per_instance(), scenario.cache.block_tokens)


def test_tiered_calls_too_big_for_hbm_are_rejected_as_kv_capacity():
    """Lower tiers do not make a call fit: its KV must be in HBM to run."""
    path = ROOT / "scenarios" / "gb300-nvl72-tiers.yaml"
    scenario = load_scenario(path, BRIEF + ["hardware.instances=1", "hardware.kv_capacity_bytes=0.8GB",
                                            "cache.tiers.disk.enabled=false", "run.belady_headroom=false"])
    result = run_scenario(scenario)
    _check_reasons(result.summary, result.tables["requests"], "kv_capacity",
                   scenario.kv_capacity_blocks_per_instance(), scenario.cache.block_tokens)


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_disaggregated_calls_too_big_for_a_pool_are_rejected_with_that_pool(role):
    """The prefill pool holds the prompt (plus its first token); the decode pool the prompt and
    every output token: the reason names the pool whose workers can never take the call."""
    from agentsim.config.disaggregation import pool_scenario

    path = ROOT / "scenarios" / "gb300-disagg.yaml"
    scenario = load_scenario(path, BRIEF + [f"serving.disaggregation.{role}.kv_capacity_bytes=0.6GB"])
    result = run_scenario(scenario)
    table = result.tables["requests"]
    pool = pool_scenario(scenario, role)
    capacity = pool.kv_capacity_blocks_per_instance()
    bt = scenario.cache.block_tokens
    needed = _blocks(table, bt) if role == "decode" else -(-(table.prompt_tokens + 1) // bt)
    assert (table.rejected == (needed > capacity)).all() and table.rejected.any() and (~table.rejected).any()
    assert set(table.reject_reason[table.rejected]) == {f"{role}_kv_capacity"}
    assert result.summary["requests_rejected_by_reason"] == {f"{role}_kv_capacity": int(table.rejected.sum())}


def test_prefill_ahead_calls_too_big_are_rejected_and_background_prefills_are_not_calls():
    path = ROOT / "scenarios" / "prefill-ahead.yaml"
    scenario = load_scenario(path, BRIEF + ["hardware.kv_capacity_bytes=1GB"])
    result = run_scenario(scenario)
    table = result.tables["requests"]
    assert (table.request_id >= 0).all()              # background prefills are not in the table
    assert result.summary["prefill_ahead_requests"] > 0
    _check_reasons(result.summary, table, "kv_capacity", scenario.kv_capacity_blocks_per_instance(),
                   scenario.cache.block_tokens)


def test_timed_replay_requests_too_big_are_rejected_as_kv_capacity():
    from agentsim.replay.timed import run_timed_replay

    trace = ROOT / "tests" / "fixtures" / "traces" / "mooncake_head40.jsonl"
    result = run_timed_replay(trace, mode="open-loop", capacity_blocks=40)
    table = result.tables["requests"]
    assert table.rejected.any() and (~table.rejected).any()
    assert set(table.reject_reason[table.rejected]) == {"kv_capacity"}
    assert (table.rejected == (_blocks(table, result.summary["block_tokens"]) > 40)).all()


# --- the drain limit ------------------------------------------------------------------------

def test_without_drain_the_run_ends_at_duration_and_counts_the_calls_in_flight(small_scenario_yaml):
    drained = run_scenario(load_scenario(small_scenario_yaml, BRIEF))
    cut = run_scenario(load_scenario(small_scenario_yaml, BRIEF + ["drain=false"]))
    assert drained.summary["simulated_s"] > 60.0 and cut.summary["simulated_s"] == 60.0
    table = cut.tables["requests"]
    in_flight = table[table.reject_reason == "drain_limit"]
    assert len(in_flight) == cut.summary["calls_cut_at_drain_limit"] > 0
    assert (in_flight.finish_s == 60.0).all() and in_flight.ttft_s.isna().all() and (in_flight.hit_tokens == 0).all()
    # The same calls were issued (same seed): those cut are exactly the drained run's calls that
    # finished after duration_s.
    late = drained.tables["requests"]
    late = late[late.finish_s > 60.0]
    assert sorted(in_flight.request_id) == sorted(late.request_id)
    assert len(table) == len(drained.tables["requests"])
    assert cut.summary["requests_rejected_by_reason"]["drain_limit"] == len(in_flight)


class NeverEvicts(FIFO):
    """A broken plugin: it never gives up a block, so once HBM is full nothing more fits."""

    def pop_victim(self, now_s):
        return None

    def peek_victim(self):
        return None


@pytest.fixture
def never_evicts():
    EVICTION_POLICIES.register("never_evicts")(NeverEvicts)
    yield "never_evicts"
    EVICTION_POLICIES.unregister("never_evicts")


def test_a_call_that_can_never_be_scheduled_is_cut_at_the_drain_limit(small_scenario_yaml, never_evicts):
    """HBM fills with blocks the policy never frees: the waiting calls would wait for ever (the
    run never ended before the drain limit). They end at ``duration_s + limits.max_drain_s``,
    rejected as ``drain_limit``, with a warning."""
    scenario = load_scenario(small_scenario_yaml, BRIEF + [f"cache.eviction={never_evicts}",
                                                           "hardware.kv_capacity_bytes=1GB", "limits.max_drain_s=2m"])
    result = run_scenario(scenario)
    summary = result.summary
    table = result.tables["requests"]
    assert summary["simulated_s"] == pytest.approx(60.0 + 120.0) and summary["complete"]
    stuck = table[table.reject_reason == "drain_limit"]
    assert len(stuck) == summary["calls_cut_at_drain_limit"] > 0
    assert (~table.rejected).any()                      # calls served before HBM filled up
    assert all(math.isnan(v) for v in stuck.e2e_s)
    [note] = [n for n in result_warnings(summary) if "drain limit" in n]
    assert f"{len(stuck):,} calls were still in flight" in note and "limits.max_drain_s" in note


def test_the_drain_limit_is_checked_and_named(small_scenario_yaml):
    from agentsim.errors import InputError

    with pytest.raises(InputError, match=r"limits\.max_drain_s"):
        load_scenario(small_scenario_yaml, ["limits.max_drain_s=-1s"])
    assert load_scenario(small_scenario_yaml).limits.max_drain_s == 3600.0


def test_a_trace_still_arriving_after_the_drain_limit_is_replayed_whole(tmp_path):
    """A timed replay's calls arrive when the trace says, long after ``duration_s``: the drain
    runs from the last call issued, so a trace spanning hours is replayed whole, not cut one
    ``max_drain_s`` after ``duration_s``."""
    import json

    from agentsim.replay.timed import run_timed_replay

    hour_ms = 3_600_000
    trace = tmp_path / "sparse.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": 1000, "output_length": 20,
                                         "hash_ids": list(range(i * 3, i * 3 + 2))}) + "\n"
                             for i, t in enumerate([0, 2 * hour_ms, 5 * hour_ms])))
    result = run_timed_replay(trace, mode="open-loop", capacity_blocks=1000)
    table = result.tables["requests"]
    assert len(table) == 3 and not table.rejected.any()
    assert result.summary["calls_cut_at_drain_limit"] == 0
    assert sorted(table.arrival_s) == [0.0, 7200.0, 18000.0]
    # The limit moved with the calls: it lies past the last one issued.
    assert result.summary["drain_limit_s"] > 18000.0
