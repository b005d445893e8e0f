"""Classic segmented LRU (policies spec section 3.5).

Two LRU segments: *probation* and *protected* (``protected_fraction`` of the capacity, 0.8).
New runs enter probation; a run hit ``promote_hits`` times while in probation (1 = classic)
moves to protected MRU; protected overflow demotes its LRU run to probation MRU. Victims come
from the probation LRU end, then from protected. ``promote_hits = null`` (K = infinity) never
promotes, which is exactly LRU. An insert's path re-stamp moves a run to the MRU end of its
own segment without counting as a hit. [sim-choice] Demotion moves whole runs and only
eligible ones (a pinned run is in use, so it is not the LRU of its segment in practice).
Contrast: SGLang's threshold ``slru`` strategy has no segment cap (spec section 2.2).
"""

from __future__ import annotations

from pydantic import Field

from agentsim.cache.registries import EVICTION_POLICIES
from agentsim.cache.policies._queues import Queue, QueueParams, QueuePolicy


class SLRUParams(QueueParams):
    protected_fraction: float = Field(0.8, ge=0, le=1, description="protected segment size as a fraction of capacity")
    promote_hits: int | None = Field(1, ge=1, description="hits in probation that promote a run (null = never: LRU)")


@EVICTION_POLICIES.register("slru")
class SLRU(QueuePolicy):
    """Probation + protected LRU segments."""

    Params = SLRUParams

    def __init__(self, params=None):
        super().__init__(params)
        self.probation = Queue("probation")
        self.protected = Queue("protected")

    def _admit_new(self, node, now_s):
        self._place(node, self.probation)

    def _on_touch(self, node, hit, now_s):
        entry = node.policy_data
        if entry.queue is self.probation and hit and self.params.promote_hits is not None:
            entry.freq += 1
            if entry.freq >= self.params.promote_hits:
                entry.freq = 0
                self._place(node, self.protected)
                self._rebalance()
                return
        self._place(node, entry.queue)

    def _rebalance(self):
        limit = int(self.capacity_blocks * self.params.protected_fraction)
        while self.protected.blocks > limit:
            node = self._front(self.protected)
            if node is None:
                return
            self._place(node, self.probation)

    def _select(self, now_s):
        return self._front(self.probation) or self._front(self.protected)

    def _eviction_order(self):
        return [self.probation, self.protected]
