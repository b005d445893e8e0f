"""Block keys as runs of consecutive ints.

The key allocator (:mod:`agentsim.workload.content`) hands out keys in runs: a session's appended
text takes consecutive ids. Structures that follow keys by the run rather than by the key (the
recompute split's loss record, the agents' live keys) use these two conversions.
"""

from __future__ import annotations

from array import array

import numpy as np

#: Arrays of at least this many keys that are not one run are split with numpy rather than by the
#: per-key loop: a long-lived session's history is one run per call, and a whole evicted node
#: (``eviction_granularity: node``) can hold thousands of keys. On an idle machine numpy's fixed
#: cost (about 9 us) equals the loop's (about 35 ns a key) near 250 keys, but with the threshold
#: there a profile of the fleet day showed the numpy path at 7.5% of the event loop where the
#: loop alone had been 3.4% (another hour of the day, before the change). At 1,024 keys numpy
#: takes about 13 us against the loop's 36.
_NUMPY_MIN_KEYS = 1024

#: numpy's dtype of each ``array`` type code block keys come in: the agents' 32-bit keys
#: (:data:`agentsim.workload.content.KEY_TYPECODE`) and the traces' 64-bit ones.
KEY_DTYPES = {"I": np.uint32, "q": np.int64}


def key_runs(keys) -> list[tuple[int, int]]:
    """``keys`` (any order, repeats allowed) as runs ``[start, end)`` of consecutive keys, in the
    order they come; together the runs hold exactly the keys."""
    n = len(keys)
    if n:
        first = keys[0]
        if keys[n - 1] - first == n - 1 and (n < 3 or keys == _ascending(keys, first, n)):
            return [(first, first + n)]      # the common case, one run (compared in C)
        if n >= _NUMPY_MIN_KEYS and type(keys) is array and keys.typecode in KEY_DTYPES:
            return _array_runs(keys)
    runs: list[tuple[int, int]] = []
    it = iter(keys)
    for first in it:
        start = last = first
        for key in it:
            if key == last + 1:
                last = key
                continue
            runs.append((start, last + 1))
            start = last = key
        runs.append((start, last + 1))
    return runs


def merged_runs(runs) -> tuple[list[int], list[int]]:
    """``runs`` (``(start, end)`` pairs, any order, overlapping or not) as the sorted starts and
    ends of disjoint runs holding the same keys (touching runs joined)."""
    starts: list[int] = []
    ends: list[int] = []
    for start, end in sorted(runs):
        if ends and start <= ends[-1]:
            if end > ends[-1]:
                ends[-1] = end
        else:
            starts.append(start)
            ends.append(end)
    return starts, ends


def _array_runs(keys: array) -> list[tuple[int, int]]:
    """:func:`key_runs` of an ``array`` of a type code in ``KEY_DTYPES``, with numpy: a run ends
    where the next key is not the last plus one."""
    # As int64: an unsigned difference would wrap, and a run's end may be the type's limit.
    view = np.frombuffer(keys, dtype=KEY_DTYPES[keys.typecode]).astype(np.int64)
    cut = np.flatnonzero(np.diff(view) != 1) + 1          # the index each later run starts at
    starts = view[np.concatenate(([0], cut))]
    ends = view[np.concatenate((cut - 1, [len(view) - 1]))] + 1
    return list(zip(starts.tolist(), ends.tolist()))


def _ascending(keys, first: int, n: int):
    """``first .. first + n - 1`` in the sequence type of ``keys`` (an ``array`` or a list)."""
    if type(keys) is array:
        return array(keys.typecode, range(first, first + n))
    return list(range(first, first + n))
