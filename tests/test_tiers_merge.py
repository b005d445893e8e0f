"""Tiered cache: adjacent runs with equal residency merge back into one node, so a session that
is demoted and loaded back between calls keeps a short path (and its per-request cost flat)."""

from __future__ import annotations

import pytest

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.tiers import merges_exactly

from tests.test_tiers import make, seq, serve


def _session_with_demotions(merge: bool, calls: int = 12):
    """One session's calls, each followed by another session that pushes it out of HBM."""
    cache, _ = make(hbm=120, dram=5000)
    cache.merge_runs = merge and cache.merge_runs
    ctx = seq(0, 20)
    served = []
    t = 0.0
    for call in range(calls):
        served.append(serve(cache, ctx, t))
        t += 1.0
        served.append(serve(cache, seq(100_000 + 1000 * call, 120), t))   # fills HBM
        t += 1.0
        ctx = ctx + seq(1000 + 10 * call, 5)
    depth = len(cache.path(cache.match(ctx[:-5], t, touch=False).node))
    return cache, served, depth


def test_a_session_demoted_between_calls_keeps_one_node():
    cache, _, depth = _session_with_demotions(merge=True)
    assert depth == 1
    assert cache.merged_nodes >= 10
    cache.check_invariants()
    # Without merging the same session gains a node per call.
    _, _, unmerged_depth = _session_with_demotions(merge=False)
    assert unmerged_depth >= 11


def test_merging_changes_no_hit_load_or_demotion():
    merged, served_merged, _ = _session_with_demotions(merge=True)
    plain, served_plain, _ = _session_with_demotions(merge=False)
    assert served_merged == served_plain
    for a, b in zip(merged.tiers, plain.tiers):
        assert (a.used_blocks, a.evicted_blocks, a.inserted_blocks) == (b.used_blocks, b.evicted_blocks, b.inserted_blocks)
    assert merged.loaded_blocks == plain.loaded_blocks and merged.demoted_blocks == plain.demoted_blocks


def test_runs_touched_at_different_times_stay_apart():
    cache, _ = make(hbm=40, dram=500)
    first = seq(0, 10)
    serve(cache, first, 0.0)
    serve(cache, first + seq(100, 10), 1.0)        # the same session: its leaf grows in place
    serve(cache, seq(5000, 40), 2.0)               # demote it all to DRAM
    serve(cache, first, 3.0)                       # loads and re-stamps only the first run
    serve(cache, first + seq(100, 10), 3.5)        # ... then the whole path again
    serve(cache, first, 4.0)                       # the first run alone is newer now
    serve(cache, seq(6000, 40), 5.0)               # demote again: stamps differ, no merge
    node = cache.match(first + seq(100, 10), 6.0, touch=False).node
    path = cache.path(node)
    assert [len(n.keys) for n in path] == [10, 10]
    assert path[0].last_access_s > path[1].last_access_s
    cache.check_invariants()


@pytest.mark.parametrize("name", sorted(EVICTION_POLICIES.names()))
def test_only_policies_for_which_merging_is_exact_merge(name):
    policy = EVICTION_POLICIES.get(name)()
    expected = name == "lru"   # a key equal along a run (merge_runs), no per-node state of its own
    assert merges_exactly(policy) is expected
    if name != "vllm_lru":   # flat tree mode: refused in a tiered cache
        cache, _ = make(policy=name)
        assert cache.merge_runs is expected
