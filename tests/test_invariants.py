"""Hypothesis invariants of the cache (random request streams) and of whole simulations."""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.radix import RadixCache
from agentsim.engine.loading import scenario_from_dict
from agentsim.engine.simulation import run_scenario

# Requests are prefixes of a few "conversations" (so they share) plus a private tail.
request_strategy = st.tuples(st.integers(0, 3), st.integers(0, 12), st.integers(0, 4))


@settings(max_examples=60, deadline=None)
@given(st.integers(4, 30), st.lists(request_strategy, min_size=1, max_size=60), st.integers(1, 3))
def test_cache_capacity_pins_and_conservation(capacity, requests, concurrency):
    cache = RadixCache(capacity, EVICTION_POLICIES.get("lru")())
    in_flight = []
    requested = hit = missed = 0
    for step, (conversation, shared_len, tail_len) in enumerate(requests):
        keys = [conversation * 1000 + i for i in range(shared_len)] + [10**6 + step * 10 + i for i in range(tail_len)]
        match = cache.match(keys, float(step))
        cache.pin(match.node)
        pinned = list(_path(match.node))
        need = len(keys) - match.hit_blocks
        if cache.reserve(need, float(step)):
            requested += len(keys)
            hit += match.hit_blocks
            missed += need
            in_flight.append((match, keys, need, pinned))
        else:
            cache.unpin(match.node)
        # Pinned nodes of in-flight requests are still alive and resident.
        for _m, _k, _n, nodes in in_flight:
            assert all(node.alive for node in nodes)
        assert cache.used_blocks <= cache.capacity_blocks
        cache.check_invariants()
        while len(in_flight) > concurrency or (in_flight and step == len(requests) - 1):
            match, keys, need, _nodes = in_flight.pop(0)
            node = cache.commit(match.node, keys[match.hit_blocks:], match.hit_blocks, need, float(step))
            cache.unpin(node)
            cache.check_invariants()
    assert hit + missed == requested


def _path(node):
    while node.parent is not None:
        yield node
        node = node.parent


#: (KV admission rule, preemption, lower tiers) the whole-simulation invariants are checked with.
KV_RULES = {
    "reserve_full": ("reserve_full", "recompute", None),
    "vllm_recompute": ("vllm", "recompute", None),
    "vllm_swap_dram": ("vllm", "swap", {"dram": {"capacity_bytes": "4GB"}}),
    "sglang": ("sglang", "recompute", None),
    "trtllm": ("trtllm", "recompute", None),
}


def _scenario(seed, capacity_gb, concurrent, policy="lru", kv_rule="vllm_recompute"):
    kv_admission, preemption, tiers = KV_RULES[kv_rule]
    cache = {"block_tokens": 64, "eviction": policy}
    if tiers is not None:
        cache["tiers"] = tiers
    return scenario_from_dict({
        "name": "prop", "seed": seed, "duration_s": 90,
        "hardware": {"profile": "gb300_nvl72", "kv_capacity_bytes": f"{capacity_gb}GB"},
        "model": {"profile": "deepseek_v3"},
        "cache": cache,
        "serving": {"max_batch_requests": 8, "prefill_chunk_tokens": 2048,
                    "kv_admission": kv_admission, "preemption": preemption},
        "run": {"check_invariants": True},
        "workload": {"global_system_prompt_tokens": 500, "agent_classes": {"a": {
            "arrival": {"kind": "population", "concurrent": concurrent, "ramp_s": 5},
            "tools_prefix_tokens": 2000,
            "initial_context_tokens": {"dist": "lognormal", "median": 2000, "sigma": 1.0, "round": True},
            "calls_per_session": {"dist": "lognormal", "median": 6, "sigma": 0.6, "min": 1, "round": True},
            "tool_gap_s": {"dist": "exponential", "mean": 3},
            "appended_tokens": {"dist": "lognormal", "median": 1500, "sigma": 1.0, "round": True},
            "output_tokens": {"dist": "lognormal", "median": 80, "sigma": 0.8, "min": 1, "round": True},
            "subagents": {"probability": 0.2, "fanout": 2, "calls": 2},
        }}},
    })


@pytest.mark.parametrize("kv_rule", sorted(KV_RULES))
@settings(max_examples=8, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([1, 2, 8]), st.integers(2, 10))
# A request preempted mid-prefill once resumed as if its computed tokens were its whole prompt
# and committed more blocks than it held at completion.
@example(seed=252, capacity_gb=1, concurrent=7)
def test_simulation_conserves_tokens_and_respects_capacity(kv_rule, seed, capacity_gb, concurrent):
    # check_invariants=True makes every iteration verify capacity, pins and accounting.
    result = run_scenario(_scenario(seed, capacity_gb, concurrent, kv_rule=kv_rule))
    requests = result.tables["requests"]
    done = requests[~requests.rejected]
    assert (done.hit_tokens + done.recomputed_tokens == done.prompt_tokens).all()
    assert (done.hit_tokens < done.prompt_tokens).all()      # at least one token is computed
    assert (done.ttft_s > 0).all() and (done.e2e_s >= done.ttft_s).all()
    occupancy = result.tables["occupancy"]
    assert (occupancy.used_blocks <= occupancy.capacity_blocks).all()
