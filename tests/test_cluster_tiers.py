"""The memory hierarchy on the serving path, against the hardware reference's worked example
(section 3.4: DeepSeek-V3, 100K-token prefix, one GB300 GPU: recompute ~18.5 s, load from
Grace DRAM at 150 GB/s ~47 ms), and DRAM on/off on the same seed."""

from __future__ import annotations

import math

import pytest
import simpy

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.tiers import TieredCache, TierSpec
from agentsim.cluster.costmodel import RooflineCostModel
from agentsim.cluster.serving.instance import ServingInstance
from agentsim.hardware.links import Link
from agentsim.cluster.request import LLMRequest
from agentsim.engine.hierarchy import load_breakdown
from agentsim.hardware.topology import InstanceLinks
from agentsim.engine.loading import load_scenario
from agentsim.engine.simulation import run_scenario

from tests.conftest import ROOT

B = 64
PREFIX_TOKENS = 100_000
# One GB300 GPU serving DeepSeek-V3 with BF16 KV (the worked example's 7.0 GB for 100K tokens).
COST = RooflineCostModel(active_params=37e9, total_params=671e9, bytes_per_param=1.0, attn_coeff=2.5e6,
                         kv_bytes_per_token=70272, flops_per_s=5e15 * 0.35, bytes_per_s=8e12 * 0.7)


def make_instance(env):
    lru = EVICTION_POLICIES.get("lru")
    cache = TieredCache(200_000, lru(), [TierSpec("dram", 400_000, lru(), "write_back")])
    links = InstanceLinks(h2d=Link(env, "h2d", 150e9, 10e-6), d2h=Link(env, "d2h", 130e9, 10e-6),
                          nvlink_in=Link(env, "nvlink", 900e9, 2e-6), nic=Link(env, "nic", 100e9, 5e-6))
    inst = ServingInstance(env, 0, cache, COST, B, 8, 8192, on_finish=lambda r: r.done.succeed(), links=links,
                           check_invariants=True)
    return inst, cache


def request(env, rid, prompt_tokens):
    keys = list(range(prompt_tokens // B))
    return LLMRequest(rid, 0, "a", 0, rid, env.now, prompt_tokens, 1, len(keys), keys, env.event())


def ttft_of(env, inst, req):
    inst.submit(req)
    env.run(until=req.done)
    return req.first_token_s - req.arrival_s


def test_dram_hit_ttft_lies_between_hbm_hit_and_recompute_and_matches_the_worked_example():
    env = simpy.Environment()
    inst, cache = make_instance(env)
    prompt = PREFIX_TOKENS + B  # the 100K-token prefix plus one new block
    recompute = ttft_of(env, inst, request(env, 0, prompt))
    hbm_hit = ttft_of(env, inst, request(env, 1, prompt))
    # Demote the whole path to DRAM (as HBM pressure would), then hit it there.
    deepest = cache.match(list(range(prompt // B)), env.now, touch=False).node
    moved = cache.demote_path(deepest, env.now)
    assert moved == prompt // B and cache.tiers[1].used_blocks == moved
    req = request(env, 2, prompt)
    dram_hit = ttft_of(env, inst, req)
    load_wait, _ = load_breakdown(req)
    assert req.tier_hit_tokens["dram"] > 0.99 * PREFIX_TOKENS
    assert hbm_hit < dram_hit < recompute
    # Magnitudes from hardware.md section 3.4 (within 15%).
    assert recompute == pytest.approx(18.5, rel=0.15)
    assert load_wait == pytest.approx(0.047, rel=0.15)
    assert dram_hit - hbm_hit == pytest.approx(0.047, rel=0.15)


def test_never_load_rule_recomputes_a_dram_hit():
    from agentsim.cluster.serving.load_rules import NeverLoad

    env = simpy.Environment()
    inst, cache = make_instance(env)
    inst.load_rule = NeverLoad()
    prompt = 20_000
    first = ttft_of(env, inst, request(env, 0, prompt))
    cache.demote_path(cache.match(list(range(prompt // B)), env.now, touch=False).node, env.now)
    req = request(env, 1, prompt)
    again = ttft_of(env, inst, req)
    assert req.hit_tokens == 0 and again == pytest.approx(first, rel=0.01)


SMALL_TIERS = ["duration_s=4m", "hardware.instances=2", "workload.agent_classes.coding.arrival.concurrent=40",
               "workload.agent_classes.coding.arrival.ramp_s=20s", "hardware.kv_capacity_bytes=3GB",
               "run.check_invariants=true"]


@pytest.mark.slow
def test_turning_dram_off_lowers_hit_ratio_and_raises_p99_ttft_on_the_same_seed():
    path = ROOT / "scenarios" / "gb300-nvl72-tiers.yaml"
    with_dram = run_scenario(load_scenario(path, SMALL_TIERS)).summary
    without = run_scenario(load_scenario(path, SMALL_TIERS + ["cache.tiers.dram.enabled=false",
                                                              "cache.tiers.disk.enabled=false"])).summary
    assert with_dram["hit_ratio_by_tier"]["dram"] > 0.02
    assert without.get("hit_ratio_by_tier", {}).get("dram", 0) == 0  # HBM only: the plain cache
    assert with_dram["hit_ratio"] > without["hit_ratio"]
    assert with_dram["ttft_p99_s"] < without["ttft_p99_s"]
    # Loads show up as a TTFT component and as traffic on the host links.
    assert with_dram["ttft_load_wait_mean_s"] > 0
    assert with_dram["link_kinds"]["nvlink_c2c"]["bytes"] > 0
    assert "links" in with_dram and all(math.isfinite(v["utilisation"]) for v in with_dram["links"].values())


def test_tiers_scenario_prints_hits_per_tier_ttft_breakdown_and_links(tmp_path):
    """Issue 3: the run's printed table and summary.json show hits per tier, the TTFT breakdown
    and link traffic/utilisation."""
    import json

    from tests.conftest import ROOT, run_cli

    out = tmp_path / "rack"
    proc = run_cli("run", str(ROOT / "scenarios" / "gb300-nvl72-tiers.yaml"), "--out", str(out),
                   "--set", "duration_s=4m", "--set", "hardware.instances=2",
                   "--set", "workload.agent_classes.coding.arrival.concurrent=40")
    assert proc.returncode == 0, proc.stderr
    for label in ("hit ratio by tier", "TTFT queue mean", "TTFT load mean", "TTFT prefill mean",
                  "link nvlink_c2c"):
        assert label in proc.stdout, label
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["hit_ratio_by_tier"]) >= {"hbm", "dram"}
    assert summary["hit_ratio_by_tier"]["dram"] > 0


@pytest.mark.parametrize("tiers", [True, False], ids=["tiered", "hbm-only"])
def test_eviction_granularity_reaches_every_instance_cache_and_node_granularity_evicts_more(tiers):
    """``cache.eviction_granularity`` sets every instance's cache (tiered or plain); freeing whole
    nodes frees more blocks than asked for, so the same run evicts more blocks in total."""
    from agentsim.engine.simulation import Simulation

    path = ROOT / "scenarios" / "gb300-nvl72-tiers.yaml"
    sets = ["duration_s=3m", "hardware.instances=2", "workload.agent_classes.coding.arrival.concurrent=30",
            "workload.agent_classes.coding.arrival.ramp_s=20s", "hardware.kv_capacity_bytes=2GB"]
    if not tiers:
        sets += ["cache.tiers.dram.enabled=false", "cache.tiers.disk.enabled=false"]
    evicted = {}
    for granularity in ("block", "node"):
        simulation = Simulation(load_scenario(path, sets + [f"cache.eviction_granularity={granularity}"]))
        assert simulation.run().summary["requests"] > 100
        caches = [instance.cache for instance in simulation.instances]
        assert isinstance(caches[0], TieredCache) is tiers
        assert [cache.whole_node_eviction for cache in caches] == [granularity == "node"] * 2
        evicted[granularity] = sum(cache.evicted_blocks for cache in caches)
    assert evicted["node"] > evicted["block"] > 0
