"""The recompute split's loss record against the plain per-instance dictionary it compacts: for
every (instance, key) a call can still send, the tier the instance last lost the key from,
through records by many instances, purges of dead keys, and removals of keys already dead (not
recorded); and its runs of keys (``agentsim.engine.loss_runs``) against a dict of keys."""

import random
from array import array
from types import SimpleNamespace

import pytest

from agentsim.engine.loss_runs import BucketedLossRuns, LossRuns
from agentsim.engine.recompute import RecomputeClassifier
from agentsim.workload.key_runs import key_runs, merged_runs


class _Policy:
    def on_remove(self, obj, blocks, reason):
        pass


def _classifier(n_instances: int) -> RecomputeClassifier:
    instances = [SimpleNamespace(instance_id=i, cache=SimpleNamespace(name="hbm", policy=_Policy()))
                 for i in range(n_instances)]
    return RecomputeClassifier(instances, block_tokens=16, warmup_s=0.0)


@pytest.mark.parametrize("as_array", [False, True], ids=["lists", "arrays"])
@pytest.mark.parametrize("seed,longest", [(0, 30), (1, 30), (2, 30), (3, 30), (4, 200), (5, 200)])
def test_loss_record_matches_a_dict_per_instance(seed, longest, as_array):
    """``longest``: the longest removal (a full cache's evictions remove whole merged runs of
    hundreds of keys, not contiguous, and a key may come twice). ``as_array``: removals come as
    ``array('q')`` (the agents' key type). Keys no call can send again (an ended agent's: below
    the oldest live key, or a range above it, but not a shared prefix) are never asked about, so
    only the others are compared."""
    rng = random.Random(seed)
    n_instances = 8
    record = _classifier(n_instances)
    model: dict[int, dict[int, int]] = {i: {} for i in range(n_instances)}   # instance -> key -> 1 + tier
    protected = set(range(1, 40))                # shared prefixes: always live
    oldest = [1]
    ended: list[tuple[int, int]] = []            # ranges of keys of agents that ended
    next_key = 1

    def live_keys():
        """[1, 40) and [oldest, next_key) but the ended ranges, as the agent driver gives them."""
        runs, at = [(1, 40)], oldest[0]
        for start, end in zip(*merged_runs(ended)):
            if end > at and start < next_key:
                if start > at:
                    runs.append((at, start))
                at = max(at, end)
        if at < next_key:
            runs.append((at, next_key))
        return merged_runs(runs), next_key

    record.live_keys = live_keys
    record._purge_at = 30                        # purge often
    dropped_runs = 0
    for _ in range(3000):
        op = rng.random()
        if op < 0.6:
            start = rng.choice((rng.randrange(1, 40), max(1, next_key - rng.randrange(1, 400)), next_key))
            keys = list(range(start, start + rng.randrange(1, longest)))
            if longest > 30 and rng.random() < 0.3:
                keys = keys[::2] + keys[:3]       # not contiguous, some keys given twice
            if rng.random() < 0.05:
                keys.append(rng.getrandbits(60))   # a trace's hash id
            next_key = max(next_key, keys[-1] + 1) if keys[-1] < 2**40 else next_key
            if rng.random() < 0.2 and oldest[0] > 2:
                # An ended agent's blocks, evicted after it ended (lower tiers hold them for
                # hours), mixed with live and shared keys in one removal or not.
                low = rng.randrange(1, oldest[0])
                keys = list(range(low, min(low + rng.randrange(1, longest), oldest[0])))
                if rng.random() < 0.5:
                    keys += list(range(oldest[0], oldest[0] + rng.randrange(0, 5)))
            instance, tier = rng.randrange(n_instances), rng.randrange(3)
            record._record(instance, array("q", keys) if as_array else keys, tier)
            for key in keys:
                model[instance][key] = 1 + tier
        elif op < 0.7 and next_key > 50:
            start = rng.randrange(40, next_key)
            ended.append((start, min(start + 50, next_key)))
        elif op < 0.75:
            oldest[0] = max(oldest[0], next_key - rng.randrange(0, 2000))
            runs_before = sum(len(lost) for lost in record._lost.values())
            record._purge()
            dropped_runs += runs_before - sum(len(lost) for lost in record._lost.values())
    dead = {k for start, end in ended for k in range(start, end)} - protected
    asked = {k for held in model.values() for k in held} | set(range(1, next_key, 7))
    probe = sorted(k for k in asked - dead if k >= oldest[0] or k in protected)
    for instance in range(n_instances):
        assert record._tiers_lost(instance, probe) == [model[instance].get(k, 0) for k in probe], instance
        assert record._tiers_lost(instance, array("q", probe)) == [model[instance].get(k, 0) for k in probe]
    assert dropped_runs > 0 and oldest[0] > 40         # purges dropped the runs of dead keys


def test_dead_keys_are_not_recorded_and_their_runs_are_purged():
    """After a purge, removals of dead keys (in no live agent's context, no shared prefix among
    them) add no run; runs holding a live key (here the shared prefix key 150) stay, whatever
    else they hold."""
    record = _classifier(3)
    oldest = [1]
    record.live_keys = lambda: (merged_runs([(150, 151), (oldest[0], 1000)]), 1000)
    for instance in range(3):
        record._record(instance, list(range(100, 140)), 0)   # dead after the horizon moves
        record._record(instance, list(range(145, 160)), 1)   # holds the shared key 150
        record._record(instance, list(range(400, 460)), 2)   # live
    assert all(len(record._lost[i]) == 3 for i in range(3))
    oldest[0] = 300
    record._purge()
    assert all(record._lost[i].items() == [(145, 160, 2), (400, 460, 3)] for i in range(3))
    for instance in range(3):
        record._record(instance, array("q", range(100, 140)), 1)   # an ended agent's blocks, again
    assert all(len(record._lost[i]) == 2 for i in range(3))
    assert record._tiers_lost(0, [150, 400, 459, 460]) == [2, 3, 3, 0]
    assert record.state_bytes() > 0


def test_the_record_stays_flat_over_a_long_run():
    """Losses of a few keys of each new range while agents end behind them: the runs of dead
    keys are purged, so the record holds about the live window's runs, not every run since the
    start (the dense record of before grew with the allocator's span)."""
    record = _classifier(1)
    window = 2000                                  # keys behind the newest that a live agent can send
    oldest = [1]
    newest = [1]
    record.live_keys = lambda: (merged_runs([(oldest[0], newest[0])]), newest[0])
    most_runs = 0
    for start in range(1, 400_000, 100):
        oldest[0], newest[0] = max(1, start - window), start + 100
        record._record(0, list(range(start, start + 100, 10)), 0)     # a tenth of each range is lost
        most_runs = max(most_runs, len(record._lost[0]))
    assert most_runs <= 2 * 4096 + window // 10     # the purge threshold, doubled at most
    recent = list(range(400_000 - window, 400_000))
    assert record._tiers_lost(0, recent) == [1 if k % 10 == 1 else 0 for k in recent]


def _tiered_classifier(n_instances: int, tier_names: list[str]) -> RecomputeClassifier:
    instances = [SimpleNamespace(instance_id=i, cache=SimpleNamespace(
        tiers=[SimpleNamespace(name=name, policy=_Policy()) for name in tier_names]))
        for i in range(n_instances)]
    return RecomputeClassifier(instances, block_tokens=16, warmup_s=5.0)


@pytest.mark.parametrize("seed", range(4))
def test_classify_splits_by_the_definition(seed):
    """Per request: evicted = missed full blocks this instance lost (by the tier lost from),
    invalidated = missed blocks never lost at positions of the same instance's rewrite, cold =
    the rest; requests of the warm-up add nothing to the per-tier totals."""
    rng = random.Random(seed)
    tier_names = ["hbm", "dram", "disk"]
    record = _tiered_classifier(3, tier_names)
    lost: dict[int, dict[int, int]] = {i: {} for i in range(3)}
    expected_by_tier = {name: 0 for name in tier_names}
    for _ in range(400):
        instance = rng.randrange(3)
        if rng.random() < 0.5:
            start = rng.randrange(1, 200)
            keys = list(range(start, start + rng.randrange(1, 20)))
            tier = rng.randrange(3)
            record._record(instance, keys, tier)
            for key in keys:
                lost[instance][key] = 1 + tier
            continue
        n_keys = rng.randrange(0, 40)
        start = rng.randrange(1, 200)
        prompt_keys = list(range(start, start + n_keys))
        prompt_tokens = n_keys * 16 + rng.randrange(0, 16)
        hit_tokens = rng.randrange(0, prompt_tokens + 1)
        rewrite = None
        if rng.random() < 0.5:
            low = rng.randrange(0, n_keys + 2)
            rewrite = (rng.choice((instance, (instance + 1) % 3)), low, low + rng.randrange(0, 20))
        request = SimpleNamespace(prompt_tokens=prompt_tokens, hit_tokens=hit_tokens, rejected=False,
                                  prompt_keys=prompt_keys, rewrite=rewrite, instance=instance,
                                  arrival_s=rng.uniform(0.0, 10.0))
        first = -(-hit_tokens // 16)
        evicted = invalidated = 0
        by_tier: dict[str, int] = {}
        for position in range(first, n_keys):
            tier = lost[instance].get(prompt_keys[position], 0)
            if tier:
                evicted += 16
                by_tier[tier_names[tier - 1]] = by_tier.get(tier_names[tier - 1], 0) + 16
            elif rewrite and rewrite[0] == instance and rewrite[1] <= position < rewrite[2]:
                invalidated += 16
        recomputed = prompt_tokens - hit_tokens
        assert record.classify(request) == (recomputed - evicted - invalidated, evicted, invalidated)
        if request.arrival_s >= 5.0:
            for name, tokens in by_tier.items():
                expected_by_tier[name] += tokens
    assert record.evicted_by_tier_tokens == expected_by_tier
    assert sum(expected_by_tier.values()) > 0


def test_many_instances_each_keep_their_own_losses():
    record = _classifier(300)
    keys = list(range(100, 200))
    for instance in range(300):
        record._record(instance, keys[: instance % 100 + 1], instance % 3)
    for instance in (0, 1, 254, 255, 299):
        n = instance % 100 + 1
        assert record._tiers_lost(instance, keys) == [1 + instance % 3] * n + [0] * (100 - n)


@pytest.mark.parametrize("bucket_bits", [None, 4, 6], ids=["flat", "buckets-16", "buckets-64"])
@pytest.mark.parametrize("seed", range(40))
def test_loss_runs_match_a_dict_of_keys(seed, bucket_bits):
    """Assignments of random ranges (overlapping, touching, inside one another), with purges:
    every key's code is the dict's, the runs stay disjoint, sorted and joined where adjacent
    with one code (but at a bucket's edge, for the bucketed record), the run count is the runs
    listed, and a purge keeps every live key and drops every run below ``top`` that holds
    none."""
    rng = random.Random(seed)
    runs, model = (LossRuns() if bucket_bits is None else BucketedLossRuns(bucket_bits)), {}
    edge = 1 << 62 if bucket_bits is None else 1 << bucket_bits
    span = rng.choice((40, 250))
    for _ in range(400):
        a = rng.randrange(0, span)
        b = a + rng.randrange(1, rng.choice((4, 30)))
        code = rng.randrange(1, 4)
        runs.assign(a, b, code)
        model.update({k: code for k in range(a, b)})
        items = runs.items()
        assert all(s < e for s, e, _ in items) and len(runs) == len(items)
        for (_, end, code_a), (start, _, code_b) in zip(items, items[1:]):
            assert end < start or (end == start and (code_a != code_b or start % edge == 0)), items
        if rng.random() < 0.05:
            live = sorted(rng.sample(range(span + 40), 4))
            live_runs = merged_runs([(k, k + rng.randrange(1, 20)) for k in live])
            top = rng.randrange(span // 2, span + 40)
            runs.keep_live(*live_runs, top)
            alive = {k for start, end in zip(*live_runs) for k in range(start, end)}
            assert all(runs.code(k) == model.get(k, 0) for k in range(span + 40) if k in alive or k >= top)
            for start, end, _ in runs.items():      # a run left below top holds a live key
                assert end > top or any(start <= k < end for k in alive)
            model = {k: v for k, v in model.items() if runs.code(k) == v}   # dead keys may go
    keys = list(range(span + 40))
    assert [runs.code(k) for k in keys] == [model.get(k, 0) for k in keys]
    rng.shuffle(keys)
    keys = keys[:60] + keys[:5]                   # any order, repeats
    assert runs.codes(key_runs(keys)) == [model.get(k, 0) for k in keys]


def test_key_runs_cover_exactly_the_keys_in_order():
    assert key_runs(array("q", [5, 6, 7])) == [(5, 8)]
    assert key_runs([5, 7, 6]) == [(5, 6), (7, 8), (6, 7)]
    assert key_runs(array("q", [5, 6, 6, 7])) == [(5, 7), (6, 8)]
    assert key_runs([7, 5, 6]) == [(7, 8), (5, 7)]          # first - last spans n - 1, not one run
    assert key_runs([]) == [] and key_runs([3]) == [(3, 4)]
    assert key_runs([2**60, 2**60 + 1]) == [(2**60, 2**60 + 2)]
    assert merged_runs([(5, 8), (1, 3), (3, 4), (6, 10), (20, 21)]) == ([1, 5, 20], [4, 10, 21])


@pytest.mark.parametrize("typecode", ["q", "I"])     # traces' 64-bit keys, the agents' 32-bit ones
def test_key_runs_of_long_arrays_match_the_list_path(typecode):
    """Arrays long enough for the numpy path give the runs the per-key loop gives their list:
    runs of many lengths, repeats, steps down and far jumps (to the 32-bit type's last key too,
    where an unsigned step down would wrap), the array still growable after."""
    rng = random.Random(11)
    top = 2**32 - 1
    for _ in range(300):
        keys, key = [], rng.randint(0, 10**6)
        for _ in range(rng.randint(256, 1500)):
            r = rng.random()
            key = (rng.choice([rng.randint(0, 10**6), top]) if r < 0.05 else key if r < 0.08
                   else max(0, key - 1) if r < 0.1 else min(top, key + 1))
            keys.append(key)
        as_array = array(typecode, keys)
        runs = key_runs(as_array)
        assert runs == key_runs(keys)
        assert sum(end - start for start, end in runs) == len(keys)
        as_array.append(0)                       # numpy released the buffer
