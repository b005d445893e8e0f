"""LRU over radix leaves with path-touch (SGLang ``lru``; policies spec sections 1.6 and 3.1).

Every match or insert stamps the whole root-to-leaf path with one timestamp, so a parent is
never older than its children and evicting the oldest evictable leaf is global block LRU with
ties broken deepest first, then by creation order.
"""

from __future__ import annotations

from agentsim.cache.registries import EVICTION_POLICIES
from agentsim.cache.policy import KeyedLeafPolicy


@EVICTION_POLICIES.register("lru")
class LRU(KeyedLeafPolicy):
    """Least recently used leaf first; ties deepest first, then oldest node."""

    merge_runs = True
    trim_in_place = True

    def key(self, node):
        return (node.last_access_s, -(node.start_block + len(node.keys)))  # -end_block, without the property call

    def bind(self, cache) -> None:
        super().bind(cache)
        from agentsim.cache.residency import Tier

        if isinstance(cache, Tier):
            # A tier's policy ranks TierEntry proxies, whose node fields are properties: read
            # the node's own (the same key, without three property calls per push: a day of
            # the rack pushes a few dozen entries per request as its lower tiers fill).
            self.key = _entry_key


def _entry_key(entry):
    node = entry.node
    return (node.last_access_s, -(node.start_block + len(node.keys)))
