"""Belady / MIN, the offline optimum (policies spec section 3.13).

Evicts the evictable run whose deepest block is next used furthest in the future (never used
again = infinity); ties: deepest first, then the newest node. Under the tree property a
child's next use is never earlier than its parent's, and a run's deepest block has the
latest next use of the run, so restricting MIN to evictable leaves loses nothing.

Feeding the future (the replay helper's API):
* ``policy.set_future(requests)`` with the whole request sequence, each a sequence of block
  keys (a list, or a trace request's ``array("q")``; root first), builds a next-use index
  (key -> sorted request positions; ``_next_use``), O(total blocks);
* ``policy.begin_request(i)`` before serving request ``i`` (0-based); next use is counted
  strictly after the current request, so the request's own blocks (pinned anyway) never
  count as their own next use.
Keys only change when a run's deepest block is used, which path-touches the run, so the lazy
heap stays exact. The clairvoyant closed-loop variant (agent-oracle, spec 3.13 b) can feed
the same index with the requests in pre-sampled order. Without a future every run has next
use infinity and the policy degrades to "deepest, newest first" (documented, not useful).
"""

from __future__ import annotations

import bisect
import heapq
from typing import Sequence

from agentsim.cache.registries import EVICTION_POLICIES
from agentsim.cache.policies._next_use import build_index
from agentsim.cache.policy import KeyedLeafPolicy

NEVER = float("inf")
#: The heap key's first element for "never used again": an int below every ``-position``, not
#: ``-NEVER``: the same order, and the heap's comparisons stay int against int (a float
#: against an int costs CPython a mixed-type comparison on every sift).
_NEVER_KEY = -(1 << 62)


@EVICTION_POLICIES.register("belady")
class Belady(KeyedLeafPolicy):
    """Furthest next use first (offline; needs ``set_future``)."""

    # A partly evicted leaf is shortened in place and re-keyed (its deepest block changed);
    # its fresh node id keeps the "newest first" tie-break of the split it replaces.
    trim_in_place = True
    trim_renews_id = True

    def __init__(self, params=None):
        super().__init__(params)
        self._slot: dict[int, int] | None = {}
        self._bounds: list[int] = [0]
        self._positions: list[int] = []
        self.position = -1
        self._victim = None      # the node pop_victim returned last, and its heap key's first element
        self._victim_use = _NEVER_KEY

    def set_future(self, requests: Sequence[Sequence[int]]) -> None:
        """Index every key's uses: ``_positions[_bounds[s]:_bounds[s + 1]]`` are the distinct
        request indices (ascending) holding the key(s) of slot ``s = _slot[key]`` (``s = key``
        when ``_slot`` is None: the keys are exactly 0..n-1). Built by the fastest exact
        builder of :mod:`agentsim.cache.policies._next_use` for the requests' shape.
        """
        self._slot, self._bounds, self._positions = build_index(requests)
        self.position = -1

    def begin_request(self, index: int) -> None:
        self.position = index

    def next_use(self, key: int) -> float:
        slot_of = self._slot
        if slot_of is None:  # dense keys 0..n-1 (see set_future): the key is the slot
            if not 0 <= key < len(self._bounds) - 1:
                return NEVER
            slot = key
        else:
            slot = slot_of.get(key)
            if slot is None:
                return NEVER
        lo, hi = self._bounds[slot], self._bounds[slot + 1]
        i = bisect.bisect_right(self._positions, self.position, lo, hi)
        return self._positions[i] if i < hi else NEVER

    def victim_tail_blocks(self, node, want: int) -> int:
        """The victim's tail blocks that share its deepest block's next use (at most ``want``):
        a run's blocks nearer the root may be used again sooner (a later request that shares
        only part of the run), and then rank as keepers, so they are not trimmed with the tail.
        Next uses do not decrease towards the tail (a request that holds a block holds its
        prefix), so a binary search finds the boundary in O(log want) next-use queries."""
        if want == 1:
            return 1
        keys = node.keys
        n = len(keys)
        lo = n - want
        # next_use inlined for the two probes every call makes (it runs once per eviction step):
        # two blocks of one slot (prefix-run index) share their uses; otherwise compare the
        # first use after the current request of each.
        slot_of = self._slot
        if slot_of is None:
            size = len(self._bounds) - 1
            first, deepest = keys[lo], keys[-1]
            first_slot = first if 0 <= first < size else None
            last_slot = deepest if 0 <= deepest < size else None
        else:
            first_slot, last_slot = slot_of.get(keys[lo]), slot_of.get(keys[-1])
        if first_slot == last_slot:
            return want
        if first_slot is not None and last_slot is not None:
            bounds, positions, position = self._bounds, self._positions, self.position
            hi = bounds[first_slot + 1]
            i = bisect.bisect_right(positions, position, bounds[first_slot], hi)
            first_use = positions[i] if i < hi else NEVER
            if node is self._victim:  # its heap key holds -next_use(deepest), current (just popped)
                last = -self._victim_use if self._victim_use != _NEVER_KEY else NEVER
                self._victim = None   # once: the trim that follows changes the deepest block
            else:
                hi = bounds[last_slot + 1]
                i = bisect.bisect_right(positions, position, bounds[last_slot], hi)
                last = positions[i] if i < hi else NEVER
        else:
            next_use = self.next_use
            first_use, last = next_use(keys[lo]), next_use(keys[-1])
        if first_use == last:
            return want
        next_use = self.next_use
        hi = n - 1  # keys[lo] is used sooner than the tail, keys[hi] (the deepest) is not
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            if next_use(keys[mid]) == last:
                hi = mid
            else:
                lo = mid
        return n - hi

    def key(self, node):
        # -next_use(deepest key) with next_use inlined (the key is computed for every push),
        # -end_block without the property, -node_id.
        key = node.keys[-1]
        slot_of = self._slot
        if slot_of is None:
            slot = key if 0 <= key < len(self._bounds) - 1 else None
        else:
            slot = slot_of.get(key)
        if slot is None:
            return (_NEVER_KEY, -(node.start_block + len(node.keys)), -node.node_id)
        bounds = self._bounds
        hi = bounds[slot + 1]
        positions = self._positions
        i = bisect.bisect_right(positions, self.position, bounds[slot], hi)
        return (-positions[i] if i < hi else _NEVER_KEY, -(node.start_block + len(node.keys)), -node.node_id)

    # --- the push path, specialised -------------------------------------------------------------
    # KeyedLeafPolicy's notifications go on_candidate -> _push_if_evictable -> key: three Python
    # frames per push, and a replay pushes once per request and per eviction step. Here one
    # frame does the leaf test, the key (as ``key`` above) and the push, with the same items in
    # the same order, so the victims are exactly KeyedLeafPolicy's.
    def _push_if_evictable(self, node, now_s=None, hit=False) -> None:
        if self._plain_leaf_rule:
            if not (node.alive and not node.lock_ref and not node.children and node.parent is not None):
                return
        elif not self.cache.is_evictable(node):
            return
        keys = node.keys
        key = keys[-1]
        slot_of = self._slot
        bounds = self._bounds
        if slot_of is None:
            slot = key if 0 <= key < len(bounds) - 1 else None
        else:
            slot = slot_of.get(key)
        if slot is None:
            use = _NEVER_KEY
        else:
            hi = bounds[slot + 1]
            positions = self._positions
            i = bisect.bisect_right(positions, self.position, bounds[slot], hi)
            use = -positions[i] if i < hi else _NEVER_KEY
        node.heap_version = version = node.heap_version + 1
        heap = self._heap
        node_id = node.node_id
        heapq.heappush(heap, (use, -(node.start_block + len(keys)), -node_id, node_id, version, node))
        if len(heap) > self._compact_at:
            self._compact_heap()

    on_insert = on_access = on_candidate = _push_if_evictable

    def pop_victim(self, now_s):
        """KeyedLeafPolicy's pop, keeping the victim's heap key: its first element is minus the
        next use of the victim's deepest block, which :meth:`victim_tail_blocks` (asked next,
        for this victim) then need not look up again."""
        item = self._pop_evictable_item()
        if item is None:
            return None
        node = item[-1]
        self._victim, self._victim_use = node, item[0]
        return node

    def on_split(self, upper, lower):
        self._push_if_evictable(upper)
        self._push_if_evictable(lower)

    def bind(self, cache) -> None:
        super().bind(cache)
        # The overrides above notify only evictable nodes, as KeyedLeafPolicy's, so its path
        # shortcuts hold (it turns them off for any subclass that overrides these hooks).
        self.access_evictable_only = True
        self.access_leaf_only = self._plain_leaf_rule
