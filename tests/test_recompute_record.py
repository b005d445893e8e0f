"""The recompute split's loss record against the plain per-instance dictionary it compacts: for
every (instance, key), the tier the instance last lost the key from, through records by many
instances (more owners of a key than dense layers), forgetting and purging dead keys, and
removals of keys already dead (not recorded)."""

import random
from array import array
from types import SimpleNamespace

import pytest

from agentsim.engine.recompute import DENSE_LAYERS, RecomputeClassifier


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
    ``array('q')`` (the agents' key type), so the long ones take the vectorised first-layer pass;
    every layer's count of set keys must stay exact (purges follow it)."""
    rng = random.Random(seed)
    n_instances = 2 * DENSE_LAYERS + 2          # keys lost on more instances than dense layers
    record = _classifier(n_instances)
    model: dict[int, dict[int, int]] = {i: {} for i in range(n_instances)}   # instance -> key -> 1 + tier
    protected = set(range(1, 40))                # shared prefixes: always live
    oldest = [1]
    record.key_horizon = lambda: (oldest[0], protected)
    record._purge_at = 300                       # purge often
    next_key = 1
    # Forgotten keys may be lost again, as an ended agent's blocks are (no longer recorded), but
    # no call sends them again, so they are never asked about.
    forgotten: set[int] = set()
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
                # hours): dead keys, never sent again, so not recorded once a purge has seen
                # them dead; mixed with live and shared keys in one removal or not.
                low = rng.randrange(1, oldest[0])
                keys = list(range(low, min(low + rng.randrange(1, longest), oldest[0])))
                if rng.random() < 0.5:
                    keys += list(range(oldest[0], oldest[0] + rng.randrange(0, 5)))
            instance, tier = rng.randrange(n_instances), rng.randrange(3)
            record._record(instance, array("q", keys) if as_array else keys, tier)
            for layer in record._layers:
                assert layer.count == sum(1 for v in layer.values if v) + len(layer.far)
            for key in keys:
                if key >= oldest[0] or key in protected:
                    model[instance][key] = 1 + tier
        elif op < 0.7 and next_key > 50:
            keys = list(range(rng.randrange(40, next_key), next_key))[:50]
            record.forget(keys)
            forgotten.update(keys)
            for held in model.values():
                for key in keys:
                    held.pop(key, None)
        elif op < 0.75:
            oldest[0] = max(oldest[0], next_key - rng.randrange(0, 2000))
            record._purge()
            for held in model.values():
                for key in [k for k in held if k < oldest[0] and k not in protected]:
                    del held[key]
    probe = sorted(({k for held in model.values() for k in held} | set(range(1, next_key, 7))) - forgotten)
    for instance in range(n_instances):
        assert record._tiers_lost(instance, probe) == [model[instance].get(k, 0) for k in probe], instance
    assert len(record._layers) == DENSE_LAYERS and record._spill     # every path was taken


@pytest.mark.parametrize("as_array", [False, True], ids=["lists", "arrays"])
def test_forgotten_keys_leave_the_record_and_are_not_recorded_again(as_array):
    """An ended agent's keys: forget drops every owner's record, the spilled owners' too, and
    their later losses (lower tiers evict them for hours) add nothing, whatever the horizon."""
    n_instances = DENSE_LAYERS + 3
    record = _classifier(n_instances)
    dead = list(range(100, 400))
    for instance in range(n_instances):
        record._record(instance, array("q", dead) if as_array else dead, instance % 3)
    assert len(record._spill) == len(dead)              # owners beyond the dense layers
    before = record.state_bytes()
    record.forget(array("q", dead))
    assert not record._spill and all(not layer.count for layer in record._layers[1:])
    held = record._layers[0].count
    for instance in range(n_instances):
        record._record(instance, array("q", dead) if as_array else dead, 2)
    assert not record._spill and all(not layer.count for layer in record._layers[1:])
    assert record._layers[0].count == held and record.state_bytes() < before
    live = list(range(400, 460))                         # keys above the forgotten ones still count
    for instance in range(n_instances):
        record._record(instance, array("q", live) if as_array else live, 1)
    assert all(record._tiers_lost(i, live) == [2] * len(live) for i in range(n_instances))
    assert record._tiers_lost(0, dead[:5]) == [0] * 5


def test_the_first_layer_grows_from_the_oldest_live_key():
    """Losses of a few keys of each new range, while agents end behind them: the dense span must
    grow from the oldest live key, not double over the dead keys below it (the soak's mid-day
    rise: purges follow the record's count, which stays low when few keys of the span are lost)."""
    record = _classifier(1)
    window = 2000                                  # keys behind the newest that a live agent can send
    oldest = [1]
    record.key_horizon = lambda: (oldest[0], set())
    largest_span = 0
    for start in range(1, 400_000, 100):
        oldest[0] = max(1, start - window)
        record._record(0, list(range(start, start + 100, 10)), 0)     # a tenth of each range is lost
        largest_span = max(largest_span, len(record._layers[0].values))
    assert largest_span <= 4 * window + 1024        # doubling over ~4,100 dead keys per purge: 65,536
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


def test_codes_take_two_bytes_a_key_up_to_255_instances_and_four_beyond():
    small, large = _classifier(255), _classifier(256)
    for record, last in ((small, 254), (large, 255)):
        keys = list(range(100, 200))
        record._record(last, keys, 2)
        record._record(0, keys[:10], 1)
        assert record._tiers_lost(last, keys) == [3] * 100
        assert record._tiers_lost(0, keys) == [2] * 10 + [0] * 90
    assert small._layers[0].values.typecode == "H" and large._layers[0].values.typecode == "I"


def test_a_layer_created_late_in_a_run_holds_its_keys_densely():
    """The second and third owners of keys allocated long after the run began (keys far above
    the growth slack of 0): their layers start with the first layer's span, not a dict entry
    (about 100 bytes) per key."""
    record = _classifier(3)
    keys = list(range(500_000, 520_000))
    record._record(0, list(range(1, 520_000)), 0)      # the first instance lost every key so far
    record._record(1, keys[::2], 1)
    record._record(2, keys[::4], 2)
    assert len(record._layers) == 3
    assert all(not layer.far for layer in record._layers)
    assert record._tiers_lost(2, keys[:8]) == [3, 0, 0, 0, 3, 0, 0, 0]
    assert record._tiers_lost(1, keys[:4]) == [2, 0, 2, 0]
