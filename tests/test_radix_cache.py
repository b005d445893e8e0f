"""Radix cache and LRU unit tests: hand-made access sequences, expected victims, no SimPy."""

import pytest

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.radix import RadixCache
from agentsim.errors import InvariantViolation


def make(capacity=10, policy="lru"):
    return RadixCache(capacity, EVICTION_POLICIES.get(policy)())


def serve(cache, keys, now, extra_blocks=0):
    """One request: match, pin, reserve, commit all of ``keys``, unpin. Returns hit blocks or None."""
    match = cache.match(keys, now)
    cache.pin(match.node)
    need = len(keys) - match.hit_blocks + extra_blocks
    if not cache.reserve(need, now):
        cache.unpin(match.node)
        return None
    node = cache.commit(match.node, keys[match.hit_blocks:], match.hit_blocks, need, now)
    cache.unpin(node)
    cache.check_invariants()
    return match.hit_blocks


def resident_keys(cache):
    keys = set()
    for node in cache.iter_nodes():
        keys.update(node.keys)
    return keys


def test_prefix_hits_are_contiguous():
    cache = make(100)
    assert serve(cache, [1, 2, 3, 4], 0.0) == 0
    assert serve(cache, [1, 2, 3, 4, 5], 1.0) == 4
    assert serve(cache, [1, 2, 9, 4], 2.0) == 2      # the divergence stops the hit
    assert serve(cache, [7, 2, 3], 3.0) == 0         # same later blocks, other prefix: no hit
    assert cache.used_blocks == 5 + 2 + 3


def test_lru_evicts_least_recent_leaf_tail_first():
    cache = make(6)
    serve(cache, [1, 2, 3], 0.0)       # A
    serve(cache, [4, 5], 1.0)          # B
    serve(cache, [1, 2], 2.0)          # touches A's first two blocks only (path-touch of [1,2])
    # A's tail block 3 is older (t=0) than B (t=1): it goes first, then B.
    serve(cache, [6, 7, 8], 3.0)       # needs 2 more blocks than free (1 free)
    assert resident_keys(cache) == {1, 2, 5, 4, 6, 7, 8} - {5}
    assert cache.evicted_blocks == 2


def test_eviction_trims_a_run_from_its_tail():
    cache = make(8)
    serve(cache, list(range(1, 9)), 0.0)     # one run of 8 blocks fills the cache
    serve(cache, [100, 101, 102], 1.0)        # needs 3: the run's 3 deepest blocks go
    assert resident_keys(cache) == {1, 2, 3, 4, 5, 100, 101, 102}
    assert serve(cache, list(range(1, 9)), 2.0) is not None


def test_pinned_prefix_is_never_evicted_for_its_own_allocation():
    cache = make(5)
    serve(cache, [1, 2, 3], 0.0)
    match = cache.match([1, 2, 3, 4, 5, 6], 1.0)
    cache.pin(match.node)
    # 3 new blocks needed, 2 free, the only evictable blocks are the pinned prefix: must fail.
    assert cache.reserve(3, 1.0) is False
    assert resident_keys(cache) == {1, 2, 3}
    cache.unpin(match.node)
    cache.check_invariants()


def test_reserve_fails_rather_than_exceeding_capacity():
    cache = make(4)
    match = cache.match([1, 2, 3], 0.0)
    cache.pin(match.node)
    assert cache.reserve(3, 0.0)
    cache.match([9, 9], 0.0)
    assert cache.reserve(2, 0.0) is False        # 3 reserved + 2 > 4, nothing evictable
    assert cache.used_blocks == 3
    cache.check_invariants()


def test_concurrent_identical_commits_share_blocks():
    cache = make(20)
    keys = [1, 2, 3, 4]
    a = cache.match(keys, 0.0)
    cache.pin(a.node)
    assert cache.reserve(4, 0.0)
    b = cache.match(keys, 0.0)
    cache.pin(b.node)
    assert cache.reserve(4, 0.0)
    na = cache.commit(a.node, keys, 0, 4, 1.0)
    nb = cache.commit(b.node, keys, 0, 4, 1.0)
    assert cache.used_blocks == 4                 # the duplicate reservation was returned
    cache.unpin(na)
    cache.unpin(nb)
    cache.check_invariants()


def test_split_keeps_pins_on_both_halves():
    cache = make(20)
    m = cache.match([1, 2, 3, 4], 0.0)
    cache.pin(m.node)
    cache.reserve(4, 0.0)
    node = cache.commit(m.node, [1, 2, 3, 4], 0, 4, 0.0)      # pinned run [1,2,3,4]
    hit = cache.match([1, 2, 9], 1.0)                            # splits the pinned run at 2
    assert hit.hit_blocks == 2 and hit.node.lock_ref == 1 and node.lock_ref == 1
    assert cache.evict(1, 2.0) is False                          # everything is pinned
    cache.unpin(node)
    assert cache.evict(2, 3.0) is True
    assert resident_keys(cache) == {1, 2}
    cache.check_invariants()


def test_pinned_blocks_is_counted_through_pins_splits_commits_and_unpins():
    """``pinned_blocks`` is a count kept by pin, unpin and commit (engine-style admission asks
    every scheduling pass); check_invariants compares it with a walk of the pinned subtree."""
    cache = make(20)
    m = cache.match([1, 2, 3, 4], 0.0)
    cache.pin(m.node)
    cache.reserve(4, 0.0)
    assert cache.pinned_blocks() == 4                            # the reservation
    first = cache.commit(m.node, [1, 2, 3, 4], 0, 4, 0.0)        # pinned run [1,2,3,4]
    assert cache.pinned_blocks() == 4
    other = cache.match([1, 2, 9], 1.0)                          # splits the pinned run at 2
    cache.pin(other.node)                                        # [1,2] now pinned twice
    cache.reserve(1, 1.0)
    second = cache.commit(other.node, [9], 2, 1, 1.0)            # new pinned leaf [9]
    assert cache.pinned_blocks() == 5
    cache.check_invariants()
    cache.unpin(first)                                           # [3,4] unpinned; [1,2] still held
    assert cache.pinned_blocks() == 3
    cache.check_invariants()
    third = cache.match([1, 2, 3, 4], 2.0)                       # a hit on the unpinned [3,4]
    cache.pin(third.node)
    assert cache.pinned_blocks() == 5
    cache.unpin(third.node)
    cache.unpin(second)
    assert cache.pinned_blocks() == 0
    cache.check_invariants()
    cache.pinned_node_blocks += 1                                # a count gone wrong is caught
    with pytest.raises(InvariantViolation, match="pinned nodes hold 0 blocks, counted 1"):
        cache.check_invariants()


def test_lru_ties_go_deepest_first():
    cache = make(6)
    serve(cache, [1, 2, 3], 0.0)
    serve(cache, [1, 4, 5], 0.0)        # same timestamp; [4,5] and [2,3] are leaves at equal depth
    serve(cache, [1, 4, 5, 6], 0.0)     # now [6] is the deepest leaf at t=0
    assert cache.evict(1, 1.0)
    assert 6 not in resident_keys(cache)


def test_unpin_below_zero_is_an_invariant_violation():
    cache = make(4)
    serve(cache, [1, 2], 0.0)
    node = cache.match([1, 2], 1.0).node
    with pytest.raises(InvariantViolation):
        cache.unpin(node)


def test_hit_count_and_path_touch():
    cache = make(10)
    serve(cache, [1, 2, 3], 0.0)
    serve(cache, [1, 2, 3, 4], 5.0)
    node = cache.match([1, 2, 3], 7.0).node
    assert node.last_access_s == 7.0
    assert node.hit_count == 2


def test_invalidate_drops_only_the_unshared_tail_past_the_offset():
    cache = make(50)
    serve(cache, [1, 2, 3, 4, 5, 6], 0.0)          # a session's history
    serve(cache, [1, 2, 3, 4, 70, 71], 1.0)        # a sub-agent branching at block 4
    freed = cache.invalidate([1, 2, 3, 4, 5, 6], from_block=2)
    # Blocks 5, 6 are private and go; 3, 4 are shared with the branch and stay.
    assert freed == 2
    assert resident_keys(cache) == {1, 2, 3, 4, 70, 71}
    assert cache.evicted_by_reason["mutation"] == 2
    cache.check_invariants()
    freed = cache.invalidate([1, 2, 3, 4, 70, 71], from_block=3)
    assert freed == 3 and resident_keys(cache) == {1, 2, 3}
    cache.check_invariants()


# --- RadixCache.serve (the cache-only replay's fused request) ------------------------------

def _serve_trace(seed, n_requests=120, n_convs=7, max_turn=6):
    """Conversations growing turn by turn under shared prefixes, with forks and long requests."""
    import random

    rng = random.Random(seed)
    histories = {c: [1, 2, 3][: 1 + c % 3] for c in range(n_convs)}
    next_key = 100
    requests = []
    for _ in range(n_requests):
        conv = rng.randrange(n_convs)
        if rng.random() < 0.1:  # fork: a new conversation from part of another's history
            histories[conv] = list(histories[rng.randrange(n_convs)][: rng.randint(0, 6)])
        turn = list(range(next_key, next_key + rng.randint(1, max_turn)))
        next_key += len(turn)
        histories[conv] = histories[conv] + turn
        requests.append(list(histories[conv]))
    return requests


def _steps_request(cache, keys, keep, now):
    """The step-by-step flow serve() fuses: match, then pin/reserve/commit/unpin if blocks miss."""
    node, hit = cache.match(keys, now)
    fresh = keep - hit
    if fresh > 0:
        cache.pin(node)
        assert cache.reserve(fresh, now)
        cache.unpin(cache.commit(node, keys[hit:keep], hit, fresh, now))
    return hit


@pytest.mark.parametrize("name", sorted(EVICTION_POLICIES.names()))
def test_serve_is_the_step_by_step_request_exactly(name):
    """Same hits, evictions, tree and policy state (describe, counters) as the separate steps."""
    for seed in range(3):
        requests = _serve_trace(seed)
        for capacity in (5, 12, 40):
            states = []
            for fused in (False, True):
                policy = EVICTION_POLICIES.get(name)(EVICTION_POLICIES.validate_params(name, {}))
                cache = RadixCache(capacity, policy)
                if hasattr(policy, "set_future"):
                    policy.set_future(requests)
                hits = []
                for i, keys in enumerate(requests):
                    if hasattr(policy, "begin_request"):
                        policy.begin_request(i)
                    keep = min(len(keys), capacity)
                    hits.append(cache.serve(keys, keep, float(i)) if fused
                                else _steps_request(cache, keys, keep, float(i)))
                    cache.check_invariants()
                tree = sorted((n.start_block, tuple(n.keys), n.lock_ref, n.last_access_s, n.hit_count)
                              for n in cache.iter_nodes())
                states.append((hits, cache.evicted_blocks, cache.inserted_blocks, tree,
                               repr(policy.describe()), repr(policy.counters())))
            assert states[0] == states[1], (name, seed, capacity)


class _NoCompactionLRU(EVICTION_POLICIES.get("lru")):
    COMPACT_MIN_ITEMS = 10**12   # never compacts: the reference order


class _OftenCompactedLRU(EVICTION_POLICIES.get("lru")):
    COMPACT_MIN_ITEMS = 64       # compacts many times in a short stream


def _mixed_stream(n_requests=3000):
    import random

    rng = random.Random(7)
    sessions = [[s * 10_000 + j for j in range(1, 6)] for s in range(40)]
    stream = []
    for i in range(n_requests):
        keys = sessions[rng.randrange(len(sessions))]
        keys.extend(keys[-1] + 1 + j for j in range(rng.randrange(1, 4)))
        stream.append((list(keys), float(i)))
    return stream


@pytest.mark.parametrize("capacity", [200, 10**6])
def test_a_lazy_heap_is_compacted_and_victims_come_out_in_the_same_order(capacity):
    reference = RadixCache(capacity, _NoCompactionLRU())
    compacted = RadixCache(capacity, _OftenCompactedLRU())
    for keys, now in _mixed_stream():
        assert compacted.serve(keys, min(len(keys), capacity), now) == reference.serve(keys, min(len(keys), capacity), now)
    assert resident_keys(compacted) == resident_keys(reference)
    assert compacted.evicted_blocks == reference.evicted_blocks
    live_nodes = sum(1 for _ in compacted.iter_nodes())
    if capacity < 10**6:
        assert compacted.evicted_blocks > 1000   # the order of many victims was compared
        return
    # Without evictions the heap keeps an item per access; compacted, about the live nodes.
    assert len(reference.policy._heap) > 10 * max(compacted.policy.COMPACT_MIN_ITEMS, 2 * live_nodes)
    assert len(compacted.policy._heap) <= max(compacted.policy.COMPACT_MIN_ITEMS, 2 * live_nodes) + 1


def test_node_granular_eviction_frees_the_victims_whole_node():
    """``cache.eviction_granularity: node`` (SGLang's radix eviction): the same victim as block
    granularity, but all of its node goes, even when one block was wanted."""
    by_block, by_node = make(8), make(8)
    by_node.whole_node_eviction = True
    for cache in (by_block, by_node):
        serve(cache, list(range(1, 6)), 0.0)        # a run of 5 blocks (the LRU leaf)
        serve(cache, [50, 51], 1.0)
        serve(cache, [100, 101], 2.0)              # needs 1 block more than free
    assert resident_keys(by_block) == {1, 2, 3, 4, 50, 51, 100, 101}
    assert by_block.evicted_blocks == 1
    assert resident_keys(by_node) == {50, 51, 100, 101}
    assert by_node.evicted_blocks == 5 and by_node.used_blocks == 4
