"""The recompute split's loss record against the plain per-instance dictionary it compacts: for
every (instance, key), the tier the instance last lost the key from, through records by many
instances (more owners of a key than dense layers), forgetting and purging dead keys."""

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


@pytest.mark.parametrize("seed", range(4))
def test_loss_record_matches_a_dict_per_instance(seed):
    rng = random.Random(seed)
    n_instances = 2 * DENSE_LAYERS + 2          # keys lost on more instances than dense layers
    record = _classifier(n_instances)
    model: dict[int, dict[int, int]] = {i: {} for i in range(n_instances)}   # instance -> key -> 1 + tier
    protected = set(range(1, 40))                # shared prefixes: always live
    oldest = [1]
    record.key_horizon = lambda: (oldest[0], protected)
    record._purge_at = 300                       # purge often
    next_key = 1
    for _ in range(3000):
        op = rng.random()
        if op < 0.6:
            start = rng.choice((rng.randrange(1, 40), max(1, next_key - rng.randrange(1, 400)), next_key))
            keys = list(range(start, start + rng.randrange(1, 30)))
            if rng.random() < 0.05:
                keys.append(rng.getrandbits(60))   # a trace's hash id
            next_key = max(next_key, keys[-1] + 1) if keys[-1] < 2**40 else next_key
            keys = [k for k in keys if k >= oldest[0] or k in protected]   # dead keys are never lost again
            instance, tier = rng.randrange(n_instances), rng.randrange(3)
            record._record(instance, keys, tier)
            for key in keys:
                model[instance][key] = 1 + tier
        elif op < 0.7 and next_key > 50:
            keys = list(range(rng.randrange(40, next_key), next_key))[:50]
            record.forget(keys)
            for held in model.values():
                for key in keys:
                    held.pop(key, None)
        elif op < 0.75:
            oldest[0] = max(oldest[0], next_key - rng.randrange(0, 2000))
            record._purge()
            for held in model.values():
                for key in [k for k in held if k < oldest[0] and k not in protected]:
                    del held[key]
    probe = sorted({k for held in model.values() for k in held} | set(range(1, next_key, 7)))
    for instance in range(n_instances):
        assert record._tiers_lost(instance, probe) == [model[instance].get(k, 0) for k in probe], instance
    assert len(record._layers) == DENSE_LAYERS and record._spill     # every path was taken


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


def _ops(seed: int, n_instances: int) -> list:
    """A random sequence of records (runs of up to 300 keys, some as ``array('q')`` slices, some
    revisiting old keys or another instance's), forgets and purges."""
    rng = random.Random(seed)
    ops, next_key = [], 1
    for _ in range(400):
        op = rng.random()
        if op < 0.8:
            start = rng.choice((rng.randrange(1, 40), max(1, next_key - rng.randrange(1, 3000)), next_key,
                                next_key + rng.randrange(0, 20_000)))
            keys = list(range(start, start + rng.randrange(1, 300)))
            next_key = max(next_key, keys[-1] + 1)
            ops.append(("record", rng.randrange(n_instances), array("q", keys) if rng.random() < 0.5 else keys,
                        rng.randrange(3)))
        elif op < 0.9 and next_key > 2:
            start = rng.randrange(1, next_key)
            ops.append(("forget", list(range(start, min(start + 400, next_key)))))
        else:
            ops.append(("purge", max(1, next_key - rng.randrange(0, 5000))))
    return ops


@pytest.mark.parametrize("seed", range(3))
def test_vectorised_record_equals_the_per_key_loop(seed, monkeypatch):
    """Long removals take one numpy pass over the first layer when they can: the record's whole
    state (every layer's array, span start, dict and count; the spill dicts) is the per-key loop's."""
    import agentsim.engine.recompute as recompute

    n_instances = DENSE_LAYERS + 2
    records = []
    for vector_min in (recompute._VECTOR_MIN_KEYS, 10**9):       # vectorised, loop only
        monkeypatch.setattr(recompute, "_VECTOR_MIN_KEYS", vector_min)
        record = _classifier(n_instances)
        protected, oldest = set(range(1, 40)), [1]
        record.key_horizon = lambda: (oldest[0], protected)
        record._purge_at = 5000
        dense_passes = 0
        original = record._record_dense

        def counting(*args, _original=original):
            nonlocal dense_passes
            done = _original(*args)
            dense_passes += done
            return done

        record._record_dense = counting
        for op in _ops(seed, n_instances):
            if op[0] == "record":
                record._record(op[1], op[2], op[3])
            elif op[0] == "forget":
                record.forget(op[1])
            else:
                oldest[0] = max(oldest[0], op[1])
                record._purge()
        records.append((record, dense_passes))
    (vectorised, passes), (looped, loop_passes) = records
    assert passes > 50 and loop_passes == 0                     # both paths were taken
    assert len(vectorised._layers) == len(looped._layers) == DENSE_LAYERS
    for a, b in zip(vectorised._layers, looped._layers):
        assert (a.values.tobytes(), a.base, a.far, a.count) == (b.values.tobytes(), b.base, b.far, b.count)
    assert vectorised._spill == looped._spill and vectorised._purge_at == looped._purge_at
