"""Agentic policies and diagnostics in the timed (SimPy) simulation.

* TTL timers fire in timed runs; the two TTL regimes of scenarios/ttl-capacity-bound.yaml (spec T2).
* Tool start/end events reach the policy; TTL-pin(tau=0) and admit_all reproduce the base run.
* Every run's summary carries the diagnostics (T1 counters, evictions by reason, T_C, regime,
  Belady headroom).
"""

from __future__ import annotations

import json
import math

import pytest

from agentsim.engine.loading import load_scenario
from agentsim.engine.simulation import run_scenario
from tests.conftest import ROOT, run_cli

REGIMES = ROOT / "scenarios" / "ttl-capacity-bound.yaml"
LARGE = "hardware.kv_capacity_bytes=300GB"


def run(path, *overrides):
    return run_scenario(load_scenario(path, overrides=list(overrides))).summary


def same_outcome(a: dict, b: dict) -> bool:
    keys = ("requests", "hit_tokens", "recomputed_tokens", "evicted_blocks", "ttft_p99_s", "e2e_max_s")
    return all(a[k] == b[k] for k in keys)


def test_capacity_bound_ttl_never_fires_and_equals_lru():
    ttl = run(REGIMES)
    lru = run(REGIMES, "cache.eviction=lru")
    assert ttl["regime"] == "capacity_bound"
    t_c = ttl["characteristic_eviction_time_s"]
    # Spec T2: a TTL at least T_C plus the longest pin cannot fire before capacity evicts.
    assert ttl["ttl_s"] >= t_c + ttl["max_pin_s"]
    assert ttl["ttl_expirations_blocks"] == 0
    assert ttl["evictions_by_reason_blocks"]["capacity"] > 0
    assert same_outcome(ttl, lru)
    assert ttl["ttl_margin_s"] == pytest.approx(ttl["ttl_s"] - t_c)


def test_large_cache_is_ttl_bound_and_the_ttl_changes_hits():
    ttl = run(REGIMES, LARGE)
    lru = run(REGIMES, LARGE, "cache.eviction=lru")
    assert ttl["regime"] == "ttl_bound"
    assert ttl["ttl_expirations_blocks"] > 0
    assert ttl["evictions_by_reason_blocks"]["capacity"] == 0
    assert math.isnan(ttl["characteristic_eviction_time_s"])
    assert lru["regime"] == "no_eviction"
    assert ttl["hit_tokens"] < lru["hit_tokens"]
    # The TTL's misses come after long (human) gaps.
    assert ttl["recomputed_tokens_by_gap"]["5_60min"] > lru["recomputed_tokens_by_gap"]["5_60min"]


def test_diagnostics_are_in_every_summary_and_headroom_is_consistent(tmp_path):
    result = run_cli("run", str(REGIMES), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "capacity_bound" in result.stdout and "T_C" in result.stdout
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    for key in ("ttl_expirations_blocks", "capacity_evictions_blocks", "pins_created", "pins_honored",
                "pins_timed_out", "pins_broken_by_pressure", "characteristic_eviction_time_s", "regime",
                "belady_headroom", "recomputed_tokens_by_gap"):
        assert key in summary
    reasons = summary["evictions_by_reason_blocks"]
    assert set(reasons) >= {"capacity", "ttl_expiry", "pin_timeout", "pressure_unpin", "mutation", "admission"}
    assert sum(reasons.values()) == summary["evicted_blocks"]
    # The upper bound is proven above every policy's replay (agentsim.cache.hit_bound), the
    # Belady heuristic included; its headroom is the bound minus the policy's replay.
    bound = summary["upper_bound_replay_hit_ratio"]
    assert bound >= summary["policy_replay_hit_ratio"] and bound >= summary["belady_replay_hit_ratio"]
    assert summary["upper_bound_headroom"] == pytest.approx(bound - summary["policy_replay_hit_ratio"])
    assert summary["upper_bound_headroom"] >= 0
    assert summary["belady_headroom"] == pytest.approx(
        summary["belady_replay_hit_ratio"] - summary["policy_replay_hit_ratio"])


def test_ttl_pin_zero_tau_reproduces_the_base_run_and_pins_fire_otherwise():
    lru = run(REGIMES, "cache.eviction=lru")
    zero = run(REGIMES, "cache.eviction.name=ttl_pin", "cache.eviction.params={tau_s: 0}")
    assert same_outcome(zero, lru) and zero["pins_created"] == 0
    pinned = run(REGIMES, "cache.eviction.name=ttl_pin", "cache.eviction.params={tau_s: 30}")
    assert pinned["pins_created"] > 0
    assert pinned["pins_honored"] > 0 and pinned["pins_timed_out"] > 0
    assert pinned["pins_created"] >= pinned["pins_honored"] + pinned["pins_timed_out"] + pinned["pins_broken_by_pressure"]
    assert not same_outcome(pinned, lru)
    reasons = pinned["evictions_by_reason_blocks"]
    assert reasons["pin_timeout"] + reasons["pressure_unpin"] > 0


def test_admission_filter_from_the_scenario():
    base = run(REGIMES, "cache.eviction=lru")
    admit_all = run(REGIMES, "cache.eviction=lru", "cache.admission=admit_all")
    assert same_outcome(admit_all, base)
    second = run(REGIMES, "cache.eviction=lru", "cache.admission=second_hit")
    assert second["evictions_by_reason_blocks"]["admission"] > 0
    assert not same_outcome(second, base)


def test_second_hit_keeps_sessions_on_the_default_scenario():
    """Keyed on the block a run starts with (which the session's next call brings back), the
    filter keeps the second use: hits are well above zero, though below admitting everything."""
    default = ROOT / "scenarios" / "coding-agents.yaml"
    second = run(default, "duration_s=3m", "cache.admission=second_hit")
    base = run(default, "duration_s=3m")
    assert second["evictions_by_reason_blocks"]["admission"] > 0
    assert 0.1 * base["hit_ratio"] < second["hit_ratio"] < base["hit_ratio"]


def test_do_not_cache_decode_recomputes_the_previous_output():
    from agentsim.engine.loading import load_scenario
    from agentsim.engine.simulation import run_scenario

    def run_table(*overrides):
        # 300 GB: nothing is evicted, so the only difference is what the filter keeps.
        result = run_scenario(load_scenario(REGIMES, ["cache.eviction=lru", "hardware.kv_capacity_bytes=300GB",
                                                      "duration_s=10m", *overrides]))
        return result.summary, result.tables["requests"]

    base, base_requests = run_table()
    no_decode, requests = run_table("cache.admission=no_decode_cache")
    assert no_decode["hit_ratio"] < base["hit_ratio"]
    # A later call now also recomputes what the previous call generated: about one output's worth.
    extra = (requests[requests.call_index > 0].recomputed_tokens.mean()
             - base_requests[base_requests.call_index > 0].recomputed_tokens.mean())
    mean_output = requests.output_tokens.mean()
    assert 0.75 * mean_output < extra < 1.5 * mean_output + 64


def test_unknown_admission_filter_is_an_input_error(tmp_path):
    result = run_cli("validate", str(REGIMES), "--set", "cache.admission=second_hits")
    assert result.returncode == 2
    assert "second_hit" in result.stderr + result.stdout and "Traceback" not in result.stderr


def test_belady_headroom_can_be_switched_off_without_changing_the_run():
    on = run_scenario(load_scenario(REGIMES))
    off = run_scenario(load_scenario(REGIMES, overrides=["run.belady_headroom=false"]))
    assert on.summary["belady_headroom"] is not None and "headroom_replay_wall_s" in on.summary
    for key in ("belady_headroom", "belady_replay_hit_ratio", "policy_replay_hit_ratio",
                "upper_bound_replay_hit_ratio", "upper_bound_headroom"):
        assert off.summary[key] is None
    assert "headroom_replay_wall_s" not in off.summary
    assert on.summary["belady_headroom_skipped"] is None
    assert off.summary["belady_headroom_skipped"] == "run.belady_headroom is false"
    # Only the replay is skipped: everything the simulation measured is the same.
    skip = {"belady_headroom", "belady_replay_hit_ratio", "policy_replay_hit_ratio", "headroom_replay_wall_s",
            "upper_bound_replay_hit_ratio", "upper_bound_headroom", "belady_headroom_skipped", "wall_s",
            "simulated_requests_per_wall_s"}
    assert {k: v for k, v in on.summary.items() if k not in skip} == \
        {k: v for k, v in off.summary.items() if k not in skip}
    for name, table in on.tables.items():
        assert table.equals(off.tables[name]), name


def test_the_recompute_split_can_be_switched_off_without_changing_the_run():
    split = ("recomputed_tokens_cold", "recomputed_tokens_evicted", "recomputed_tokens_invalidated",
             "recomputed_tokens_evicted_by_tier")
    on = run_scenario(load_scenario(REGIMES, overrides=["duration_s=5m"]))
    off = run_scenario(load_scenario(REGIMES, overrides=["duration_s=5m", "run.recompute_split=false"]))
    assert on.summary["recomputed_tokens_evicted"] > 0 and on.summary["recompute_record_bytes"] > 0
    for key in split:
        assert off.summary[key] is None
    assert off.summary["recompute_record_bytes"] == 0
    skip = {*split, "recompute_record_bytes", "wall_s", "simulated_requests_per_wall_s", "headroom_replay_wall_s"}
    assert {k: v for k, v in on.summary.items() if k not in skip} == \
        {k: v for k, v in off.summary.items() if k not in skip}
    columns = ["recomputed_cold_tokens", "recomputed_evicted_tokens", "recomputed_invalidated_tokens"]
    assert on.tables["requests"].drop(columns=columns).equals(off.tables["requests"].drop(columns=columns))


def test_prefix_caching_off_keeps_nothing_and_hits_nothing():
    # 300 GB: nothing is evicted for capacity, so every block that leaves goes at release.
    base = run(REGIMES, "hardware.kv_capacity_bytes=300GB", "duration_s=5m")
    off = run(REGIMES, "hardware.kv_capacity_bytes=300GB", "duration_s=5m", "cache.admission=no_prefix_cache")
    assert base["hit_ratio"] > 0.5
    assert off["hit_ratio"] == 0.0
    assert off["evictions_by_reason_blocks"]["admission"] > 0
    assert off["requests"] > 0


def test_a_headroom_stream_past_the_limit_is_dropped_at_once_and_the_summary_says_why(monkeypatch):
    from agentsim.engine import diagnostics
    from agentsim.engine.simulation import Simulation

    full = run_scenario(load_scenario(REGIMES))
    monkeypatch.setattr(diagnostics, "HEADROOM_MAX_BLOCKS", 500)
    simulation = Simulation(load_scenario(REGIMES))
    seen = []
    observe = simulation.diagnostics.observe_request

    def observe_and_measure(request):
        observe(request)
        seen.append(sum(len(stream) for stream in simulation.diagnostics.streams.values()))

    simulation.diagnostics.observe_request = observe_and_measure
    small = simulation.run()
    assert small.summary["belady_headroom"] is None
    assert small.summary["belady_headroom_skipped"] == "request stream exceeded 500 blocks"
    # Dropped when it passed the limit, not kept to the end: the stream is empty from then on.
    assert max(seen) > 0 and seen[-1] == 0 and len(seen) > seen.index(0) + 10
    assert small.summary["hit_tokens"] == full.summary["hit_tokens"]
