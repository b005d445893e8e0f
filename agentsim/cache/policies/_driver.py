"""A minimal sequential request driver over one RadixCache (cache-only replay, mode R).

Each request runs the cache's full flow at one instant: match (path-touch) -> pin the matched
prefix -> reserve room for the missing blocks (may evict, never the pinned prefix) -> commit
-> unpin. No two requests overlap, so the only pins are the current request's. Used by the
policy tests and usable by a cache-only replay command; the closed-loop engine drives the
cache itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from agentsim.cache.radix import RadixCache


@dataclass
class ReplayStats:
    requested_blocks: int = 0
    hit_blocks: int = 0
    missed_blocks: int = 0
    failed_requests: int = 0
    per_request_hits: list[int] = field(default_factory=list)

    @property
    def hit_ratio(self) -> float:
        return self.hit_blocks / self.requested_blocks if self.requested_blocks else 0.0


def run_request(cache: RadixCache, keys: Sequence[int], now_s: float) -> int | None:
    """Serve one request; returns its hit blocks, or None if room could not be made."""
    keys = list(keys)
    match = cache.match(keys, now_s)
    cache.pin(match.node)
    need = len(keys) - match.hit_blocks
    if need == 0:
        cache.unpin(match.node)
        return match.hit_blocks
    if not cache.reserve(need, now_s):
        cache.unpin(match.node)
        return None
    node = cache.commit(match.node, keys[match.hit_blocks:], match.hit_blocks, need, now_s)
    cache.unpin(node)
    return match.hit_blocks


def replay(cache: RadixCache, requests: Sequence[Sequence[int]], times_s: Sequence[float] | None = None,
           before_request: Callable[[int, float], None] | None = None,
           after_request: Callable[[int], None] | None = None) -> ReplayStats:
    """Serve ``requests`` (lists of block keys, root first) in order; times default to 0, 1, 2...

    ``before_request(i, now_s)`` runs before request ``i`` (e.g. ``policy.on_timer`` for TTL
    expiry or ``Belady.begin_request``); ``after_request(i)`` after it (invariant checks).
    """
    stats = ReplayStats()
    for i, keys in enumerate(requests):
        now_s = float(times_s[i]) if times_s is not None else float(i)
        if before_request is not None:
            before_request(i, now_s)
        hits = run_request(cache, keys, now_s)
        stats.requested_blocks += len(keys)
        if hits is None:
            stats.failed_requests += 1
            hits = 0
        stats.hit_blocks += hits
        stats.missed_blocks += len(keys) - hits
        stats.per_request_hits.append(hits)
        if after_request is not None:
            after_request(i)
    return stats
