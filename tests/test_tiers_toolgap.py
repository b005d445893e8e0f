"""Tool-gap aware movement (``cache.tiers.on_tool_call: demote``, ``prefetch_before_return``):
the paused agent's private KV leaves HBM for DRAM during the tool call and comes back before
the predicted return, so the returning call finds it in HBM without waiting for a load."""

from __future__ import annotations

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
from agentsim.config.scenario import TiersConfig
from agentsim.engine.simulation import run_scenario

from tests.conftest import ROOT

B = 64
COST = RooflineCostModel(active_params=37e9, total_params=671e9, bytes_per_param=1.0, attn_coeff=2.5e6,
                         kv_bytes_per_token=70272, flops_per_s=5e15 * 0.35, bytes_per_s=8e12 * 0.7)
SHARED = list(range(100))           # a system prompt both agents share (100 blocks)
GAP_S = 10.0


def make_instance(env, on_tool_call="demote", prefetch=True, lead_s=1.0, dram_blocks=10_000):
    lru = EVICTION_POLICIES.get("lru")
    cache = TieredCache(10_000, lru(), [TierSpec("dram", dram_blocks, lru(), "write_back")])
    links = InstanceLinks(h2d=Link(env, "h2d", 150e9, 10e-6), d2h=Link(env, "d2h", 130e9, 10e-6),
                          nvlink_in=Link(env, "nvlink", 900e9, 2e-6), nic=Link(env, "nic", 100e9, 5e-6))
    config = TiersConfig(on_tool_call=on_tool_call, prefetch_before_return=prefetch, return_lead_s=lead_s)
    inst = ServingInstance(env, 0, cache, COST, B, 8, 8192, on_finish=lambda r: r.done.succeed(), links=links,
                           check_invariants=True, tiers_config=config)
    return inst, cache


def call(env, rid, agent, keys, gap_kind="tool", gap_s=GAP_S):
    prompt_tokens = len(keys) * B
    return LLMRequest(rid, agent, "a", 0, rid, env.now, prompt_tokens, 1, len(keys), keys, env.event(),
                      agent_id=agent, next_gap_s=gap_s, next_gap_kind=gap_kind)


def private(agent, n=1500):
    return [agent * 100_000 + i for i in range(n)]


def run_pause_and_return(on_tool_call="demote", prefetch=True, lead_s=1.0, n_private=1500):
    """Agent 1 calls, pauses GAP_S for a tool, and returns with a longer prompt; agent 2 (same
    system prompt) went before. Returns (HBM blocks used mid-gap, the returning call, HBM used
    right after the first call, instance)."""
    env = simpy.Environment()
    inst, cache = make_instance(env, on_tool_call, prefetch, lead_s)
    other = call(env, 1, 2, SHARED + private(2, 200), gap_kind="")
    inst.submit(other)
    env.run(until=other.done)
    first_keys = SHARED + private(1, n_private)
    first = call(env, 2, 1, first_keys)
    inst.submit(first)
    env.run(until=first.done)
    before = cache.hbm.resident_blocks
    env.run(until=env.now + GAP_S / 2)
    mid_gap = cache.hbm.resident_blocks
    cache.check_invariants()
    env.run(until=first.finish_s + GAP_S)
    again = call(env, 3, 1, first_keys + [999_999], gap_kind="")
    inst.submit(again)
    env.run(until=again.done)
    cache.check_invariants()
    return mid_gap, again, before, inst


def test_demote_frees_the_agents_private_hbm_during_the_tool_call_and_keeps_the_shared_prefix():
    mid_gap, _, before, inst = run_pause_and_return(prefetch=False)
    keep_mid_gap, _, keep_before, _ = run_pause_and_return(on_tool_call="keep", prefetch=False)
    assert keep_mid_gap == keep_before == len(SHARED) + 200 + 1500   # keep: nothing moves
    assert before == mid_gap == keep_mid_gap - 1500        # the private chain left HBM at the pause ...
    assert inst.tier_stats["tool_demoted_blocks"] == 1500
    assert inst.cache.tiers[1].resident_blocks >= 1500     # ... for DRAM
    # The shared system prompt (used by the other agent's branch) stayed in HBM.
    assert mid_gap >= len(SHARED) + 200


def test_without_prefetch_the_returning_agent_waits_for_a_dram_load():
    _, again, _, _ = run_pause_and_return(prefetch=False)
    load_wait, _ = load_breakdown(again)
    assert again.tier_hit_tokens["dram"] == 1500 * B
    assert load_wait > 0.005                                # 1500 blocks x 4.5 MB over C2C: ~45 ms


def test_prefetch_before_return_brings_the_kv_back_in_time():
    mid_gap, again, before, inst = run_pause_and_return(lead_s=1.0)
    load_wait, _ = load_breakdown(again)
    assert mid_gap == before == len(SHARED) + 200           # HBM occupancy drops during the gap
    assert inst.tier_stats["return_prefetches"] == 1
    assert inst.tier_stats["return_prefetched_blocks"] == 1500
    # The returning call finds its whole history in HBM: no load, no wait.
    assert again.tier_hit_tokens.get("dram", 0) == 0
    assert again.tier_hit_tokens["hbm"] == (len(SHARED) + 1500) * B
    assert load_wait == 0.0 and again.admitted_s == again.arrival_s
    assert inst.tier_stats["return_waits"] == 0


def test_a_lead_time_too_short_makes_the_returning_call_wait_for_its_prefetch():
    _, again, _, inst = run_pause_and_return(lead_s=0.01)   # the load takes ~45 ms
    queue = again.admitted_s - again.arrival_s
    assert inst.tier_stats["return_waits"] == 1
    assert 0.02 < queue < 0.06
    assert again.tier_hit_tokens["hbm"] == (len(SHARED) + 1500) * B   # still no recompute


def test_a_gap_shorter_than_the_lead_is_not_demoted():
    env = simpy.Environment()
    inst, cache = make_instance(env, lead_s=1.0)
    first = call(env, 1, 1, SHARED + private(1, 300), gap_s=0.5)
    inst.submit(first)
    env.run(until=first.done)
    assert inst.tier_stats["tool_demoted_blocks"] == 0
    assert cache.hbm.resident_blocks == 400


def test_demote_without_room_in_dram_keeps_the_kv_in_hbm():
    env = simpy.Environment()
    inst, cache = make_instance(env, prefetch=False, dram_blocks=100)
    first = call(env, 1, 1, private(1, 50) + private(3, 250))
    inst.submit(first)
    env.run(until=first.done)
    cache.check_invariants()
    # One 300-block run does not fit a 100-block DRAM: a swap never drops KV.
    assert cache.hbm.resident_blocks == 300 and cache.dropped_blocks == 0


SMALL = ["duration_s=3m", "hardware.instances=2", "workload.agent_classes.coding.arrival.concurrent=24",
         "workload.agent_classes.coding.arrival.ramp_s=20s", "hardware.kv_capacity_bytes=6GB",
         "cache.tiers.disk.enabled=false", "run.check_invariants=true"]


def test_scenario_demote_and_prefetch_lower_hbm_occupancy_and_keep_hits_in_hbm():
    path = ROOT / "scenarios" / "gb300-nvl72-tiers.yaml"
    keep = run_scenario(load_scenario(path, SMALL))
    moved = run_scenario(load_scenario(path, SMALL + ["cache.tiers.on_tool_call=demote",
                                                      "cache.tiers.prefetch_before_return=true",
                                                      "cache.tiers.return_lead_s=1s"]))
    s = moved.summary
    assert s["tool_demoted_blocks"] > 0 and s["return_prefetches"] > 0
    occ_keep = keep.tables["occupancy"].query("tier == 'hbm'").used_blocks.mean()
    occ_moved = moved.tables["occupancy"].query("tier == 'hbm'").used_blocks.mean()
    assert occ_moved < occ_keep
    # Most returns found their KV back in HBM: DRAM hits stay a small share of the HBM hits.
    assert s["hit_tokens_by_tier"]["hbm"] > 5 * s["hit_tokens_by_tier"]["dram"]
