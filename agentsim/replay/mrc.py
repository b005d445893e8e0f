"""One-pass LRU hit-ratio curve (miss-ratio curve) for prefix caches, from stack distances.

Model (exactly what :func:`agentsim.replay.cache_only.replay_cache_only` does with the ``lru``
policy and its logical clock): requests are served in order; each request path-touches all its
blocks, so they share one timestamp, and among equal timestamps the deepest block is evicted
first. That is global block LRU under the total order (request of last access, then shallower
first), a stack algorithm: the cache of ``C`` blocks always holds the top ``C`` blocks of one
priority stack, the resident set is prefix-closed, and a block is a hit iff its stack position
before the request is at most ``C``. So one pass gives the hit ratio at every capacity.

Fast path (:func:`distance_histogram`, used by :func:`hit_ratio_curve`): let ``last(b)`` be the
request that last touched block ``b``. Split request ``i``'s blocks into segments of
consecutive blocks with the same ``last``. A segment's first block (depth ``j``) has every
ancestor touched after ``last`` (its parent is in another segment, so touched later), hence its
position is ``1 + (blocks whose latest touch is a request in (last, i))``; each deeper block of
the segment sits exactly one below the previous one (same request, deepest evicted first).
A Fenwick tree over requests counts "blocks whose latest touch is request k", so the cost is
one numpy gather per request plus O(log R) per segment: agentic traces, where every call
re-reads its history, have a handful of segments per request.

Reference path (:func:`stack_distances`, per reference, used to cross-check): lay each
request's blocks out deepest first in a flat stream (the shallowest block then counts as the
most recent). A block's position before request ``i`` (stream offset ``a``), last referenced
at offset ``p``, is ``1 + distinct(stream[p+1:a])``. With ``next(q)`` the next offset of the
id at ``q``::

    distinct(stream[p+1:a]) = #{q < a: next(q) >= a} - #{q <= p: next(q) >= a}
                            = first_seen(a) - (p + 1) + #{q <= p: next(q) < a}

The last term is a 2-D dominance count, computed for all queries at once with a dyadic
decomposition of ``[0, p]`` (one sort per level, vectorised with numpy): O(N log^2 N) in C.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentsim.replay.prefix import CanonicalTrace


@dataclass(slots=True)
class HitRatioCurve:
    """Hits at every capacity: ``hits_at[c]`` block hits with a cache of ``c`` blocks.

    ``hits_at`` has length ``unique_blocks + 1`` (capacity beyond ``unique_blocks`` changes
    nothing). Ratios use the replay definition: hit blocks / requested blocks.
    """

    hits_at: np.ndarray
    requested_blocks: int
    unique_blocks: int
    requests: int

    def hits(self, capacity_blocks: int) -> int:
        capacity = min(max(int(capacity_blocks), 0), len(self.hits_at) - 1)
        return int(self.hits_at[capacity])

    def hit_ratio(self, capacity_blocks: int) -> float:
        return self.hits(capacity_blocks) / self.requested_blocks if self.requested_blocks else 0.0

    @property
    def ideal_hit_ratio(self) -> float:
        return self.hit_ratio(self.unique_blocks)


def stack_distances(trace: CanonicalTrace) -> np.ndarray:
    """LRU stack position (1-based) of every block reference before its request; 0 for first use.

    Returned in the order of ``trace.ids`` (requests in order, each in depth order).
    """
    ids = trace.ids
    starts = trace.starts
    n = len(ids)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    lengths = np.diff(starts)
    request_of = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    # Flat stream: each request's blocks deepest first. Offset of depth-order element j of
    # request r in the stream: starts[r] + (starts[r+1] - 1 - j).
    depth_pos = np.arange(n, dtype=np.int64)
    stream_pos = starts[request_of] + (starts[request_of + 1] - 1 - depth_pos)
    stream = np.empty(n, dtype=np.int64)
    stream[stream_pos] = ids
    # prev/next occurrence of the same id in the stream.
    order = np.argsort(stream, kind="stable")
    same = stream[order[1:]] == stream[order[:-1]]
    next_pos = np.full(n, n, dtype=np.int64)
    prev_pos = np.full(n, -1, dtype=np.int64)
    next_pos[order[:-1][same]] = order[1:][same]
    prev_pos[order[1:][same]] = order[:-1][same]
    # first_seen[a] = distinct ids in stream[:a]
    first_seen = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(prev_pos < 0, out=first_seen[1:])
    request_start = np.repeat(starts[:-1], lengths)          # a, per stream offset (same per request)
    query = np.nonzero(prev_pos >= 0)[0]
    p = prev_pos[query]
    a = request_start[query]
    count = _dominance_count(next_pos, p + 1, a)
    position = first_seen[a] - (p + 1) + count + 1
    distances_stream = np.zeros(n, dtype=np.int64)
    distances_stream[query] = position
    return distances_stream[stream_pos]


def _dominance_count(values: np.ndarray, prefix_len: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """For each query i: #{q < prefix_len[i] : values[q] < bound[i]}, all at once.

    ``[0, prefix_len)`` splits into aligned blocks of size 2^k, one per set bit k; per level
    the values are sorted within their blocks and each query does one binary search.
    """
    n = len(values)
    result = np.zeros(len(prefix_len), dtype=np.int64)
    scale = np.int64(n + 2)  # values lie in [0, n]; keys block*scale + value never overlap
    positions = np.arange(n, dtype=np.int64)
    level = 0
    while (1 << level) <= n:
        mask = (prefix_len >> level) & 1
        selected = np.nonzero(mask)[0]
        if len(selected):
            size = 1 << level
            keys = np.sort((positions >> level) * scale + values)
            block = (prefix_len[selected] >> level) - 1
            found = np.searchsorted(keys, block * scale + bound[selected], side="left")
            result[selected] += found - block * size
        level += 1
    return result


def distance_histogram(trace: CanonicalTrace) -> np.ndarray:
    """``counts[d]``: block references at LRU stack position ``d`` (1-based) before their
    request; ``counts[0]`` = first references (misses at any capacity). Length ``unique + 1``.

    Same numbers as ``np.bincount(stack_distances(trace))``, by the segment method of the
    module docstring.
    """
    ids = trace.ids
    starts = trace.starts.tolist()
    unique = trace.unique_blocks
    n_requests = trace.requests
    last = np.full(unique + 1, -1, dtype=np.int64)
    # diff[d] += 1 ... diff[d + length] -= 1 for a segment at positions d .. d + length - 1.
    diff = np.zeros(unique + 3, dtype=np.int64)
    cold = 0
    tree = [0] * (n_requests + 1)  # Fenwick tree, 1-based: request k at slot k + 1

    def prefix(k: int) -> int:
        """Sum of counts of requests 0..k-1."""
        total = 0
        while k > 0:
            total += tree[k]
            k &= k - 1
        return total

    def add(k: int, delta: int) -> None:
        k += 1
        while k <= n_requests:
            tree[k] += delta
            k += k & -k

    for i in range(n_requests):
        a, b = starts[i], starts[i + 1]
        if a == b:
            continue
        block_ids = ids[a:b]
        prev = last[block_ids]
        change = np.flatnonzero(prev[1:] != prev[:-1]) + 1
        if len(change):
            bounds = [0, *change.tolist(), b - a]
            owners = prev[bounds[:-1]].tolist()
        else:
            bounds = [0, b - a]
            owners = [int(prev[0])]
        before_i = prefix(i)
        for s_index, r in enumerate(owners):
            length = bounds[s_index + 1] - bounds[s_index]
            if r < 0:
                cold += length
                continue
            position = 1 + before_i - prefix(r + 1)
            diff[position] += 1
            diff[position + length] -= 1
            add(r, -length)
        add(i, b - a)
        last[block_ids] = i
    counts = np.cumsum(diff[: unique + 1])
    counts[0] = cold
    return counts


def hit_ratio_curve(trace: CanonicalTrace) -> HitRatioCurve:
    """Hits at every capacity from 0 to ``unique_blocks`` blocks, in one pass."""
    counts = distance_histogram(trace)
    counts = counts.copy()
    counts[0] = 0
    hits_at = np.cumsum(counts)
    hits_at = hits_at[: trace.unique_blocks + 1]
    return HitRatioCurve(hits_at=hits_at, requested_blocks=trace.requested_blocks,
                         unique_blocks=trace.unique_blocks, requests=trace.requests)
