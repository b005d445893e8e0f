"""S3-FIFO (Yang et al., SOSP'23; policies spec section 3.8; libCacheSim ``S3FIFO.c``).

Queues: small FIFO S (``small_ratio`` of capacity), main FIFO M (the rest), ghost FIFO G of
block keys (``ghost_ratio`` of capacity). A hit adds 1 to a run's ``freq``; nothing moves.
A missing block found in G is removed from G and inserted into M, otherwise into S (before
the first eviction, an insert that finds S full goes to M, as libCacheSim does). Eviction
takes from M if M is over its size or S is empty, else from S: the S tail moves to M (freq
reset) if ``freq >= move_to_main_threshold``, else it is evicted and its keys enter G; the M
tail is reinserted with ``freq = min(freq, 3) - 1`` if ``freq >= 1``, else evicted.
``move_to_main_threshold`` defaults to 1 (the paper's prose); 2 is the libCacheSim/LMCache
setting used by the cross-check. Ghost membership is per block: a re-inserted run that is
partly in G is split so each part goes to its own queue.
"""

from __future__ import annotations

from pydantic import Field

from agentsim.cache.registries import EVICTION_POLICIES
from agentsim.cache.policies._queues import (Ghost, Queue, QueueParams, QueuePolicy, split_by_membership)


class S3FIFOParams(QueueParams):
    small_ratio: float = Field(0.1, gt=0, lt=1, description="small FIFO size as a fraction of capacity")
    ghost_ratio: float = Field(0.9, ge=0, description="ghost FIFO size as a fraction of capacity")
    move_to_main_threshold: int = Field(1, ge=1, le=3, description="hits in S that move a run to M (2 = libCacheSim)")


@EVICTION_POLICIES.register("s3fifo")
class S3FIFO(QueuePolicy):
    """Small/main/ghost FIFOs with quick demotion of one-hit runs."""

    Params = S3FIFOParams
    restamp_notifies = False  # only hits count (see on_access)

    def __init__(self, params=None):
        super().__init__(params)
        self.small = Queue("small")
        self.main = Queue("main")
        self.ghost: Ghost | None = None
        self._ghost_hits: set[int] = set()
        self._has_evicted = False

    def bind(self, cache):
        super().bind(cache)
        cap = cache.capacity_blocks
        self.small_cap = int(cap * self.params.small_ratio)
        self.main_cap = cap - self.small_cap
        self.ghost = Ghost(int(cap * self.params.ghost_ratio))

    def on_lookup(self, keys, hit_blocks, now_s):
        self._ghost_hits = self.ghost.members_of(keys[hit_blocks:])
        if self._ghost_hits:
            self.ghost.discard(self._ghost_hits)

    def _admit_new(self, node, now_s):
        hits = self._ghost_hits
        if not hits or hits.isdisjoint(node.keys):  # the common case, without the split machinery
            node.policy_data.freq = 0
            if not self._has_evicted and self.small.blocks >= self.small_cap:
                self._place(node, self.main)
            else:
                self._place(node, self.small)
            return
        for part, was_ghost in split_by_membership(self.cache, node, hits):
            if part.policy_data is None:
                part.policy_data = type(node.policy_data)()
            part.policy_data.freq = 0
            if was_ghost:
                self._place(part, self.main)
            elif not self._has_evicted and self.small.blocks >= self.small_cap:
                self._place(part, self.main)
            else:
                self._place(part, self.small)

    def on_access(self, node, now_s, hit=False):
        # Overrides QueuePolicy.on_access, not its _on_touch hook: one frame less
        # (it runs for every node of every path).
        if hit:
            entry = node.policy_data
            if entry is not None and entry.queue is not None:
                entry.freq += 1

    def _select(self, now_s):
        self._has_evicted = True
        threshold = self.params.move_to_main_threshold
        if self.main.blocks > self.main_cap or self.small.blocks == 0:
            node = self._evict_main() or self._evict_small(threshold)
        else:
            node = self._evict_small(threshold) or self._evict_main()
        if node is None:
            # Every eligible run of S had been hit enough to move to M (and M had no eligible
            # run before they moved): they are in M now, with freq 0, so M yields a victim.
            # Without this second look a reservation failed while evictable runs existed.
            node = self._evict_main()
        return node

    def _evict_small(self, threshold):
        while True:
            node = self._front(self.small)
            if node is None:
                return None
            entry = node.policy_data
            if entry.freq >= threshold:
                entry.freq = 0
                self._place(node, self.main)
                continue
            return node

    def _evict_main(self):
        while True:
            node = self._front(self.main)
            if node is None:
                return None
            entry = node.policy_data
            if entry.freq >= 1:
                entry.freq = (entry.freq if entry.freq < 3 else 3) - 1  # min(freq, 3) - 1, without min()
                self._place(node, self.main)
                continue
            return node

    def _on_removed(self, node, keys, queue, reason):
        if queue is self.small:
            self.ghost.add(keys)

    def _eviction_order(self):
        return [self.small, self.main]

    def state_bytes(self):
        return self.ghost.state_bytes() if self.ghost else 0
