"""An exclusive tier between HBM and an inclusive tier below it: a block keeps one copy in
the exclusive tier or none (docs/hierarchy.md: "no block is resident in two tiers"), whichever
way it leaves HBM. Regression for an HBM victim loaded from the inclusive disk (which kept its
copy) being demoted into the exclusive DRAM tier as well."""

from __future__ import annotations

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.tiers import TieredCache, TierSpec
from agentsim.engine.loading import scenario_from_dict
from agentsim.engine.simulation import run_scenario
from tests.test_tiers import seq, serve


def exclusive_dram_over_inclusive_disk(hbm=20, dram=20, disk=100):
    transfers = []
    lru = EVICTION_POLICIES.get("lru")
    lower = [TierSpec("dram", dram, lru(), "write_back", inclusive=False, host=True),
             TierSpec("disk", disk, lru(), "write_back", inclusive=True)]
    cache = TieredCache(hbm, lru(), lower, on_transfer=lambda src, dst, n: transfers.append((src, dst, n)))
    return cache, transfers


def _loaded_back_from_disk(cache: TieredCache) -> list[int]:
    """Serve ``a`` until it sits in HBM and in the inclusive disk (and not in DRAM)."""
    a = seq(0, 20)
    serve(cache, a, 1.0)
    serve(cache, seq(1000, 20), 2.0)   # a -> DRAM (the only copy)
    serve(cache, seq(2000, 20), 3.0)   # b -> DRAM pushes a down to disk
    out = serve(cache, a, 4.0)         # a loaded from disk; the inclusive disk keeps its copy
    assert out["by_source"] == {2: 20}
    node = cache.match(a, 4.0, touch=False).node
    assert [e is not None for e in node.entries] == [True, False, True]
    return a


def test_hbm_victim_held_by_the_inclusive_disk_is_not_copied_into_exclusive_dram():
    cache, transfers = exclusive_dram_over_inclusive_disk()
    a = _loaded_back_from_disk(cache)
    before = list(transfers)
    serve(cache, seq(3000, 20), 5.0)   # evicts a from HBM (serve checks the invariants)
    node = cache.match(a, 5.0, touch=False).node
    assert [e is not None for e in node.entries] == [False, False, True], "a stays on disk, once"
    assert ("hbm", "dram", 20) not in transfers[len(before):], "no copy written to DRAM for a"
    assert serve(cache, a, 6.0)["by_source"] == {2: 20}, "the next hit still loads a, from disk"


def test_tool_gap_swap_out_leaves_a_disk_held_block_on_disk_only():
    cache, _ = exclusive_dram_over_inclusive_disk()
    a = _loaded_back_from_disk(cache)
    node = cache.match(a, 5.0, touch=False).node
    moved = cache.swap_out_path(node, 5.0)
    assert moved == 20
    assert [e is not None for e in node.entries] == [False, False, True]
    cache.check_invariants()


def test_a_block_only_hbm_holds_is_still_demoted_into_exclusive_dram():
    cache, transfers = exclusive_dram_over_inclusive_disk()
    a = seq(0, 20)
    serve(cache, a, 1.0)
    serve(cache, seq(1000, 20), 2.0)
    node = cache.match(a, 2.0, touch=False).node
    assert [e is not None for e in node.entries] == [False, True, False]
    assert ("hbm", "dram", 20) in transfers


def test_a_block_prefetched_into_exclusive_dram_keeps_one_copy_once_the_prefetch_ends():
    """Staging from the inclusive disk copies into the exclusive DRAM tier; the two copies may
    coexist only while the prefetch pins the staged one, which goes with the pin."""
    cache, transfers = exclusive_dram_over_inclusive_disk(hbm=40)
    a = seq(0, 20)
    serve(cache, a, 1.0)
    node = cache.match(a, 1.0, touch=False).node
    cache.swap_out_path(node, 1.0)                    # a -> DRAM
    cache.evict(20, 2.0, "capacity", tier=1)          # a -> disk, its only copy
    assert [e is not None for e in node.entries] == [False, False, True]
    pin = cache.begin_prefetch(node)
    assert cache.next_to_stage(pin) == (node, 2)
    before = len(transfers)
    assert cache.stage_prefetched(pin, node, 20, 3.0) == 20
    assert transfers[before:] == [], "the prefetcher moved the bytes: staging reports no copy down"
    assert [e is not None for e in node.entries] == [False, True, True]
    cache.check_invariants()                          # the staged copy is pinned: allowed
    cache.end_prefetch(pin)
    assert sum(e is not None for e in node.entries) == 1
    cache.check_invariants()


def test_a_recomputed_run_that_hbm_splits_as_it_enters_keeps_no_exclusive_copy():
    """Regression (found by the invariant-space property test): a request recomputes a run that
    only the exclusive disk tier held, and 2Q's ghost hits on part of it split the run as it
    enters HBM; the split's upper part kept its disk copy beside HBM ("resident in an exclusive
    tier and another tier"). The commit now frees exclusive copies along the whole path."""
    lognormal = lambda median, sigma, **extra: {"dist": "lognormal", "median": median, "sigma": sigma, **extra}
    data = {
        "name": "exclusive-split", "seed": 3720, "duration_s": 12,
        "hardware": {"profile": "gb300_nvl72", "gpus_per_instance": 4, "instances": 1, "kv_capacity_bytes": "0.3GB"},
        "model": {"profile": "deepseek_v3"},
        "cache": {"block_tokens": 64, "eviction": "twoq",
                  "tiers": {"dram": {"capacity_bytes": "0.3GB", "eviction": "s3fifo", "inclusive": False,
                                     "write_policy": "write_back"},
                            "disk": {"capacity_bytes": "1GB", "eviction": "lru", "inclusive": False},
                            "on_tool_call": "demote", "prefetch": {"policy": "best_effort"}}},
        "serving": {"max_batch_requests": 2, "prefill_chunk_tokens": 4096, "prefill_host_s_per_layer": 0},
        "workload": {"global_system_prompt_tokens": 500, "agent_classes": {"coding": {
            "arrival": {"kind": "population", "concurrent": 1, "ramp_s": 1}, "tools_prefix_tokens": 1000,
            "initial_context_tokens": lognormal(1500, 0.5, round=True),
            "calls_per_session": lognormal(4, 0.5, min=1, round=True),
            "tool_gap_s": lognormal(0.5, 1.0), "human_turn_probability": 0.2,
            "human_gap_s": {"dist": "exponential", "mean": 3},
            "appended_tokens": lognormal(400, 0.8, round=True),
            "output_tokens": lognormal(40, 0.7, min=1, round=True),
            "subagents": {"probability": 0.3, "fanout": 2, "calls": 2}}}},
        "run": {"check_invariants": True}}
    result = run_scenario(scenario_from_dict(data, source="test"))   # raised InvariantViolation before
    assert result.summary["requests"] > 10
