"""Hypothesis invariants across every registered policy and tree mode (spec section 6, I1-I4).

A random driver interleaves overlapping requests (pins held across steps), releases, TTL
timers and admission filters; after every step the cache's own check_invariants() must hold,
capacity is never exceeded, no pinned node is ever freed, and hit + missed = requested.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.policies.admission import ADMISSION_FILTERS
from agentsim.cache.radix import RadixCache

QUEUE_POLICIES = ["fifo", "slru", "twoq", "arc", "s3fifo", "sieve", "w_tinylfu", "vllm_lru"]
CONFIGS = [(name, {}) for name in EVICTION_POLICIES.names()]
CONFIGS += [(name, {"tree_mode": mode}) for name in QUEUE_POLICIES for mode in ("leaf_only", "cascade", "flat")]
CONFIGS += [("ttl_expiry", {"ttl_s": 3.0, "base": "s3fifo"}), ("tlru", {"threshold_blocks": 2, "next_prompt_blocks": 1}),
            ("ttl_expiry", {"ttl_s": 2.0, "refresh_on_hit": False})]

# A request: (conversation, extra blocks, hold steps); keys are derived so conversations share a prefix.
request_st = st.tuples(st.integers(0, 4), st.integers(1, 5), st.integers(0, 3))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=st.sampled_from(CONFIGS), steps=st.lists(request_st, min_size=5, max_size=40),
       capacity=st.integers(8, 30), admission=st.sampled_from([None, "admit_all", "second_hit", "tinylfu", "no_prefix_cache"]))
def test_invariants_hold_for_every_policy(config, steps, capacity, admission):
    name, params = config
    policy = EVICTION_POLICIES.get(name)(EVICTION_POLICIES.validate_params(name, params))
    cache = RadixCache(capacity, policy)
    if admission:
        cache.admission = ADMISSION_FILTERS.get(admission)()
    if name == "belady":
        policy.set_future([])
    histories = {c: [1, 2] for c in range(5)}
    next_key = [100]
    in_flight = []  # (release at step, node)
    requested = hit = missed = 0
    for step, (conv, grow, hold) in enumerate(steps):
        now = float(step)
        policy.on_timer(now)
        for item in [x for x in in_flight if x[0] <= step]:
            in_flight.remove(item)
            cache.unpin(item[1])
        hist = histories[conv]
        if len(hist) + grow > 12:
            hist[:] = [1, 2]
        hist.extend(range(next_key[0], next_key[0] + grow))
        next_key[0] += grow
        keys = list(hist)
        match = cache.match(keys, now)
        cache.pin(match.node)
        need = len(keys) - match.hit_blocks
        pinned = [n for n in _path(match.node)]
        requested += len(keys)
        node = match.node
        if need == 0:
            hit += len(keys)
        elif cache.reserve(need, now):
            node = cache.commit(match.node, keys[match.hit_blocks:], match.hit_blocks, need, now)
            hit += match.hit_blocks
            missed += need
        else:  # no room even after evicting every unpinned block: the request is refused
            missed += len(keys)
        for n in pinned:
            assert n.alive, f"{name}: pinned node freed"
        in_flight.append((step + hold, node))
        cache.check_invariants()
        assert cache.used_blocks <= cache.capacity_blocks
        assert hit + missed == requested
    for _, node in in_flight:
        cache.unpin(node)
    cache.check_invariants()
    # everything unpinned: the policy must be able to empty the cache
    assert cache.evict(cache.used_blocks - cache.reserved_blocks, 1e9) or cache.used_blocks == 0
    cache.check_invariants()
    assert cache.used_blocks == 0


def _path(node):
    while node.parent is not None:
        yield node
        node = node.parent
