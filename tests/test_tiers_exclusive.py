"""An exclusive tier between HBM and an inclusive tier below it: a block keeps one copy in
the exclusive tier or none (docs/hierarchy.md: "no block is resident in two tiers"), whichever
way it leaves HBM. Regression for an HBM victim loaded from the inclusive disk (which kept its
copy) being demoted into the exclusive DRAM tier as well."""

from __future__ import annotations

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.tiers import TieredCache, TierSpec
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
