"""Canonical prefix ids: one dense integer per distinct prefix block of a trace.

Trace keys are prefix keys in every supported format, but a user's trace may reuse an id under
different parents. Interning ``(parent canonical id, key)`` gives ids that identify a whole
prefix whatever the input's convention, which is what unique-block counts, the ideal hit ratio
and the stack-distance curve need. Ids are dense, from 1, in order of first appearance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
    """Canonical ids for ``requests`` (in the order given: replay order)."""
    table: dict[tuple[int, int], int] = {}
    lengths = np.fromiter((len(r.block_keys) for r in requests), dtype=np.int64, count=len(requests))
    starts = np.zeros(len(requests) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    ids = np.empty(int(starts[-1]), dtype=np.int64)
    pos = 0
    get = table.get
    for request in requests:
        prev = 0
        for key in request.block_keys:
            pair = (prev, key)
            canon = get(pair)
            if canon is None:
                canon = len(table) + 1
                table[pair] = canon
            ids[pos] = canon
            pos += 1
            prev = canon
    unique = len(table)
    # Every id's first occurrence is its only miss under an unbounded cache.
    ideal_hits = int(starts[-1]) - unique
    return CanonicalTrace(ids=ids, starts=starts, unique_blocks=unique, ideal_hit_blocks=ideal_hits)
