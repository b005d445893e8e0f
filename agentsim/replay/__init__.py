"""Trace replay without the engine: cache-only hit ratios and one-pass LRU hit-ratio curves.

* :func:`replay_cache_only` - requests in order through one radix cache with any registered
  eviction policy (hit ratio = hit blocks / requested blocks; longest resident prefix).
* :func:`hit_ratio_curve` - LRU hits at every capacity from stack distances (exact for the
  prefix LRU that :func:`replay_cache_only` runs with ``policy="lru"``).
* :func:`canonicalize` - distinct prefix blocks, ideal (unbounded) hits.

Timed replays (open-loop, closed-loop) live in :mod:`agentsim.replay.timed` when built.
"""

from agentsim.replay.cache_only import CacheOnlyResult, make_policy, replay_cache_only, resolve_capacity
from agentsim.replay.mrc import HitRatioCurve, distance_histogram, hit_ratio_curve, stack_distances
from agentsim.replay.prefix import CanonicalTrace, canonicalize

__all__ = [
    "CacheOnlyResult", "CanonicalTrace", "HitRatioCurve", "canonicalize", "distance_histogram", "hit_ratio_curve",
    "make_policy", "replay_cache_only", "resolve_capacity", "stack_distances",
]
