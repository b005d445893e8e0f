"""Canonical prefix ids: one dense integer per distinct prefix block of a trace.

Trace keys are prefix keys in every supported format, but a user's trace may reuse an id under
different parents. Interning ``(parent canonical id, key)`` gives ids that identify a whole
prefix whatever the input's convention, which is what unique-block counts, the ideal hit ratio
and the stack-distance curve need. Ids are dense, from 1 to ``unique_blocks``.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from operator import eq
from typing import TYPE_CHECKING

from agentsim.workload.traces.records import TraceRequest

if TYPE_CHECKING:  # numpy is imported where ids are built: a cache-only replay never needs it
    import numpy as np

#: The parent of a request's first block, in :func:`prefix_block_counts`.
_ROOT = (-1,)


@dataclass(slots=True)
class CanonicalTrace:
    """The block stream of a request sequence in canonical ids.

    Attributes:
        ids: all requests' canonical ids concatenated, each request in depth order (int64).
        starts: ``starts[i]`` is the offset of request ``i`` in ``ids`` (length ``requests + 1``).
        unique_blocks: distinct prefix blocks of the trace.
        ideal_hit_blocks: blocks already seen before (hits with an unbounded cache).
    """

    ids: np.ndarray
    starts: np.ndarray
    unique_blocks: int
    ideal_hit_blocks: int

    @property
    def requested_blocks(self) -> int:
        return int(self.starts[-1])

    @property
    def requests(self) -> int:
        return len(self.starts) - 1


def canonicalize(requests: list[TraceRequest]) -> CanonicalTrace:
    """Canonical ids for ``requests`` (in the order given: replay order).

    Fast path (vectorised): if every key always follows the same parent key (true prefix keys,
    as in all supported formats), a key already names its whole prefix and is only renumbered
    densely. Otherwise ``(parent canonical id, key)`` pairs are interned. Either way ids are
    numbered in order of first appearance.
    """
    import numpy as np

    lengths = np.fromiter((len(r.block_keys) for r in requests), dtype=np.int64, count=len(requests))
    starts = np.zeros(len(requests) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    total = int(starts[-1])
    if total == 0:
        return CanonicalTrace(ids=np.zeros(0, dtype=np.int64), starts=starts, unique_blocks=0, ideal_hit_blocks=0)
    keys = np.concatenate([np.frombuffer(r.block_keys, dtype=np.int64) for r in requests if len(r.block_keys)])
    parents = np.empty(total, dtype=np.int64)
    parents[1:] = keys[:-1]
    parents[starts[:-1][lengths > 0]] = -1  # a request's first block hangs off the root
    codes, unique = _first_appearance_codes(keys)
    parent_of = np.empty(unique, dtype=np.int64)
    parent_of[codes] = parents
    if np.array_equal(parent_of[codes], parents):
        # Every id's first occurrence is its only miss under an unbounded cache.
        return CanonicalTrace(ids=codes.astype(np.int64, copy=False) + 1, starts=starts, unique_blocks=unique,
                              ideal_hit_blocks=total - unique)
    return _intern(requests, starts)


def prefix_block_counts(requests: list[TraceRequest]) -> tuple[int, int]:
    """``(unique_blocks, ideal_hit_blocks)`` of ``requests``, as :func:`canonicalize` counts them.

    Without building ids (and without numpy, whose import alone is a fifth of a cache-only
    ``agentsim replay`` process): one parent per key is recorded at C speed (``dict.update``
    over ``zip``), then checked; if every key always follows the same parent, keys are
    prefix keys and the counts follow from the distinct keys. Otherwise :func:`canonicalize`.
    """
    parent_of: dict[int, int] = {}
    record = parent_of.update
    total = 0
    for request in requests:
        keys = request.block_keys
        total += len(keys)
        record(zip(keys, chain(_ROOT, keys)))
    parent = parent_of.__getitem__
    if all(all(map(eq, map(parent, r.block_keys), chain(_ROOT, r.block_keys))) for r in requests):
        unique = len(parent_of)
        return unique, total - unique
    canonical = canonicalize(requests)
    return canonical.unique_blocks, canonical.ideal_hit_blocks


def _first_appearance_codes(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense codes 0..n-1 of ``keys``' distinct values, numbered in order of first appearance.

    The same codes as ``pandas.factorize`` at about the same speed (a sort instead of a hash
    table), without importing pandas (0.2 s of every ``agentsim replay`` process otherwise).
    """
    import numpy as np

    uniques, first_index, inverse = np.unique(keys, return_index=True, return_inverse=True)
    rank = np.empty(len(uniques), dtype=np.int64)
    rank[np.argsort(first_index, kind="stable")] = np.arange(len(uniques), dtype=np.int64)
    return rank[inverse.reshape(-1)], len(uniques)


def _intern(requests: list[TraceRequest], starts: np.ndarray) -> CanonicalTrace:
    import numpy as np

    table: dict[tuple[int, int], int] = {}
    out: list[int] = []
    append = out.append
    get = table.get
    for request in requests:
        prev = 0
        for key in request.block_keys:
            pair = (prev, key)
            canon = get(pair)
            if canon is None:
                canon = len(table) + 1
                table[pair] = canon
            append(canon)
            prev = canon
    unique = len(table)
    return CanonicalTrace(ids=np.array(out, dtype=np.int64), starts=starts, unique_blocks=unique,
                          ideal_hit_blocks=int(starts[-1]) - unique)
