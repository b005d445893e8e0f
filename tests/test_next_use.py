"""Belady's next-use index: the three builders answer alike (agentsim.cache.policies._next_use).

The prefix-run builder is exact only when every key sits in one run of the requests' radix
tree; these tests give it agent-like streams (histories re-sent and extended, forks, rewrites,
requests ending inside a run) and streams that break the condition, and compare every key's
next use at every position with the per-key sort.
"""

from __future__ import annotations

import bisect
import random
from array import array

import pytest

from agentsim.cache.policies._next_use import (PREFIX_RUNS_MIN_MEAN_KEYS, _common_typecode, build_index,
                                               index_by_prefix_runs, index_by_sorting, index_in_python)
from agentsim.cache.policies.belady import NEVER, Belady


def next_use(index, key, position):
    slot_of, bounds, positions = index
    if slot_of is None:
        slot = key if 0 <= key < len(bounds) - 1 else None
    else:
        slot = slot_of.get(key)
    if slot is None:
        return NEVER
    lo, hi = bounds[slot], bounds[slot + 1]
    i = bisect.bisect_right(positions, position, lo, hi)
    return positions[i] if i < hi else NEVER


def answers(index, requests):
    keys = sorted({k for r in requests for k in r}) + [-7, 10**9]
    return [[next_use(index, k, p) for k in keys] for p in range(-1, len(requests) + 1)]


def agent_stream(seed: int, n_requests: int = 60) -> list[list[int]]:
    """Sessions that share a prefix, re-send their history and extend it, fork, get rewritten
    (fresh keys after a cut) and sometimes send only part of their history."""
    rng = random.Random(seed)
    next_key = 0

    def fresh(n):
        nonlocal next_key
        next_key += n
        return list(range(next_key - n, next_key))

    shared = fresh(rng.randint(0, 6))
    sessions = [shared + fresh(rng.randint(1, 5)) for _ in range(rng.randint(1, 4))]
    out = []
    for _ in range(n_requests):
        s = rng.randrange(len(sessions))
        history = sessions[s]
        roll = rng.random()
        if roll < 0.1:
            sessions.append(list(history[: rng.randint(0, len(history))]) + fresh(rng.randint(1, 4)))  # fork
        elif roll < 0.2:
            cut = rng.randint(0, len(history))
            sessions[s] = history[:cut] + fresh(rng.randint(1, 6))  # rewrite after a cut
        elif roll < 0.3:
            out.append(history[: rng.randint(0, len(history))])  # part of the history only
            continue
        out.append(list(sessions[s]))
        sessions[s] = sessions[s] + fresh(rng.randint(0, 5))
    return out


@pytest.mark.parametrize("seed", range(25))
def test_prefix_runs_answer_like_the_per_key_sort(seed):
    requests = agent_stream(seed)
    runs = index_by_prefix_runs(requests)
    assert runs is not None
    expected = answers(index_by_sorting(requests), requests)
    assert answers(runs, requests) == expected
    assert answers(index_in_python(requests), requests) == expected


def test_a_key_in_two_runs_is_refused_and_the_sort_answers():
    # Key 5 follows two different prefixes: keys that do not determine their prefix.
    requests = [[1, 2, 5], [3, 5], [1, 2, 5, 6]] * (PREFIX_RUNS_MIN_MEAN_KEYS + 1)
    assert index_by_prefix_runs(requests) is None
    assert answers(build_index(requests), requests) == answers(index_by_sorting(requests), requests)
    # A key twice within one request is refused too.
    assert index_by_prefix_runs([[1, 2, 1]]) is None


def test_long_requests_get_one_slot_per_run():
    history = list(range(PREFIX_RUNS_MIN_MEAN_KEYS * 2))
    requests = [history[: PREFIX_RUNS_MIN_MEAN_KEYS + 10 * i] for i in range(8)]
    index = build_index(requests)
    assert len(index.bounds) - 1 == len(requests)  # one run per call, not one slot per key
    assert answers(index, requests) == answers(index_by_sorting(requests), requests)


def test_belady_uses_the_same_future_whichever_builder_ran():
    requests = agent_stream(3, n_requests=80)
    long_requests = [r + list(range(10**6 + 1000 * i, 10**6 + 1000 * i + PREFIX_RUNS_MIN_MEAN_KEYS))
                     for i, r in enumerate(requests)]
    policy = Belady()
    policy.set_future(long_requests)
    assert policy._slot is not None and len(policy._bounds) - 1 < len({k for r in long_requests for k in r})
    reference = index_by_sorting(long_requests)
    for position in (-1, 0, 17, 79):
        policy.begin_request(position)
        for key in {k for r in long_requests for k in r}:
            assert policy.next_use(key) == next_use(reference, key, position)


@pytest.mark.parametrize("typecode", ["I", "q"])   # the agents' 32-bit keys, the traces' 64-bit ones
def test_the_sort_reads_compact_key_arrays_as_their_lists(typecode):
    requests = [r for seed in range(5) for r in agent_stream(seed)]
    requests.append([2**32 - 1, 2**32 - 2])                  # the 32-bit type's largest keys
    as_arrays = [array(typecode, r) for r in requests]
    assert _common_typecode(as_arrays) == typecode             # the buffers are joined, no per-key loop
    assert answers(index_by_sorting(as_arrays), requests) == answers(index_by_sorting(requests), requests)
    mixed = as_arrays[:-1] + [array("q" if typecode == "I" else "I", requests[-1])]
    assert _common_typecode(mixed) is None and _common_typecode([]) is None
    assert answers(index_by_sorting(mixed), requests) == answers(index_by_sorting(requests), requests)
