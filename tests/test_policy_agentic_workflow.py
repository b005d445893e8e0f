"""InferCept (preserve / swap / discard per pause) and KVFlow (steps-to-execution) on hand-made sequences."""

from __future__ import annotations

import math

import pytest

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.policies.lru import LRU
from agentsim.cache.tiers import TieredCache, TierSpec
from tests.test_policy_agentic import log_removals, make, random_agent_trace, run_agent_trace, serve


# --- InferCept ---------------------------------------------------------------------------------

def test_infercept_chooses_the_action_with_least_waste():
    _cache, policy = make("infercept", 1000)
    # preserve waste = T_INT * C; discard waste = C * 1e-3 * C (chunked): for C = 100 blocks,
    # discard = 10 block-s, preserve = 100 * T_INT: preserve iff T_INT < 0.1 s.
    assert policy.choose(100, 0.05) == "preserve"
    assert policy.choose(100, 5.0) == "discard"
    assert "swap" not in policy.wastes(100, 5.0)           # no lower tier: swap unavailable


def test_infercept_soft_discard_is_evicted_first_and_plain_unpin_is_the_base():
    cache, policy = make("infercept", 9, force_action="discard")
    serve(cache, [1, 2, 3], 0.0)                              # older, plain
    serve(cache, [10, 11, 12], 1.0, owner="a", gap_s=5)       # discarded chain
    policy.on_timer(1.0)                                      # post-unpin work
    log = log_removals(cache)
    serve(cache, [20, 21, 22, 23], 2.0)                       # 3 blocks free: one must go
    assert log == [(12, 1, "capacity")]                       # the discarded chain's tail, not LRU's [1, 2, 3]
    cache.check_invariants()


def test_infercept_strict_discard_frees_at_once():
    cache, policy = make("infercept", 9, force_action="discard", discard_mode="strict")
    serve(cache, [1, 2, 30], 0.0)                              # [1, 2] is shared by two branches
    serve(cache, [1, 2, 10, 11], 1.0, owner="a", gap_s=5)
    policy.on_timer(1.0)
    assert cache.match([1, 2, 10, 11], 2.0, touch=False).hit_blocks == 2   # shared prefix kept
    assert cache.evicted_by_reason["tool_discard"] == 2
    cache.check_invariants()


@pytest.mark.parametrize("seed", [0, 1])
def test_infercept_reductions(seed):
    events = random_agent_trace(seed)
    # Soft discard as a plain unpin == base (spec 6).
    base = run_agent_trace(make("lru", 24)[0], events)
    assert run_agent_trace(make("infercept", 24, force_action="discard", discard_priority=False,
                                pin_tools=["tool"])[0], events) == base
    # Always-preserve == TTL-pin(tau = inf) (same pressure order).
    base = run_agent_trace(make("lru", 32)[0], events)
    pinned = run_agent_trace(make("ttl_pin", 32, tau_s=math.inf, pressure_order="oldest")[0], events)
    preserve = run_agent_trace(make("infercept", 32, force_action="preserve", pressure_order="oldest",
                                    pin_tools=["tool"])[0], events)
    assert preserve == pinned and pinned != base


def test_infercept_swap_demotes_the_private_chain_to_dram():
    hbm_policy = EVICTION_POLICIES.get("infercept")(EVICTION_POLICIES.validate_params("infercept", {"force_action": "swap"}))
    cache = TieredCache(10, hbm_policy, lower=[TierSpec("dram", 20, LRU())])
    serve(cache, [1, 2, 30], 0.0)                              # [1, 2] is shared by two branches
    serve(cache, [1, 2, 10, 11, 12], 1.0, owner="a", gap_s=30)
    hbm_policy.on_timer(1.0)
    assert hbm_policy.swapped_blocks == 3
    assert cache.hbm_prefix(cache.match([1, 2, 10, 11, 12], 2.0, touch=False).node)[1] == 2
    assert cache.peek([1, 2, 10, 11, 12]) == (2, 5)           # the tail is in DRAM
    cache.check_invariants()


# --- KVFlow ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kvflow_without_workflow_is_lru(seed):
    events = random_agent_trace(seed)
    base = run_agent_trace(make("lru", 24)[0], events)
    assert run_agent_trace(make("kvflow", 24, use_workflow=False)[0], events) == base


def test_kvflow_without_tool_events_is_lru():
    from tests.test_policy_zoo import random_trace
    from agentsim.cache.sequential import replay_sequence as replay

    requests = random_trace(3)
    logs = []
    for name in ("lru", "kvflow"):
        cache, _ = make(name, 20)
        log = log_removals(cache)
        replay(cache, requests)
        logs.append(log)
    assert logs[0] and logs[0] == logs[1]


def test_kvflow_keeps_the_kv_of_the_agent_that_returns_first():
    cache, policy = make("kvflow", 9, step_s=1.0, hold_step=8)
    serve(cache, [1, 2, 3], 0.0, owner="soon", gap_s=2.0)      # returns at t=2: hold 1-2 steps
    serve(cache, [10, 11, 12], 1.0, owner="late", gap_s=100.0)  # returns at t=101: beyond horizon
    log = log_removals(cache)
    serve(cache, [20, 21, 22, 23], 1.5)
    # LRU would evict [1, 2, 3] (older); KVFlow evicts the agent that returns later.
    assert {k for k, _b, _r in log} <= {10, 11, 12} and log
    policy.on_tool_end("soon", 2.0)
    assert policy.hold(cache.match([1, 2, 3], 2.0, touch=False).node, 2.0) == 9
    cache.check_invariants()
