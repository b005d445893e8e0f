"""FIFO (policies spec section 3.2): evict the oldest inserted run; hits change nothing.

SGLang's ``fifo`` strategy is the ``leaf_only`` mode (oldest evictable leaf by creation);
``flat`` reproduces a block-pool FIFO that ignores the tree (libCacheSim ``FIFO``).
"""

from __future__ import annotations

from agentsim.cache.registries import EVICTION_POLICIES
from agentsim.cache.policies._queues import Queue, QueuePolicy


@EVICTION_POLICIES.register("fifo")
class FIFO(QueuePolicy):
    """First in, first out over runs (deepest run of one insert first)."""

    def __init__(self, params=None):
        super().__init__(params)
        self.queue = Queue("fifo")

    def _admit_new(self, node, now_s):
        self._place(node, self.queue)

    def _select(self, now_s):
        return self._front(self.queue)

    def _eviction_order(self):
        return [self.queue]
