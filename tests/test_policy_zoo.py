"""Policy zoo: hand-made victims, the spec's reductions (section 6) and optimality properties."""

from __future__ import annotations

import numpy as np
import pytest

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.sequential import replay_sequence as replay, serve_request as run_request
from agentsim.cache.policies.admission import ADMISSION_FILTERS
from agentsim.cache.radix import RadixCache


def make(name, capacity, **params):
    policy = EVICTION_POLICIES.get(name)(EVICTION_POLICIES.validate_params(name, params))
    return RadixCache(capacity, policy), policy


def eviction_log(cache):
    """Record (first removed key, blocks, reason) of every removal, in order (the removed
    blocks are the node's last ``blocks``: all of it, or its tail when trimmed in place)."""
    log = []
    original = cache.policy.on_remove

    def on_remove(node, blocks, reason):
        log.append((node.keys[len(node.keys) - blocks], blocks, reason))
        original(node, blocks, reason)

    cache.policy.on_remove = on_remove
    return log


def random_trace(seed, n_requests=60, n_convs=6, max_len=6):
    """Conversations that grow turn by turn under a shared 2-block system prompt."""
    rng = np.random.default_rng(seed)
    histories = {c: [1, 2] for c in range(n_convs)}
    next_key = 1000
    requests = []
    for _ in range(n_requests):
        conv = int(rng.integers(n_convs))
        grow = int(rng.integers(1, max_len))
        hist = histories[conv]
        hist.extend(range(next_key, next_key + grow))
        next_key += grow
        if len(hist) > 14:  # compaction: keep the prompt, drop history
            histories[conv] = hist = [1, 2] + list(range(next_key, next_key + 2))
            next_key += 2
        requests.append(list(hist))
    return requests


def flat_stream(requests):
    """Each block as its own one-block request, deepest first (spec P5 flat export)."""
    return [[k] for req in requests for k in reversed(req)]


# --- hand-made sequences ---------------------------------------------------------------

def test_fifo_evicts_oldest_insert_even_if_hit():
    cache, _ = make("fifo", 3, tree_mode="flat")
    for k in (1, 2, 3, 1):
        run_request(cache, [k], 0.0)
    log = eviction_log(cache)
    run_request(cache, [4], 1.0)
    assert log == [(1, 1, "capacity")]


def test_lru_baseline_evicts_least_recent():
    cache, _ = make("lru", 3)
    for t, k in enumerate((1, 2, 3, 1)):
        run_request(cache, [k], float(t))
    log = eviction_log(cache)
    run_request(cache, [4], 9.0)
    assert log == [(2, 1, "capacity")]


def test_sieve_passes_visited_and_moves_hand():
    cache, _ = make("sieve", 3, tree_mode="flat")
    for k in (1, 2, 3, 1):  # 1 visited
        run_request(cache, [k], 0.0)
    log = eviction_log(cache)
    run_request(cache, [4], 1.0)  # hand: 1 visited -> cleared, evict 2
    run_request(cache, [5], 2.0)  # hand continues at 3 -> evict 3
    assert [k for k, _, _ in log] == [2, 3]


def test_sieve_hand_resumes_at_the_rest_of_a_partly_evicted_run():
    """Per-block SIEVE: after evicting a run's tail, the hand's next stop is the run's rest."""
    for mode in ("leaf_only", "cascade", "flat"):  # cascade splits the run, the others trim it
        cache, _ = make("sieve", 6, tree_mode=mode)
        for keys in ([1, 2, 3, 4], [10], [20]):
            run_request(cache, keys, 0.0)
        log = eviction_log(cache)
        run_request(cache, [30], 1.0)  # one block: the tail of [1, 2, 3, 4]
        run_request(cache, [40], 2.0)  # the hand stays on that run: its new tail, not [10]
        assert [k for k, _, _ in log] == [4, 3], mode


def test_s3fifo_one_hit_wonders_leave_from_small_and_ghost_hits_go_main():
    cache, policy = make("s3fifo", 10, tree_mode="flat", move_to_main_threshold=1)
    for k in range(1, 11):
        run_request(cache, [k], 0.0)
    run_request(cache, [5], 0.0)  # 5 gets freq 1
    log = eviction_log(cache)
    run_request(cache, [11], 1.0)
    evicted = [k for k, _, _ in log]
    assert 5 not in evicted and evicted  # a freq-0 run was evicted, 5 survives
    first = evicted[0]
    assert first in policy.ghost
    run_request(cache, [first], 2.0)  # ghost hit: inserted into main
    node = cache.root.children[first]
    assert node.policy_data.queue is policy.main


def test_slru_protects_rehit_runs():
    cache, policy = make("slru", 4, tree_mode="flat", protected_fraction=0.5)
    for t, k in enumerate((1, 2, 1, 3, 4)):
        run_request(cache, [k], float(t))
    assert cache.root.children[1].policy_data.queue is policy.protected
    log = eviction_log(cache)
    run_request(cache, [5], 9.0)
    assert log[0][0] == 2  # probation LRU, although 1 is older


def test_arc_moves_rehit_to_t2_and_adapts_on_ghost_hit():
    cache, policy = make("arc", 4, tree_mode="flat")
    for t, k in enumerate((1, 2, 1, 3, 4, 5)):
        run_request(cache, [k], float(t))
    assert cache.root.children[1].policy_data.queue is policy.t2
    assert 2 in policy.b1  # the T1 LRU went to the B1 ghost
    run_request(cache, [2], 10.0)  # B1 ghost hit raises p and goes to T2
    assert policy.p >= 1
    assert cache.root.children[2].policy_data.queue is policy.t2


def test_twoq_correlated_hits_do_not_promote_but_ghost_hits_do():
    cache, policy = make("twoq", 4, tree_mode="flat", in_ratio=0.25)
    for t, k in enumerate((1, 1, 2, 3, 4, 5)):
        run_request(cache, [k], float(t))
    assert 1 in policy.a1out  # hit in A1in changed nothing: 1 was reclaimed first
    run_request(cache, [1], 9.0)
    assert cache.root.children[1].policy_data.queue is policy.am


def test_gdsf_prefers_evicting_cheap_shallow_runs_over_deep_ones():
    cache, _ = make("gdsf", 6)
    run_request(cache, [1, 2, 3, 4, 5], 0.0)  # deep conversation, tail block 4 is expensive
    run_request(cache, [9], 1.0)  # a fresh one-block prefix, cheap
    log = eviction_log(cache)
    run_request(cache, [20], 2.0)
    assert log[0][0] == 9  # LRU would take block 5 (older); GDSF takes the cheap one


def test_tlru_evicts_tel_safe_tail_first():
    cache, _ = make("tlru", 8, threshold_blocks=2, next_prompt_blocks=0)
    run_request(cache, [1, 2, 3, 4], 0.0)  # branch A: L=4, budget 2 -> blocks 2,3 TEL-safe
    run_request(cache, [7, 8], 1.0)  # branch B: L=2, budget 0 -> all TEL-safe but newer
    run_request(cache, [30, 31], 2.0)
    log = eviction_log(cache)
    run_request(cache, [40, 41], 3.0)  # needs 2: A's safe tail (3, 4) goes first
    assert log == [(3, 2, "capacity")]
    assert cache.match([1, 2, 3, 4], 4.0, touch=False).hit_blocks == 2


def test_vllm_lru_orders_by_release_not_match():
    cache, policy = make("vllm_lru", 4)
    a = cache.match([1, 2], 0.0)
    cache.pin(a.node)
    cache.reserve(2, 0.0)
    node_a = cache.commit(a.node, [1, 2], 0, 2, 0.0)
    b = cache.match([5, 6], 1.0)
    cache.pin(b.node)
    cache.reserve(2, 1.0)
    node_b = cache.commit(b.node, [5, 6], 0, 2, 1.0)
    cache.unpin(node_b)  # B released first although A was used first
    cache.unpin(node_a)
    log = eviction_log(cache)
    run_request(cache, [9], 2.0)
    assert log[0] == (6, 1, "capacity")  # B's tail block: released first, tail first


def test_flat_mode_counts_orphans_and_never_hits_them():
    cache, _ = make("fifo", 4, tree_mode="flat")
    run_request(cache, [1, 2], 0.0)  # inserted as one run [1, 2]
    run_request(cache, [1, 2, 3, 4], 1.0)  # child run [3, 4]
    run_request(cache, [9], 2.0)  # FIFO head is run [1, 2] (an inner node): evicts its tail
    assert cache.orphan_blocks == 2 and cache.orphaned_blocks_total == 2
    cache.check_invariants()
    assert run_request(cache, [1, 2, 3, 4], 3.0) <= 1  # orphans [3, 4] are not a hit
    cache.check_invariants()


def test_cascade_mode_evicts_subtree_of_queue_head():
    cache, _ = make("fifo", 6, tree_mode="cascade")
    run_request(cache, [1, 2], 0.0)
    run_request(cache, [1, 2, 3, 4], 1.0)
    run_request(cache, [7, 8], 2.0)
    log = eviction_log(cache)
    run_request(cache, [9, 10, 11, 12], 3.0)  # head [1,2] has a child: cascade takes [3,4] then [1,2]
    assert [k for k, _, _ in log] == [3, 1]
    assert cache.orphan_blocks == 0


def test_ttl_expiry_fires_leaf_first_and_refreshes_on_hit():
    cache, policy = make("ttl_expiry", 100, ttl_s=10.0)
    run_request(cache, [1, 2], 0.0)
    run_request(cache, [1, 2, 3], 5.0)
    run_request(cache, [7], 6.0)
    assert policy.next_timer_s() == 15.0  # [1, 2] refreshed at 5 s, so [7] is first... at 16 s?
    policy.on_timer(15.0)  # the path [1,2]-[3] was touched at 5 s: expires at 15 s
    assert cache.match([1, 2, 3], 15.0, touch=False).hit_blocks == 0
    assert cache.match([7], 15.0, touch=False).hit_blocks == 1
    policy.on_timer(16.0)
    assert policy.counters()["ttl_expirations_blocks"] == 4
    assert cache.evicted_by_reason == {"ttl_expiry": 4}
    cache.check_invariants()


def test_ttl_presets_and_param_validation():
    assert EVICTION_POLICIES.get("ttl_5m")().ttl_s == 300.0
    assert EVICTION_POLICIES.get("ttl_1h")().ttl_s == 3600.0
    with pytest.raises(Exception):
        EVICTION_POLICIES.validate_params("ttl_expiry", {"base": "lruu"})
    with pytest.raises(Exception):
        EVICTION_POLICIES.validate_params("s3fifo", {"tree_mode": "sideways"})
    with pytest.raises(Exception):
        EVICTION_POLICIES.validate_params("slru", {"protected_fraction": 1.5})


# --- reductions (section 6): identical eviction logs ------------------------------------

def _log_of(name, capacity, requests, admission=None, **params):
    """Block-level event log: every evicted block (deepest first within a removal) with its
    reason, plus per-request hits. Block level, because LRU merges runs in place (merge_runs)
    so its node boundaries differ from policies that keep runs separate."""
    cache, _ = make(name, capacity, **params)
    if admission:
        cache.admission = ADMISSION_FILTERS.get(admission)()
    blocks = []
    original = cache.policy.on_remove

    def on_remove(node, n, reason):
        blocks.extend((k, reason) for k in reversed(node.keys[-n:]))   # the removed tail
        original(node, n, reason)

    cache.policy.on_remove = on_remove
    stats = replay(cache, requests)
    return blocks, stats.per_request_hits


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("capacity", [12, 25])
@pytest.mark.parametrize("name,params", [
    ("slru", {"promote_hits": None}),
    ("tlru", {"threshold_blocks": 0, "next_prompt_blocks": 0}),
    ("w_tinylfu", {"window_ratio": 1.0}),
    ("ttl_expiry", {"ttl_s": float("inf")}),
    ("lfu", {}),  # only equal where all hit counts tie: checked below on a no-reuse trace
])
def test_reductions_to_lru(seed, capacity, name, params):
    requests = random_trace(seed)
    if name == "lfu":
        requests = [[10 * i + j for j in range(3)] for i in range(30)]  # no reuse: counts all 0
    assert _log_of(name, capacity, requests, **params) == _log_of("lru", capacity, requests)


@pytest.mark.parametrize("base", ["s3fifo", "arc", "sieve"])
def test_ttl_infinite_reproduces_queue_bases(base):
    requests = random_trace(7)
    assert _log_of("ttl_expiry", 15, requests, ttl_s=float("inf"), base=base) == _log_of(base, 15, requests)


@pytest.mark.parametrize("name", ["lru", "s3fifo", "fifo"])
def test_admit_all_reproduces_the_unfiltered_run(name):
    requests = random_trace(3)
    assert _log_of(name, 14, requests, admission="admit_all") == _log_of(name, 14, requests)


def test_second_hit_filter_frees_first_use_at_once():
    cache, _ = make("lru", 50)
    cache.admission = ADMISSION_FILTERS.get("second_hit")()
    run_request(cache, [1, 2, 3], 0.0)
    assert cache.resident_blocks == 0 and cache.evicted_by_reason == {"admission": 3}
    run_request(cache, [1, 2, 3], 1.0)
    assert cache.resident_blocks == 3
    cache.check_invariants()


def test_second_hit_keeps_a_growing_session_on_its_next_call():
    """A session's calls grow: each brings the previous run back plus new blocks. Keyed on the
    run's first block, the second release is kept and the third call hits; keyed on the deepest
    block (new every call) nothing would ever be kept."""
    cache, _ = make("lru", 50)
    cache.admission = ADMISSION_FILTERS.get("second_hit")()
    assert run_request(cache, [1, 2, 3], 0.0) == 0
    assert cache.resident_blocks == 0
    assert run_request(cache, [1, 2, 3, 4, 5], 1.0) == 0  # recomputed, now kept
    assert cache.resident_blocks == 5
    assert run_request(cache, [1, 2, 3, 4, 5, 6, 7], 2.0) == 5
    cache.check_invariants()


def test_gdsf_unit_cost_is_lfu_with_dynamic_aging():
    """Reference LFU-DA on a flat stream: K = L + freq, L = K of the last victim."""
    rng = np.random.default_rng(5)
    stream = [int(k) for k in rng.zipf(1.3, 400) % 40]
    cap = 8
    cache, _ = make("gdsf", cap, cost_model="unit")
    ours = [run_request(cache, [k], float(t)) for t, k in enumerate(stream)]
    resident, inflation, ref = {}, 0.0, []
    for t, k in enumerate(stream):
        if k in resident:
            freq, _, _ = resident[k]
            resident[k] = (freq + 1, inflation + freq + 1, t)
            ref.append(1)
            continue
        ref.append(0)
        if len(resident) >= cap:
            victim = min(resident, key=lambda x: (resident[x][1], resident[x][2]))
            inflation = max(inflation, resident.pop(victim)[1])
        resident[k] = (1, inflation + 1, t)
    assert ours == ref


# --- optimality and monotonicity (P1, P2) -----------------------------------------------

def _belady_stats(requests, capacity):
    cache, _policy = make("belady", capacity)
    return replay(cache, requests)  # the loop gives Belady its future and begin_request(i)


ONLINE = [n for n in EVICTION_POLICIES.names() if n != "belady"]


def test_belady_next_use_index_is_the_same_for_every_key_layout():
    """The future index answers alike for arbitrary keys and for dense keys 0..n-1 (the fast
    path that builds no key -> slot dict), given as lists or as int64 arrays."""
    from array import array

    from agentsim.cache.policies.belady import NEVER, Belady

    rng = np.random.default_rng(3)
    dense = [rng.permutation(12)[: int(rng.integers(0, 8))].tolist() for _ in range(30)]
    dense.append(list(range(12)))  # every key 0..11 used
    layouts = {
        "list": (dense, 0),
        "dense array": ([array("q", r) for r in dense], 0),
        "sparse array": ([array("q", [k * 7 + 5 for k in r]) for r in dense], 5),
    }
    answers = {}
    for name, (requests, offset) in layouts.items():
        policy = Belady()
        policy.set_future(requests)
        assert (policy._slot is None) == (name != "sparse array")
        got = []
        for position in range(-1, len(dense) + 1):
            policy.begin_request(position)
            got.append([policy.next_use(k * 7 + 5 if offset else k) for k in range(-1, 13)])
        answers[name] = got
    assert answers["list"] == answers["dense array"] == answers["sparse array"]
    assert NEVER in answers["list"][0]  # keys -1 and 12 are never used


@pytest.mark.parametrize("seed", range(6))
def test_belady_dominates_every_online_policy(seed):
    requests = random_trace(seed, n_requests=80)
    for capacity in (16, 24, 40):
        best = _belady_stats(requests, capacity).hit_blocks
        for name in ONLINE:
            cache, _ = make(name, capacity)
            online = replay(cache, requests).hit_blocks
            assert best >= online, (name, capacity, best, online)


@pytest.mark.parametrize("seed", range(4))
def test_stack_property_lru_and_belady(seed):
    requests = random_trace(seed, n_requests=80)
    previous = {"lru": None, "belady": None}
    for capacity in range(14, 60, 3):
        cache, _ = make("lru", capacity)
        lru = replay(cache, requests).per_request_hits
        opt = _belady_stats(requests, capacity).per_request_hits
        for name, hits in (("lru", lru), ("belady", opt)):
            if previous[name] is not None:
                assert all(a <= b for a, b in zip(previous[name], hits)), (name, capacity)
            previous[name] = hits


def test_gdsf_prices_a_run_with_a_lower_tier_copy_by_its_load_time():
    from types import SimpleNamespace

    from agentsim.cache.policies.gdsf import GDSF

    policy = GDSF(GDSF.Params())
    dram = SimpleNamespace(index=1)
    hbm = SimpleNamespace(index=0)
    alone = SimpleNamespace(end_block=200, tier=hbm, node=SimpleNamespace(entries=["hbm", None]))
    copied = SimpleNamespace(end_block=200, tier=hbm, node=SimpleNamespace(entries=["hbm", "dram"]))
    bottom = SimpleNamespace(end_block=200, tier=dram, node=SimpleNamespace(entries=["hbm", "dram"]))
    recompute = policy.cost(alone)
    assert policy.cost(copied) < recompute                 # loading back beats recomputing 12K deep
    assert policy.cost(bottom) == recompute                # nothing below DRAM: recompute
    p = policy.params
    load_flops = p.block_tokens * p.kv_bytes_per_token / p.load_bandwidth_bytes_per_s * p.prefill_flops_per_s
    assert policy.cost(copied) == pytest.approx(load_flops / policy._raw_cost(0))
    assert GDSF(GDSF.Params(tier_aware=False)).cost(copied) == recompute
