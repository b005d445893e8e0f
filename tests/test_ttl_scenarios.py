"""The two TTL regime scenarios say which regime they are in, and behave accordingly."""

from agentsim.engine.loading import load_scenario
from agentsim.engine.simulation import run_scenario
from tests.conftest import ROOT

SHORT = ["duration_s=15m"]


def run(name, *overrides):
    return run_scenario(load_scenario(ROOT / "scenarios" / name, SHORT + list(overrides))).summary


def test_capacity_bound_ttl_never_fires_and_equals_lru():
    ttl = run("ttl-capacity-bound.yaml")
    lru = run("ttl-capacity-bound.yaml", "cache.eviction=lru")
    assert ttl["regime"] == "capacity_bound"
    assert ttl["ttl_expirations_blocks"] == 0
    assert ttl["ttl_s"] >= ttl["characteristic_eviction_time_s"] + ttl["max_pin_s"]
    for key in ("hit_ratio", "recomputed_tokens", "ttft_p99_s", "evicted_blocks"):
        assert ttl[key] == lru[key], key


def test_ttl_bound_expiry_changes_hits_latency_and_cost():
    ttl = run("ttl-bound.yaml")
    lru = run("ttl-bound.yaml", "cache.tiers.dram.eviction=lru")
    assert ttl["regime"] == "ttl_bound" and ttl["ttl_expirations_blocks"] > 0
    assert lru["ttl_expirations_blocks"] == 0
    assert ttl["hit_ratio"] < lru["hit_ratio"]
    assert ttl["ttft_p99_s"] > lru["ttft_p99_s"]
    # The recompute the TTL causes comes after long (human) gaps.
    assert ttl["recomputed_tokens_by_gap"]["5_60min"] > 5 * lru["recomputed_tokens_by_gap"]["5_60min"]
    assert ttl["provider_bill_usd"] != lru["provider_bill_usd"]
