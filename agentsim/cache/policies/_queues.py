"""Shared machinery for queue-based policies (FIFO, SLRU, 2Q, ARC, S3-FIFO, SIEVE, W-TinyLFU, vLLM).

One *entry* per radix node (a run of blocks that is always inserted and touched together).
Queue order is a position key ``(seq, -start_block, node_id)``: ``seq`` grows with every
insert or move, and the cache path-touches deepest node first, so deeper runs get smaller
``seq`` and are evicted first, exactly as a per-block queue fed deepest block first would.
When the cache splits a node, both parts keep the seq and the deeper part stays first, so
the upper part takes over the position of the trimmed tail (policies spec section 3).

Each queue counts the blocks of all its members, but its lazy min-heap holds only members
that were *eligible* when pushed; ineligible ones are discarded when they surface and pushed
back when the cache reports them eligible again (``on_candidate`` / ``on_release``). So a
skipped entry's policy state is never mutated (the ``leaf_only`` rule of section 1.4) and
every operation is O(log n) per node, never a scan of ineligible entries.

Tree modes (``tree_mode`` parameter, section 1.4):
* ``leaf_only`` (default): eligible = evictable leaf (unpinned, childless).
* ``cascade``: eligible = unpinned. When the policy decides to evict a node with resident
  children, the cache is given the deepest-first leaves of its subtree one at a time and the
  node keeps its queue position until it is itself a leaf (a lazy cascade: eviction stops as
  soon as the requested room is free, so a cascade may finish in a later eviction).
  An unpinned node has no pinned descendant (pins cover whole paths), so the subtree is free.
* ``flat``: eligible = unpinned; the node itself is evicted even with children, which the
  cache then counts as orphans (resident, unreachable, never a hit).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from itertools import repeat
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agentsim.cache.policy import EvictionPolicy

TreeMode = Literal["leaf_only", "cascade", "flat"]


class QueueParams(BaseModel):
    """Parameters shared by every queue-based policy."""

    model_config = ConfigDict(extra="forbid")
    tree_mode: TreeMode = Field("leaf_only", description="leaf_only | cascade | flat (policies spec 1.4)")


class Entry:
    """Per-node policy state: queue membership, position key and small policy fields."""

    __slots__ = ("queue", "key", "ver", "pushed", "freq", "flag")

    def __init__(self):
        self.queue: Queue | None = None
        self.key: tuple = ()
        self.ver = 0
        #: The ``ver`` of this entry's newest heap push: equal to ``ver`` while the queue's heap
        #: holds the entry's current ``(key, ver)`` (every change of key or state bumps ``ver``).
        self.pushed = -1
        self.freq = 0
        self.flag = False


class Queue:
    """One ordered segment: ``blocks`` counts all members, ``heap`` eligible ones (lazily)."""

    __slots__ = ("name", "heap", "blocks")

    def __init__(self, name: str):
        self.name = name
        self.heap: list = []
        self.blocks = 0


class Ghost:
    """A FIFO of evicted block keys bounded in blocks (ARC's B1/B2, 2Q's A1out, S3-FIFO's G).

    Keys are stored per block because a re-inserted run may overlap an evicted one only in
    part. The FIFO is an ``OrderedDict`` in insertion order: adding a batch appends its keys
    not yet present (a present key keeps its place), and trimming pops from the old end in O(1)
    per key (a plain dict would rescan its deleted front entries).
    """

    def __init__(self, capacity_blocks: int):
        self.capacity_blocks = max(0, int(capacity_blocks))
        self._member: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._member)

    @property
    def blocks(self) -> int:
        return len(self._member)

    def add(self, keys: list[int]) -> None:
        if self.capacity_blocks == 0 or not keys:
            return
        member = self._member
        for key in keys:  # faster than OrderedDict.update; a present key keeps its place
            member[key] = None
        excess = len(member) - self.capacity_blocks
        if excess == 1:  # trim(capacity_blocks), inlined for its most frequent case
            member.popitem(False)
        elif excess > 1:
            deque(map(member.popitem, repeat(False, excess)), maxlen=0)

    def trim(self, limit_blocks: int) -> None:
        """Drop the oldest keys (of a batch, the deepest: evicted first) down to ``limit_blocks``."""
        member = self._member
        excess = len(member) - (limit_blocks if limit_blocks > 0 else 0)
        if excess == 1:
            member.popitem(False)
        elif excess > 1:  # popitem(False) called ``excess`` times from C, no bytecode per key
            deque(map(member.popitem, repeat(False, excess)), maxlen=0)

    def discard(self, keys) -> None:
        pop = self._member.pop
        for k in keys:
            pop(k, None)

    def remove(self, key: int) -> bool:
        """Drop ``key``; True if it was a member."""
        return self._member.pop(key, _ABSENT) is not _ABSENT

    def __contains__(self, key: int) -> bool:
        return key in self._member

    def any_of(self, keys: list[int]) -> bool:
        return bool(self._member) and not self._member.keys().isdisjoint(keys)

    def members_of(self, keys: list[int]) -> set[int]:
        """The members among ``keys`` (one C-level intersection)."""
        return self._member.keys() & keys if self._member else set()

    def state_bytes(self) -> int:
        return 16 * len(self._member)


_ABSENT = object()


class QueuePolicy(EvictionPolicy):
    """Base for queue policies; subclasses implement :meth:`_admit_new`, :meth:`_on_touch` and :meth:`_select`."""

    Params = QueueParams

    def __init__(self, params=None):
        super().__init__(params)
        self.mode: str = self.params.tree_mode
        self.allows_orphans = self.mode == "flat"
        self._leaf_only = self.mode == "leaf_only"
        # Trimming a leaf in place keeps its position key (seq, -start_block) exactly as the
        # split's upper part would, and node ids never decide the queue order (parts of one
        # run have distinct start blocks). Not in ``cascade`` mode: its descent breaks ties
        # between siblings by node id, which a split renews and an in-place trim does not.
        self.trim_in_place = self.mode != "cascade"
        # A policy whose path-touch does nothing (FIFO, vLLM) needs no per-node notifications.
        cls = type(self)
        if cls.on_access is QueuePolicy.on_access and cls._on_touch is QueuePolicy._on_touch:
            self.access_leaf_only = self.access_evictable_only = True
        # In leaf_only mode on_release does nothing (a released node is offered again through
        # on_candidate once it is a leaf): expose the base class's no-op, which the cache (and a
        # wrapper that forwards to this policy) then skips instead of calling it per node.
        if self._leaf_only and cls.on_release is QueuePolicy.on_release:
            self.on_release = EvictionPolicy.on_release.__get__(self)
        self._seq = 0
        self.skipped_entries = 0  # ineligible entries passed over (spec: report the skip count)

    # --- capacity helpers -----------------------------------------------------------------
    @property
    def capacity_blocks(self) -> int:
        return self.cache.capacity_blocks

    # --- eligibility and queue primitives ---------------------------------------------------
    # The hot paths below inline this rule (they run for every notification and heap pop).
    def _eligible(self, node) -> bool:
        if not node.alive or node.lock_ref or node.parent is None:
            return False
        return not self._leaf_only or not node.children

    def _push(self, node) -> None:
        # Heap items are flat, (seq, -start_block, node_id, ver, node): the same order as
        # (key, ver, node) with cheaper comparisons.
        entry = node.policy_data
        entry.ver += 1
        entry.pushed = ver = entry.ver
        seq, neg_start, node_id = entry.key
        heapq.heappush(entry.queue.heap, (seq, neg_start, node_id, ver, node))

    def _push_if_eligible(self, node) -> None:
        entry = node.policy_data
        # An entry whose current (key, ver) is already in the heap is not pushed again (vLLM's
        # release then candidate notifications): the duplicate would rank the same.
        if (entry is not None and entry.queue is not None and entry.pushed != entry.ver and node.alive
                and not node.lock_ref and node.parent is not None and not (self._leaf_only and node.children)):
            self._push(node)

    def _place(self, node, queue: Queue) -> None:
        """Make ``node`` the newest member of ``queue`` (insert, move to MRU/head, or migrate)."""
        entry = node.policy_data
        n = len(node.keys)
        if entry.queue is not None:
            entry.queue.blocks -= n
        queue.blocks += n
        entry.queue = queue
        self._seq += 1
        entry.key = (self._seq, -node.start_block, node.node_id)
        if (node.alive and not node.lock_ref and node.parent is not None
                and not (self._leaf_only and node.children)):
            self._push(node)
        else:
            entry.ver += 1

    def _front(self, queue: Queue):
        """Oldest eligible member of ``queue`` (not removed), or None."""
        heap = queue.heap
        heappop = heapq.heappop
        leaf_only = self._leaf_only
        while heap:
            item = heap[0]
            node = item[4]
            entry = node.policy_data
            if entry is None or entry.queue is not queue or entry.ver != item[3] or not node.alive:
                heappop(heap)
                continue
            if node.lock_ref or node.parent is None or (leaf_only and node.children):  # not eligible
                heappop(heap)
                entry.ver += 1
                self.skipped_entries += 1
                continue
            return node
        return None

    def _detach(self, node) -> Queue | None:
        entry = node.policy_data
        queue = entry.queue
        if queue is not None:
            queue.blocks -= len(node.keys)
            entry.queue = None
            entry.ver += 1
        return queue

    # --- cache notifications ------------------------------------------------------------
    def on_insert(self, node, now_s):
        node.policy_data = Entry()
        self._admit_new(node, now_s)

    def on_access(self, node, now_s, hit=False):
        if node.policy_data is not None and node.policy_data.queue is not None:
            self._on_touch(node, hit, now_s)

    def on_candidate(self, node):
        # _push_if_eligible with the heap push inlined (it runs after every eviction and unpin);
        # a policy with its own _push (SIEVE) overrides this hook too.
        entry = node.policy_data
        if (entry is not None and entry.queue is not None and entry.pushed != entry.ver and node.alive
                and not node.lock_ref and node.parent is not None and not (self._leaf_only and node.children)):
            entry.ver = entry.pushed = ver = entry.ver + 1
            seq, neg_start, node_id = entry.key
            heapq.heappush(entry.queue.heap, (seq, neg_start, node_id, ver, node))

    def on_release(self, node):
        if self.mode != "leaf_only":
            self._push_if_eligible(node)

    def on_split(self, upper, lower):
        entry = lower.policy_data
        if entry is None:  # split of a node being inserted (before on_insert finished)
            return
        copy = Entry()
        copy.queue, copy.freq, copy.flag = entry.queue, entry.freq, entry.flag
        upper.policy_data = copy
        if entry.queue is None:
            return
        seq = entry.key[0]
        entry.key = (seq, -lower.start_block, lower.node_id)
        copy.key = (seq, -upper.start_block, upper.node_id)
        for node in (lower, upper):
            if self._eligible(node):
                self._push(node)
            else:
                node.policy_data.ver += 1

    def on_remove(self, node, blocks, reason):
        entry = node.policy_data
        if entry is None:
            return
        if node.alive:
            # Trimmed in place (``trim_in_place``): the node keeps its queue and position, minus
            # its last ``blocks`` blocks; the cache re-offers it through ``on_candidate``.
            queue = entry.queue
            if queue is not None:
                queue.blocks -= blocks
            self._on_trimmed(node, blocks)
            self._on_removed(node, node.keys[-blocks:], queue, reason)
            return
        queue = entry.queue  # _detach, inlined
        if queue is not None:
            queue.blocks -= len(node.keys)
            entry.queue = None
            entry.ver += 1
        self._on_removed(node, node.keys, queue, reason)

    # --- the decision ---------------------------------------------------------------------
    def pop_victim(self, now_s):
        node = self._select(now_s)
        if node is None:
            return None
        if node.children and self.mode == "cascade":
            self._push(node)  # keep the cascade root at its position until it is a leaf
            while node.children:
                node = max(node.children.values(), key=_subtree_depth_key)
            return node
        node.policy_data.ver += 1  # a partial trim re-pushes the remainder through on_split
        return node

    def peek_victim(self):
        for queue in self._eviction_order():
            node = self._front(queue)
            if node is not None:
                return node
        return None

    # --- subclass interface ---------------------------------------------------------------
    def _admit_new(self, node, now_s) -> None:
        raise NotImplementedError

    def _on_touch(self, node, hit: bool, now_s: float) -> None:
        """A path-touch of a member; ``hit`` distinguishes reuse from an insert's re-stamp.
        Policies on the hot path override :meth:`on_access` instead (one frame less per node of
        every touched path), doing the member check themselves."""

    def _on_removed(self, node, keys: list[int], queue: Queue | None, reason: str) -> None:
        """Blocks ``keys`` of ``node`` (all of it, or its tail if trimmed in place) left the
        cache from ``queue`` (ghost bookkeeping)."""

    def _on_trimmed(self, node, blocks: int) -> None:
        """``node`` is about to lose its last ``blocks`` blocks in place (it stays a member);
        the counterpart of :meth:`on_split` for the part that remains."""

    def _select(self, now_s: float):
        """Run the policy's eviction step and return the member to evict (or None)."""
        raise NotImplementedError

    def _eviction_order(self) -> list[Queue]:
        return []

    def describe(self):
        out = super().describe()
        out["skipped_entries"] = self.skipped_entries
        return out


def _subtree_depth_key(node):
    """Cascade descent: the child reaching deepest first (deepest blocks go first), then newest."""
    return (node.end_block, node.node_id)


def ratio_blocks(capacity_blocks: int, ratio: float) -> int:
    """``ratio`` of the capacity in whole blocks (at least 1 when ratio > 0)."""
    if ratio <= 0:
        return 0
    return max(1, int(round(capacity_blocks * ratio)))


def split_by_membership(cache, node, members) -> list[tuple[object, bool]]:
    """Split a freshly inserted run into maximal parts of equal membership in ``members``.

    Returns ``(part, is_member)`` pairs deepest part first (the order a per-block queue fed
    deepest block first would see them). Used for ghost hits on part of a re-inserted run.
    """
    keys = node.keys
    if not members or members.isdisjoint(keys):
        return [(node, False)]
    flags = [k in members for k in keys]
    cuts = [i for i in range(1, len(flags)) if flags[i] != flags[i - 1]]
    parts = []
    start = 0
    for cut in cuts:  # split off the upper parts, root side first; ``node`` keeps the tail
        upper = cache.split(node, cut - start)
        parts.append((upper, flags[start]))
        start = cut
    parts.append((node, flags[start]))
    parts.reverse()
    return parts
