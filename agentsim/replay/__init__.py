"""Trace replay without the engine: cache-only hit ratios and one-pass LRU hit-ratio curves.

* :func:`replay_cache_only` - requests in order through one radix cache with any registered
  eviction policy (hit ratio = hit blocks / requested blocks; longest resident prefix).
* :func:`hit_ratio_curve` - LRU hits at every capacity from stack distances (exact for the
  prefix LRU that :func:`replay_cache_only` runs with ``policy="lru"``).
* :func:`canonicalize` - distinct prefix blocks, ideal (unbounded) hits.

Timed replays (open-loop, closed-loop) live in :mod:`agentsim.replay.timed` when built.
"""

import importlib

# Names are imported from their modules on first use: a cache-only replay does not import the
# curve code (numpy) it does not run.
_EXPORTS = {
    "CacheOnlyResult": "cache_only", "make_policy": "cache_only", "replay_cache_only": "cache_only",
    "resolve_capacity": "cache_only", "HitRatioCurve": "mrc", "distance_histogram": "mrc",
    "hit_ratio_curve": "mrc", "stack_distances": "mrc", "CanonicalTrace": "prefix", "canonicalize": "prefix",
    "prefix_block_counts": "prefix",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"agentsim.replay.{module}"), name)
    globals()[name] = value
    return value


__all__ = sorted(_EXPORTS)
