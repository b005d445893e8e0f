"""2Q, full version (Johnson & Shasha, VLDB'94; policies spec section 3.7; libCacheSim ``TwoQ.c``).

A1in: FIFO of new runs (``in_ratio`` = Kin, 25% of capacity). A1out: ghost FIFO of block keys
evicted from A1in (``out_ratio`` = Kout, 50%). Am: LRU of runs re-referenced after leaving
A1in. A hit in Am moves the run to MRU; a hit in A1in changes nothing (correlated
references). A missing block found in A1out is inserted into Am, otherwise into A1in.
Reclaim: from A1in if it holds more than Kin blocks, else from Am (the other queue if the
chosen one has no eligible run). A1in's oldest entry is often a conversation root, so
``tree_mode: cascade`` is worth comparing (spec 3.7).
"""

from __future__ import annotations

from pydantic import Field

from agentsim.cache.registries import EVICTION_POLICIES
from agentsim.cache.policies._queues import Ghost, Queue, QueueParams, QueuePolicy, split_by_membership


class TwoQParams(QueueParams):
    in_ratio: float = Field(0.25, gt=0, le=1, description="Kin: A1in size as a fraction of capacity")
    out_ratio: float = Field(0.5, ge=0, description="Kout: A1out ghost size as a fraction of capacity")


@EVICTION_POLICIES.register("twoq")
class TwoQ(QueuePolicy):
    """A1in FIFO + A1out ghost + Am LRU."""

    Params = TwoQParams

    def __init__(self, params=None):
        super().__init__(params)
        self.a1in = Queue("a1in")
        self.am = Queue("am")
        self.a1out: Ghost | None = None
        self._ghost_hits: set[int] = set()
        self._admitted_whole = False  # the last insert went to A1in whole (see restamp_is_noop)

    def bind(self, cache):
        super().bind(cache)
        self.kin = int(cache.capacity_blocks * self.params.in_ratio)
        self.a1out = Ghost(int(cache.capacity_blocks * self.params.out_ratio))

    def on_lookup(self, keys, hit_blocks, now_s):
        self._ghost_hits = self.a1out.members_of(keys[hit_blocks:])
        if self._ghost_hits:
            self.a1out.discard(self._ghost_hits)

    def _admit_new(self, node, now_s):
        hits = self._ghost_hits
        if not hits or hits.isdisjoint(node.keys):  # the common case, without the split machinery
            self._place(node, self.a1in)
            self._admitted_whole = True
            return
        self._admitted_whole = False
        for part, was_ghost in split_by_membership(self.cache, node, hits):
            if part.policy_data is None:
                part.policy_data = type(node.policy_data)()
            self._place(part, self.am if was_ghost else self.a1in)

    def on_access(self, node, now_s, hit=False):
        # Overrides QueuePolicy.on_access, not its _on_touch hook: one frame less
        # (it runs twice per node of every path).
        entry = node.policy_data
        if entry is not None and entry.queue is self.am:
            self._place(node, self.am)

    def restamp_is_noop(self, node) -> bool:
        """Whether the insert's re-stamp in RadixCache.serve would change no order (see
        EvictionPolicy.restamp_is_noop); if so, renew the entries' versions as it would.

        The re-stamp moves each Am run of the path to Am's MRU end, new node first; an A1in
        run does not move. The match of the same request just moved the path's Am runs there
        in that order, and nothing entered Am since if the new node went to A1in whole
        (evictions place nothing): the runs are already in their re-stamped order. The path is
        pinned, so the moves would push nothing, only renew versions.
        """
        if not self._admitted_whole:
            return False
        am = self.am
        while node.parent is not None:
            entry = node.policy_data
            if entry is not None and entry.queue is am:
                entry.ver += 1
            node = node.parent
        return True

    def _select(self, now_s):
        if self.a1in.blocks > self.kin:
            return self._front(self.a1in) or self._front(self.am)
        return self._front(self.am) or self._front(self.a1in)

    def _on_removed(self, node, keys, queue, reason):
        if queue is self.a1in:
            self.a1out.add(keys)

    def _eviction_order(self):
        return [self.a1in, self.am] if self.a1in.blocks > self.kin else [self.am, self.a1in]

    def state_bytes(self):
        return self.a1out.state_bytes() if self.a1out else 0
