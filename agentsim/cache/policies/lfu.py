"""In-cache LFU (policies spec section 3.4; SGLang ``lfu`` strategy).

Key ``(hit_count, last_access_s, deepest first, node id)``: the fewest hits first, ties by
recency. ``hit_count`` is the cache's per-node counter: +1 for every match that found the node
(spec 2.2 [sim-choice]), inherited by both parts of a split, forgotten on eviction ("in-cache"
LFU, as SGLang and LMCache do). Under path-touch a parent's count is at least each child's,
so the order stays prefix-monotone. With all counts equal it is exactly ``lru``.
"""

from __future__ import annotations

from agentsim.cache.registries import EVICTION_POLICIES
from agentsim.cache.policy import KeyedLeafPolicy


@EVICTION_POLICIES.register("lfu")
class LFU(KeyedLeafPolicy):
    """Least frequently hit leaf first, then least recently used."""

    trim_in_place = True  # key-only state: a shortened leaf is simply re-keyed

    def key(self, node):
        return (node.hit_count, node.last_access_s, -node.end_block)
