"""vLLM's free-queue LRU (policies spec section 2.1): release-time recency, tail first.

A run enters the free queue when its pin count drops to 0 (``on_release``), appended at the
tail; a request's runs are released deepest first, so its tail blocks are evicted first.
Victims come from the head. Matching does not reorder (vLLM only "touches" blocks it
allocates, which the cache expresses as a pin). The default tree mode is ``flat`` (vLLM's
block pool does not enforce prefix closure): evicting a run with resident descendants
orphans them, and the cache counts ``orphan_blocks``.
"""

from __future__ import annotations

from pydantic import Field

from agentsim.cache.registries import EVICTION_POLICIES
from agentsim.cache.policies._queues import Queue, QueueParams, QueuePolicy, TreeMode


class VLLMParams(QueueParams):
    tree_mode: TreeMode = Field("flat", description="flat (vLLM) | leaf_only | cascade")


@EVICTION_POLICIES.register("vllm_lru")
class VLLMFreeQueueLRU(QueuePolicy):
    """Least recently *released* run first."""

    Params = VLLMParams

    def __init__(self, params=None):
        super().__init__(params)
        self.queue = Queue("free")

    def _admit_new(self, node, now_s):
        self._place(node, self.queue)

    def on_release(self, node):
        entry = node.policy_data
        if entry is not None and entry.queue is not None:
            self._place(node, self.queue)

    def _select(self, now_s):
        return self._front(self.queue)

    def _eviction_order(self):
        return [self.queue]
