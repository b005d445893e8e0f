"""Canonical prefix ids: one dense integer per distinct prefix block of a trace.

Trace keys are prefix keys in every supported format, but a user's trace may reuse an id under
different parents. Interning ``(parent canonical id, key)`` gives ids that identify a whole
prefix whatever the input's convention, which is what unique-block counts, the ideal hit ratio
and the stack-distance curve need. Ids are dense, from 1 to ``unique_blocks``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from agentsim.workload.traces.records import TraceRequest


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
    # A hash-table factorisation: codes number distinct keys in order of first appearance.
    codes, uniques = pd.factorize(keys)
    unique = len(uniques)
    parent_of = np.empty(unique, dtype=np.int64)
    parent_of[codes] = parents
    if np.array_equal(parent_of[codes], parents):
        # Every id's first occurrence is its only miss under an unbounded cache.
        return CanonicalTrace(ids=codes.astype(np.int64, copy=False) + 1, starts=starts, unique_blocks=unique,
                              ideal_hit_blocks=total - unique)
    return _intern(requests, starts)


def _intern(requests: list[TraceRequest], starts: np.ndarray) -> CanonicalTrace:
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
