"""DenseKeyMap against a plain dict: the same answers for any key set (allocator ids, hash ids,
negative keys), through growth, removals and the span moving up past removed keys."""

import random

import pytest

from agentsim.cache.key_map import DenseKeyMap


def _check(m: DenseKeyMap, model: dict[int, int], probes) -> None:
    assert len(m) == len(model)
    for key in probes:
        assert m.get(key) == model.get(key, 0), key


@pytest.mark.parametrize("seed", range(5))
def test_matches_a_dict_under_random_operations(seed):
    rng = random.Random(seed)
    m, model = DenseKeyMap(), {}
    next_key = 1
    probes = set()
    for step in range(4000):
        op = rng.random()
        if op < 0.5:   # fresh allocator keys, sometimes with a gap
            next_key += rng.choice((1, 1, 1, 5, 200_000))
            key = next_key
        elif op < 0.6:  # a trace's hash id or a negative key
            key = rng.choice((rng.getrandbits(62), -rng.randrange(1, 1000)))
        elif op < 0.8 and model:
            key = rng.choice(list(model))
        else:
            key = rng.randrange(-10, next_key + 10)
        probes.add(key)
        if rng.random() < 0.2:
            assert m.pop(key) == model.pop(key, 0)
        else:
            value = rng.randrange(1, 2**32)
            m.set(key, value)
            model[key] = value
        if step % 500 == 499:
            _check(m, model, probes)
    _check(m, model, probes)


def test_allocator_keys_are_dense_and_hash_ids_go_to_the_dict():
    m = DenseKeyMap()
    for key in range(1, 10_001):
        m.set(key, 7)
    assert not m.far and m.state_bytes() < 10 * 10_000     # 4 bytes a key of the span
    m.set(2**60, 3)
    assert m.far == {2**60: 3} and m.get(2**60) == 3
    assert len(m) == 10_001


def test_span_growth_absorbs_dict_keys_it_covers():
    m = DenseKeyMap()
    m.set(1, 1)
    far_key = len(m.values) * 2 + 70_000          # beyond the growth slack: the dict
    m.set(far_key, 9)
    assert far_key in m.far
    for key in range(2, far_key, 1000):           # the span grows up to and past it
        m.set(key, 2)
    m.set(far_key + 5, 4)
    assert m.get(far_key) == 9 and m.get(far_key + 5) == 4
    assert m.pop(far_key) == 9 and m.get(far_key) == 0


def test_a_long_run_span_follows_its_live_keys():
    """Keys set and removed in allocation order, with a few old keys kept (shared prefixes): the
    span moves up instead of growing with every key ever set."""
    m, model = DenseKeyMap("Q"), {}
    for key in range(1, 11):
        m.set(key, 2**63 + key)               # 8-byte values
        model[key] = 2**63 + key
    live = 20_000
    for key in range(11, 1_000_000):
        m.set(key, key)
        model[key] = key
        if key - live > 10:
            assert m.pop(key - live) == model.pop(key - live)
    assert len(m) == len(model)
    assert len(m.values) <= 8 * live                 # not the million keys set over the run
    assert all(m.get(k) == v for k, v in list(model.items())[:50])
    assert m.get(500) == 0


def test_many_shared_prefix_keys_do_not_pin_the_span():
    """A few hundred always-set low keys (the shared prefixes) and a small live window that moves
    up: the span stays near the window (the low keys move to the dict)."""
    m = DenseKeyMap()
    for key in range(1, 601):
        m.set(key, 1)
    window = 2000
    for key in range(601, 600_000):
        m.set(key, 2)
        if key - window > 600:
            m.pop(key - window)
    assert len(m) == 600 + window
    assert len(m.values) < 300_000 and all(m.get(k) == 1 for k in range(1, 601))


def test_the_span_grows_by_a_quarter_not_by_doubling():
    """Appending allocator keys leaves at most a quarter of the span unset past the last key
    (doubling left up to half: 300,000 keys in a span of 524,288)."""
    m = DenseKeyMap()
    for key in range(1, 300_001):
        m.set(key, 1)
        if key % 1000 == 0:
            assert len(m.values) <= 1.25 * key + 1024, key
    assert len(m) == 300_000 and not m.far


def test_a_map_widens_in_place_keeping_every_value(monkeypatch):
    monkeypatch.setattr("agentsim.cache.key_map._RETYPE_CHUNK", 7)   # converted a few values at a time
    m = DenseKeyMap("B")
    for key in range(100, 5_000):
        m.set(key, key % 255 + 1)
    m.set(10**9, 7)                               # a far key
    m.retype("H")
    assert m.values.typecode == "H" and len(m) == 4_901
    assert all(m.get(key) == key % 255 + 1 for key in range(100, 5_000)) and m.get(10**9) == 7
    m.set(200, 60_000)                            # now fits
    assert m.get(200) == 60_000
    with pytest.raises(ValueError, match="cannot narrow"):
        m.retype("B")
