"""Routers: choices on hand-built cluster states, the KV indexer's overlap against a per-block
definition, KV events reaching the router's view after their delay, and the retired name."""

from __future__ import annotations

import math
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import simpy

from agentsim.cache.policies.lru import LRU
from agentsim.cache.radix import RadixCache
from agentsim.cluster.kv_events import KvEventChannel
from agentsim.cluster.routers import ROUTERS, StickySessions
from agentsim.cluster.routers.cache_aware import CacheAware, CacheAwareParams
from agentsim.cluster.routers.kv_aware import KvAware, KvAwareParams
from agentsim.cluster.routers.kv_indexer import KvIndexer
from agentsim.cluster.routers.least_loaded import LeastLoaded
from agentsim.cluster.routers.round_robin import RoundRobin
from agentsim.cluster.routers.session_affinity import SessionAffinity, SessionAffinityParams

BLOCK_TOKENS = 64
NAN = float("nan")
ROOT = Path(__file__).resolve().parents[1]


class FakeInstance:
    """What a router may touch on an instance: its id, block size, batch cap, and submit()."""

    def __init__(self, instance_id: int, max_batch: int = 64):
        self.instance_id = instance_id
        self.block_tokens = BLOCK_TOKENS
        self.max_batch = max_batch
        self.received: list = []

    def submit(self, request) -> None:
        request.instance = self.instance_id
        self.received.append(request)

    @property
    def cache(self):  # a router must never read the cache
        raise AssertionError("router read the instance's cache")


_ids = iter(range(10**9))


def request(keys, session_id=0, prompt_tokens=None, arrival_s=0.0):
    keys = list(keys)
    tokens = prompt_tokens if prompt_tokens is not None else len(keys) * BLOCK_TOKENS + 10
    return SimpleNamespace(request_id=next(_ids), session_id=session_id, prompt_keys=keys, prompt_tokens=tokens,
                           arrival_s=arrival_s, instance=-1, first_token_s=NAN, finish_s=NAN)


def cluster(n, **kwargs):
    return [FakeInstance(i, **kwargs) for i in range(n)]


def finish(router, req, now_s=1.0):
    req.first_token_s = req.finish_s = now_s
    router.on_finish(req)


# --- the KV indexer ----------------------------------------------------------------------------
def per_block_overlap(view: dict[int, set[int]], keys) -> dict[int, int]:
    """The definition: per worker, how many leading blocks it holds (walked block by block)."""
    out = {}
    for w, held in view.items():
        k = 0
        while k < len(keys) and keys[k] in held:
            k += 1
        if k:
            out[w] = k
    return out


def test_indexer_overlap_equals_the_per_block_walk_on_prefix_closed_views():
    rng = random.Random(7)
    for _ in range(400):
        n_workers = rng.randint(1, 9)
        keys = list(range(1000, 1000 + rng.randint(1, 300)))
        indexer, view = KvIndexer(), {}
        for w in range(n_workers):
            held = keys[:rng.choice([0, len(keys), rng.randint(0, len(keys))])]
            if rng.random() < 0.3:  # blocks of other prompts too
                held = held + [rng.randint(10**6, 2 * 10**6) for _ in range(5)]
            if held:
                indexer.apply_stored(w, held)
            view[w] = set(held)
        assert indexer.overlap_blocks(keys) == per_block_overlap(view, keys)


@pytest.mark.parametrize("n_workers", [None, 150, 72])
def test_indexer_with_more_workers_than_a_mask_word_matches_the_walk(n_workers):
    """Four racks are 72 workers: their masks span two words (64 + 8 bits when sized)."""
    rng = random.Random(11)
    keys = list(range(5, 305))
    indexer, view = KvIndexer(n_workers), {}
    for w in rng.sample(range(n_workers or 150), 40):
        held = keys[:rng.randint(1, len(keys))]
        indexer.apply_stored(w, held)
        view[w] = set(held)
    for w in list(view)[:10]:                   # some workers lose their tail again
        cut = rng.randint(0, len(keys))
        indexer.apply_removed(w, keys[cut:])
        view[w] = {k for k in view[w] if k < keys[cut]} if cut < len(keys) else view[w]
    assert indexer.overlap_blocks(keys) == per_block_overlap({w: v for w, v in view.items() if v}, keys)
    assert indexer.holders(keys[0]) == sum(1 << w for w, v in view.items() if keys[0] in v)


def test_an_indexer_holds_a_byte_a_key_and_rejects_unknown_workers():
    for n_workers in (18, 72, None):             # one rack, four racks, any: the same byte a key
        indexer = KvIndexer(n_workers)
        indexer.apply_stored(0, list(range(100_000)))
        indexer.apply_stored(1, list(range(3_000)))   # a shared prefix
        assert indexer._ids.values.typecode == "B" and len(indexer._ids.values) < 130_000
        assert indexer.overlap_blocks(list(range(5_000))) == {0: 5_000, 1: 3_000}
    indexer = KvIndexer(18)
    indexer.apply_stored(17, [1, 2])
    assert indexer.overlap_blocks([1, 2, 3]) == {17: 2} and indexer.holders(2) == 1 << 17
    with pytest.raises(ValueError, match="worker 18"):
        indexer.apply_stored(18, [1])
    with pytest.raises(ValueError, match="worker -1"):
        KvIndexer().apply_stored(-1, [1])


@pytest.mark.parametrize("largest", [None, {"B": 15, "H": 40, "I": 2**32 - 1}])
def test_indexer_reuses_and_widens_holder_set_ids_under_churn(monkeypatch, largest):
    """More distinct holder sets than a byte of ids, coming and going: the ids no key holds are
    reclaimed, the map widens when too few come free, and every answer stays the reference's.
    With small id limits the map reaches four bytes, where the table is still reclaimed."""
    from agentsim.cluster.routers import kv_indexer

    if largest is not None:
        monkeypatch.setattr(kv_indexer, "_LARGEST_ID", largest)
    monkeypatch.setattr(kv_indexer, "_COUNT_CHUNK", 64)   # a reclaim counts the map in several chunks
    rng = random.Random(3)
    indexer = KvIndexer(150)
    held: dict[int, set[int]] = {}            # reference: key -> workers
    keys = list(range(40_000, 40_600))
    most_sets = 0
    for step in range(3_000):
        worker = rng.randrange(150)
        lo = rng.randrange(len(keys))
        run = keys[lo:lo + rng.randint(1, 40)] + [rng.randrange(10**9, 2 * 10**9)]  # and a far key
        if rng.random() < 0.55:
            indexer.apply_stored(worker, run)
            for key in run:
                held.setdefault(key, set()).add(worker)
        else:
            indexer.apply_removed(worker, run)
            for key in run:
                held.get(key, set()).discard(worker)
        most_sets = max(most_sets, len({frozenset(v) for v in held.values() if v}))
        if step % 100 == 0 or step == 2_999:
            for key in keys + [k for k in held if k >= 10**9]:
                assert indexer.holders(key) == sum(1 << w for w in held.get(key, ())), key
            assert len(indexer) == sum(1 for v in held.values() if v)
    widest = "H" if largest is None else "I"
    assert indexer.reclaims >= 2 and indexer._ids.values.typecode == widest   # reclaimed, then widened
    if largest is not None:                  # four bytes: the table stays bounded by the sets alive
        assert len(indexer._masks) <= 3 * most_sets
    indexer._reclaim()                            # afterwards only the sets some key has keep an id
    assert set(indexer._id_of) - {0} == {indexer.holders(key) for key in held} - {0}
    assert all(indexer.holders(key) == sum(1 << w for w in held.get(key, ())) for key in keys)


def test_indexer_removal_clears_only_that_worker():
    indexer = KvIndexer()
    indexer.apply_stored(0, [1, 2, 3])
    indexer.apply_stored(2, [1, 2])
    indexer.apply_removed(0, [3])
    indexer.apply_removed(0, [99])  # never held: ignored
    assert indexer.overlap_blocks([1, 2, 3]) == {0: 2, 2: 2}
    indexer.apply_removed(2, [1, 2])
    assert indexer.overlap_blocks([1, 2, 3]) == {0: 2}
    assert indexer.holders(1) == 0b1 and len(indexer) == 2


def test_indexer_lookups_are_logarithmic_in_the_prompt():
    indexer = KvIndexer()
    keys = list(range(2000))
    indexer.apply_stored(0, keys)          # the whole history on worker 0
    indexer.apply_stored(1, keys[:200])    # the shared prefix on worker 1
    lookups = []

    class Counting(list):
        """The prompt's keys, counting the positions read (one per index lookup)."""

        def __getitem__(self, position):
            lookups.append(position)
            return super().__getitem__(position)

    assert indexer.overlap_blocks(Counting(keys)) == {0: 2000, 1: 200}
    assert 0 < len(lookups) <= 2 + 2 * math.ceil(math.log2(len(keys)))


# --- KV events -----------------------------------------------------------------------------------
def test_kv_events_reach_the_view_after_the_delay_and_mirror_the_cache():
    env = simpy.Environment()
    indexer = KvIndexer()
    channel = KvEventChannel(env, indexer, delay_s=0.5)
    cache = RadixCache(8, LRU())
    cache.kv_listener = channel.publisher(3)
    node = cache.match([1, 2, 3], 0.0).node
    cache.pin(node)
    assert cache.reserve(3, 0.0)
    cache.unpin(cache.commit(node, [1, 2, 3], 0, 3, 0.0))
    assert indexer.overlap_blocks([1, 2, 3]) == {}          # published, not delivered yet
    env.run(until=0.49)
    assert indexer.overlap_blocks([1, 2, 3]) == {}
    env.run(until=0.51)
    assert indexer.overlap_blocks([1, 2, 3]) == {3: 3}
    # Filling the cache with another prompt evicts the LRU blocks; the view follows 0.5 s later.
    other = [11, 12, 13, 14, 15, 16, 17]
    node = cache.match(other, 1.0).node
    cache.pin(node)
    assert cache.reserve(7, 1.0)
    cache.unpin(cache.commit(node, other, 0, 7, 1.0))
    env.run(until=1.6)
    held = {key for n in cache.iter_nodes() for key in n.keys}
    assert indexer.overlap_blocks([1, 2, 3]) == per_block_overlap({3: held}, [1, 2, 3])
    assert indexer.overlap_blocks(other) == {3: 7}


def test_kv_events_with_no_delay_apply_at_once():
    env = simpy.Environment()
    indexer = KvIndexer()
    publisher = KvEventChannel(env, indexer, delay_s=0.0).publisher(1)
    publisher.blocks_stored([5, 6])
    assert indexer.overlap_blocks([5, 6]) == {1: 2}
    publisher.blocks_removed([6])
    assert indexer.overlap_blocks([5, 6]) == {1: 1}


# --- kv_aware ----------------------------------------------------------------------------------
def kv_router(n, **params):
    return KvAware(cluster(n), KvAwareParams(**params), np.random.default_rng(0))


def test_kv_aware_prefers_the_worker_holding_the_prefix():
    router = kv_router(3, overlap_score_weight=1.0)
    router.kv_indexer.apply_stored(2, list(range(40)))
    assert router.choose(request(range(50))).instance_id == 2


def test_kv_aware_trades_overlap_against_active_blocks():
    """Worker 1 holds 30 of the 50 blocks but carries 100 active blocks: with weight 1 its cost
    (20 + 100) loses to idle worker 0 (50); with weight 8 it wins (8*20 + 100 < 8*50)."""
    for weight, expected in ((1.0, 0), (8.0, 1)):
        router = kv_router(2, overlap_score_weight=weight)
        router.kv_indexer.apply_stored(1, list(range(30)))
        decoding = request(range(500, 600))
        router.place(decoding, router.instances[1])   # 100 active blocks on 1 ...
        decoding.first_token_s = 0.5                  # ... past its prefill
        router.on_first_token(decoding)
        req = request(range(50), prompt_tokens=50 * BLOCK_TOKENS)
        logits, overlaps = router.costs(req)
        assert overlaps == {1: 30}
        assert logits == [weight * 50, weight * 20 + 100]
        assert router.choose(req).instance_id == expected


def test_kv_aware_counts_queued_prefill_until_the_first_token():
    router = kv_router(2, overlap_score_weight=1.0)
    queued = request(range(100, 110), prompt_tokens=10 * BLOCK_TOKENS)
    router.place(queued, router.instances[0])
    assert router.prefill_tokens == [10 * BLOCK_TOKENS, 0]
    logits, _ = router.costs(request(range(5), prompt_tokens=5 * BLOCK_TOKENS))
    assert logits == [(10 + 5) + 10, 5]       # queued prefill + own prefill + active blocks
    queued.first_token_s = 2.0                 # the first token streamed back
    router.on_first_token(queued)
    logits, _ = router.costs(request(range(5), prompt_tokens=5 * BLOCK_TOKENS))
    assert logits == [5 + 10, 5] and router.prefill_tokens == [0, 0]
    router.on_first_token(queued)              # told twice: retired once
    assert router.prefill_tokens == [0, 0]
    finish(router, queued)
    assert router.active_blocks == [0, 0] and router.in_flight == [0, 0]


def test_kv_aware_over_a_prefill_pool_counts_queued_prefill_and_no_active_blocks():
    """Dynamo's prefill router runs without active-block tracking: a queued prefill costs only
    its tokens still to compute, and a request ending frees nothing it never added."""
    params = KvAware.prefill_pool_params(KvAwareParams(overlap_score_weight=1.0))
    assert not params.track_active_blocks and params.overlap_score_weight == 1.0
    router = KvAware(cluster(2), params, np.random.default_rng(0))
    queued = request(range(100, 110), prompt_tokens=10 * BLOCK_TOKENS)
    router.place(queued, router.instances[0])
    logits, _ = router.costs(request(range(5), prompt_tokens=5 * BLOCK_TOKENS))
    assert logits == [10 + 5, 5] and router.active_blocks == [0, 0]
    finish(router, queued)
    assert router.prefill_tokens == [0, 0] and router.active_blocks == [0, 0] and router.in_flight == [0, 0]
    assert RoundRobin.prefill_pool_params(None) is None      # a router without the term keeps its own


def test_kv_aware_retires_a_rejected_prefill_at_its_end():
    """A request rejected before its first token leaves the prefill load when it ends."""
    router = kv_router(2, overlap_score_weight=1.0)
    rejected = request(range(100, 110), prompt_tokens=10 * BLOCK_TOKENS)
    router.place(rejected, router.instances[1])
    assert router.prefill_tokens == [0, 10 * BLOCK_TOKENS]
    finish(router, rejected)
    assert router.prefill_tokens == [0, 0] and router.active_blocks == [0, 0]


def test_kv_aware_is_told_of_first_tokens_by_its_instances():
    """``make_router`` connects a first-token tracking router to every instance it routes to
    (sticky sessions included). In a run, the prefill load the router sees at every routing is
    the definition's: the prefill tokens of the requests it placed that have neither a first
    token nor an end yet."""
    from agentsim.cluster.routers import make_router
    from agentsim.engine.loading import load_scenario
    from agentsim.engine.simulation import Simulation

    scenario = load_scenario(ROOT / "scenarios" / "coding-agents.yaml",
                             ["hardware.instances=3", "duration_s=120", "serving.router=kv_aware"])
    for sticky in (False, True):
        instances = cluster(2)
        router = make_router(scenario.model_copy(update={"serving": scenario.serving.model_copy(
            update={"sticky_sessions": sticky})}), instances)
        assert all(inst.on_first_token == router.on_first_token for inst in instances)
    sim = Simulation(scenario)
    router = sim.router
    placed: list = []                     # (request, worker, its prefill tokens)
    place, costs = router.place, router.costs
    checked = []

    def placing(request, instance):
        before = list(router.prefill_tokens)
        place(request, instance)
        w = instance.instance_id
        placed.append((request, w, router.prefill_tokens[w] - before[w]))

    def costing(request):
        expected = [0, 0, 0]
        for req, w, tokens in placed:
            if req.first_token_s != req.first_token_s and req.finish_s != req.finish_s:
                expected[w] += tokens
        assert router.prefill_tokens == expected
        checked.append(sum(expected))
        return costs(request)

    router.place, router.costs = placing, costing
    assert sim.run().summary["requests"] > 0
    assert len(checked) > 50 and sum(1 for c in checked if c) > 10    # queued prefills were seen
    assert router._prefilling == {} and router.prefill_tokens == [0, 0, 0]


def test_kv_aware_weight_zero_is_pure_load_balance():
    router = kv_router(2, overlap_score_weight=0.0)
    router.kv_indexer.apply_stored(0, list(range(50)))
    router.place(request(range(900, 901)), router.instances[0])
    assert router.choose(request(range(50))).instance_id == 1


def test_kv_aware_temperature_samples_by_softmax_and_repeats_with_the_seed():
    def picks(seed):
        router = KvAware(cluster(3), KvAwareParams(overlap_score_weight=1.0, temperature=0.5),
                         np.random.default_rng(seed))
        router.kv_indexer.apply_stored(0, list(range(40)))
        router.kv_indexer.apply_stored(1, list(range(20)))
        req = request(range(40), prompt_tokens=40 * BLOCK_TOKENS)
        return [router.choose(req).instance_id for _ in range(3000)]

    first = picks(5)
    assert first == picks(5)
    # Logits 0, 20, 40 blocks normalise to 0, 0.5, 1: p proportional to exp(0), exp(-1), exp(-2).
    expected = np.exp([0.0, -1.0, -2.0]) / np.exp([0.0, -1.0, -2.0]).sum()
    observed = np.bincount(first, minlength=3) / len(first)
    assert np.allclose(observed, expected, atol=0.03)


def test_kv_aware_breaks_ties_with_its_seeded_stream():
    def picks(seed):
        router = kv_router(4)
        return [router.choose(request(range(3))).instance_id for _ in range(200)]

    assert picks(0) == picks(0)
    assert set(picks(0)) == {0, 1, 2, 3}


def test_kv_aware_never_reads_the_cache():
    router = kv_router(2)
    router.submit(request(range(10)))  # FakeInstance.cache raises if read


# --- cache_aware -------------------------------------------------------------------------------
def test_cache_aware_follows_its_own_tree_above_the_threshold():
    router = CacheAware(cluster(3), CacheAwareParams(cache_threshold=0.5))
    first = request(range(100))
    router.submit(first)
    home = first.instance
    finish(router, first)
    again = request(list(range(100)) + [7777])          # the same history, one block more
    assert router.choose(again).instance_id == home
    stranger = request(range(5000, 5100))              # matches nothing: smallest tree wins
    assert router.choose(stranger).instance_id != home


def test_cache_aware_below_threshold_goes_to_the_smallest_tree():
    router = CacheAware(cluster(3), CacheAwareParams(cache_threshold=0.9))
    for w, size in enumerate([30, 10, 20]):
        router.place(request(range(w * 1000, w * 1000 + size)), router.instances[w])
    half = request(list(range(20)) + list(range(9000, 9020)))   # half of worker 0's prefix
    assert router.choose(half).instance_id == 1


def test_cache_aware_falls_back_to_shortest_queue_when_imbalanced():
    params = CacheAwareParams(cache_threshold=0.1, balance_abs_threshold=4, balance_rel_threshold=1.5)
    router = CacheAware(cluster(3), params)
    router.place(request(range(100)), router.instances[0])
    for _ in range(5):
        router.place(request(range(7000, 7001)), router.instances[0])
    router.place(request(range(8000, 8001)), router.instances[2])
    # Loads 6, 0, 1: 6 - 0 > 4 and 6 > 1.5 * 0, so the prefix on worker 0 is ignored.
    assert router.imbalanced()
    assert router.choose(request(range(100))).instance_id == 1
    # Loads 6, 3, 4: the absolute gap 3 is within 4: balanced, the prefix wins again.
    for _ in range(3):
        router.place(request(range(8100, 8101)), router.instances[1])
    router.place(request(range(8200, 8201)), router.instances[2])
    router.place(request(range(8300, 8301)), router.instances[2])
    router.place(request(range(8400, 8401)), router.instances[2])
    assert not router.imbalanced()
    assert router.choose(request(range(100))).instance_id == 0


def test_cache_aware_trees_are_cut_back_periodically():
    params = CacheAwareParams(max_tree_tokens=10 * BLOCK_TOKENS, eviction_interval_s=60.0)
    router = CacheAware(cluster(1), params)
    router.place(request(range(35), arrival_s=1.0), router.instances[0])
    assert router.trees[0].used_blocks == 35                 # may exceed the size between evictions
    router.choose(request(range(3), arrival_s=61.0))        # the periodic eviction is due
    assert router.trees[0].used_blocks == 10
    assert router.trees[0].match(list(range(35)), 61.0, touch=False).hit_blocks == 10


# --- session_affinity, sticky, baselines ---------------------------------------------------------
def test_session_affinity_sticks_then_overflows_when_saturated():
    router = SessionAffinity(cluster(3), SessionAffinityParams(saturation_requests=2))
    a1 = request([1], session_id=1)
    router.submit(a1)
    assert a1.instance == 0
    router.submit(request([2], session_id=2))          # least loaded: worker 1
    a2 = request([1, 3], session_id=1)
    router.submit(a2)
    assert a2.instance == 0                            # home, not saturated (1 < 2)
    a3 = request([1, 3, 4], session_id=1)
    router.submit(a3)                                  # home has 2 in flight: overflow
    assert a3.instance == 2 and router.overflows == 1
    assert router.home[1].instance_id == 2             # rehomed


def test_session_affinity_saturation_defaults_to_the_batch_cap():
    router = SessionAffinity(cluster(2, max_batch=3))
    for _ in range(3):
        router.submit(request([1], session_id=9))
    assert router.in_flight == [3, 0]
    router.submit(request([1], session_id=9))
    assert router.in_flight == [3, 1]


def test_sticky_sessions_wrap_kv_aware_and_keep_its_bookkeeping():
    inner = kv_router(2)
    router = StickySessions(inner)
    first, second = request(range(10), session_id=4), request(range(12), session_id=4)
    router.submit(first)
    router.submit(second)
    assert first.instance == second.instance
    assert inner.active_blocks[first.instance] == 22 and inner.in_flight[first.instance] == 2
    finish(router, first)
    finish(router, second)
    assert inner.active_blocks == [0, 0] and inner.in_flight == [0, 0]


def test_least_loaded_and_round_robin():
    instances = cluster(4)
    router = LeastLoaded(instances)
    router.in_flight = [3, 1, 1, 2]
    assert router.choose(None).instance_id == 1  # lowest index on ties
    rr = RoundRobin(instances)
    assert [rr.choose(None).instance_id for _ in range(5)] == [0, 1, 2, 3, 0]


def test_prefix_affinity_is_retired_with_a_pointer_to_kv_aware():
    assert "prefix_affinity" not in ROUTERS
    with pytest.raises(KeyError, match="retired into 'kv_aware'"):
        ROUTERS.get("prefix_affinity")
    assert {"kv_aware", "cache_aware", "session_affinity", "least_loaded", "round_robin"} <= set(ROUTERS.names())
