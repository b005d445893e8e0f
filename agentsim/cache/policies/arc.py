"""ARC (Megiddo & Modha, FAST'03; policies spec section 3.6; libCacheSim ``ARC.c``).

T1 (runs seen once recently), T2 (seen at least twice), ghost lists B1/B2 of block keys and
an adaptive target ``p`` for T1, initially 0. A hit moves a run to T2 MRU. Missing blocks
found in B1 raise p by ``max(1, |B2| // |B1|)`` each (B2: lower p by ``max(1, |B1| // |B2|)``),
are removed from the ghost and inserted into T2; other blocks go to T1. Each eviction is one
REPLACE: evict the T1 LRU (into B1) if ``|T1| > p`` or (the pending block was a B2 hit and
``|T1| == p``), else the T2 LRU (into B2); before a full-miss REPLACE the ghosts are trimmed
so ``|T1| + |B1| <= c`` and the total stays within 2c, and when T1 alone fills the cache its
LRU is dropped without a ghost entry (libCacheSim's case A).
[sim-choice] Ghost hits adjust p at lookup, before the evictions made for the request (the
cache evicts before it inserts); sizes are in blocks and a REPLACE evicts a whole run (the
cache trims only what it needs). Caveat (spec): with path-touch, one repeat call makes an
agent's whole history "frequent". ``describe()`` reports |T1|, |T2| and p.
"""

from __future__ import annotations

from collections import deque

from agentsim.cache.registries import EVICTION_POLICIES
from agentsim.cache.policies._queues import Ghost, Queue, QueuePolicy, split_by_membership


@EVICTION_POLICIES.register("arc")
class ARC(QueuePolicy):
    """Adaptive replacement cache over runs."""

    def __init__(self, params=None):
        super().__init__(params)
        self.t1 = Queue("t1")
        self.t2 = Queue("t2")
        self.p = 0
        self._ghost_hits: set[int] = set()
        self._pending_b2: deque[bool] = deque()
        self._drop_without_ghost = None
        self._admitted_whole = False  # the last insert went to T1 whole (see restamp_is_noop)

    def bind(self, cache):
        super().bind(cache)
        self.c = cache.capacity_blocks
        # Ghost sizes are bounded by the REPLACE rules below (one ghost entry per eviction),
        # the Ghost capacities are only a safety net.
        self.b1 = Ghost(2 * self.c)
        self.b2 = Ghost(2 * self.c)

    def on_lookup(self, keys, hit_blocks, now_s):
        missing = keys[hit_blocks:]
        in_b1 = self.b1.members_of(missing)
        in_b2 = self.b2.members_of(missing)
        self._pending_b2 = deque()
        if not in_b1 and not in_b2:
            self._ghost_hits = set()
            return
        self._ghost_hits = hits = in_b1 | in_b2
        b1, b2 = self.b1, self.b2
        n1, n2 = len(b1), len(b2)
        p, c = self.p, self.c
        pending = self._pending_b2
        for key in reversed(missing):  # deepest first, as a per-block stream would see them
            if key not in hits:
                continue
            # p = min(p + max(n2 // n1, 1), c) and p = max(p - max(n1 // n2, 1), 0), spelled
            # with comparisons (two-argument min/max cost ~10x as much).
            if key in in_b1:  # membership as found before any removal; B1 first
                step = n2 // n1
                p += step if step > 1 else 1
                if p > c:
                    p = c
                n1 -= b1.remove(key)
                pending.append(False)
            else:
                step = n1 // n2
                p -= step if step > 1 else 1
                if p < 0:
                    p = 0
                n2 -= b2.remove(key)
                pending.append(True)
        self.p = p

    def _admit_new(self, node, now_s):
        hits = self._ghost_hits
        if not hits or hits.isdisjoint(node.keys):  # the common case, without the split machinery
            self._place(node, self.t1)
            self._admitted_whole = True
        else:
            self._admitted_whole = False
            for part, was_ghost in split_by_membership(self.cache, node, hits):
                if part.policy_data is None:
                    part.policy_data = type(node.policy_data)()
                self._place(part, self.t2 if was_ghost else self.t1)
        self._pending_b2.clear()

    def on_access(self, node, now_s, hit=False):
        # Overrides QueuePolicy.on_access, not its _on_touch hook: one frame less
        # (it runs twice per node of every path).
        entry = node.policy_data
        if entry is not None and entry.queue is not None:
            self._place(node, self.t2 if hit else entry.queue)

    def restamp_is_noop(self, node) -> bool:
        """Whether the insert's re-stamp in RadixCache.serve would change no order (see
        EvictionPolicy.restamp_is_noop); if so, renew the entries' versions as it would.

        The re-stamp moves each run of the path to its list's MRU end, new node first. The
        match of the same request just moved every run above the new node to T2's MRU end in
        that order, and nothing entered T2 since if the new node went to T1 whole (evictions
        place nothing): the runs are already in their re-stamped order, and so is the new node,
        T1's newest. The path is pinned, so the moves would push nothing, only renew versions.
        """
        if not self._admitted_whole:
            return False
        while node.parent is not None:
            entry = node.policy_data
            if entry is not None and entry.queue is not None:
                entry.ver += 1
            node = node.parent
        return True

    def _replace(self, in_b2: bool):
        t1 = self.t1.blocks
        if t1 > 0 and (t1 > self.p or (t1 == self.p and in_b2)):
            return self._front(self.t1) or self._front(self.t2)
        return self._front(self.t2) or self._front(self.t1)

    def _select(self, now_s):
        if self._pending_b2:
            return self._replace(self._pending_b2.popleft())
        c = self.c
        t1 = self.t1.blocks
        # The ghosts' OrderedDicts directly: len() of them without Ghost.__len__'s frame, and
        # "trim to one less" is dropping the oldest key, if any.
        b1 = self.b1._member
        if t1 + len(b1) + 1 > c:
            if t1 < c:
                if b1:
                    b1.popitem(False)
                return self._replace(False)
            node = self._front(self.t1) or self._front(self.t2)
            self._drop_without_ghost = node
            return node
        b2 = self.b2._member
        if t1 + self.t2.blocks + len(b1) + len(b2) >= 2 * c and b2:
            b2.popitem(False)
        return self._replace(False)

    def _on_removed(self, node, keys, queue, reason):
        if self._drop_without_ghost is node:
            self._drop_without_ghost = None
            return
        if queue is self.t1:
            self.b1.add(keys)
        elif queue is self.t2:
            self.b2.add(keys)

    def _eviction_order(self):
        return [self.t1, self.t2] if self.t1.blocks > self.p else [self.t2, self.t1]

    def state_bytes(self):
        return self.b1.state_bytes() + self.b2.state_bytes()

    def describe(self):
        out = super().describe()
        out.update(t1_blocks=self.t1.blocks, t2_blocks=self.t2.blocks, p_blocks=self.p)
        return out
