"""SIEVE (Zhang et al., NSDI'24; policies spec section 3.9).

One FIFO (new runs at the head), a ``visited`` bit per run, set on a hit, and a hand that
walks from the tail toward the head: a visited run has its bit cleared and is passed, the
first unvisited run is evicted and the hand stays at its head-side neighbour (which, after a
partial trim, is the remaining upper part of the same run, as per-block SIEVE would do).
Runs never move. [sim-choice] Ineligible runs (pinned, or inner nodes in ``leaf_only``) are
passed without clearing their bit, so in-use contexts keep their protection.
"""

from __future__ import annotations

from sortedcontainers import SortedList

from agentsim.cache.registries import EVICTION_POLICIES
from agentsim.cache.policies._queues import Queue, QueuePolicy

# A run's queue position as one int, ``seq << 32 | (_START_MASK - start_block)``: the order of
# the base class's key ``(seq, -start_block, node_id)`` (start blocks stay below 2**32), with
# C-level int comparisons instead of tuple ones. Positions of live members are unique: runs
# sharing a ``seq`` are parts of one run, with distinct start blocks; ``node_id`` decided only
# where a split's new upper part takes its lower part's old position (see ``on_split``).
_START_BITS = 32
_START_MASK = (1 << _START_BITS) - 1


def _position(key: tuple) -> int:
    """The int position of a base-class queue key ``(seq, -start_block, node_id)``."""
    return (key[0] << _START_BITS) | (_START_MASK + key[1])


@EVICTION_POLICIES.register("sieve")
class SIEVE(QueuePolicy):
    """FIFO with lazy promotion by a visited bit and a moving hand."""

    restamp_notifies = False  # only hits set the bit (see on_access)

    def __init__(self, params=None):
        super().__init__(params)
        self.queue = Queue("sieve")
        self._ready = SortedList()  # positions of eligible members (ascending = oldest first)
        self._at: dict[int, object] = {}  # position -> node, for exactly the members of _ready
        self._hand: int | None = None  # resume strictly after this position (None: from the tail)
        self._hand_inclusive = False

    # The lazy heap of the base class is replaced by an ordered set that supports "next after".
    def _push(self, node):
        entry = node.policy_data
        entry.ver += 1
        pos = _position(entry.key)
        if pos not in self._at:
            self._at[pos] = node
            self._ready.add(pos)

    def _drop(self, entry) -> int:
        """Take ``entry``'s run out of the ordered set (if there); returns its position."""
        pos = _position(entry.key)
        if self._at.pop(pos, None) is not None:
            self._ready.remove(pos)
        return pos

    def _place(self, node, queue):
        entry = node.policy_data
        if entry.queue is not None and entry.key:
            self._drop(entry)
        super()._place(node, queue)

    def on_candidate(self, node):
        # QueuePolicy._push_if_eligible and _push inlined (runs after every eviction and unpin).
        entry = node.policy_data
        if (entry is not None and entry.queue is not None and node.alive and not node.lock_ref
                and node.parent is not None and not (self._leaf_only and node.children)):
            key = entry.key
            pos = (key[0] << _START_BITS) | (_START_MASK + key[1])
            at = self._at
            if pos not in at:
                at[pos] = node
                self._ready.add(pos)

    def on_split(self, upper, lower):
        entry = lower.policy_data
        if entry is not None and entry.queue is not None:
            if self._drop(entry) == self._hand:
                # The upper part takes the lower part's old position. Under the key order
                # (with node ids) it came right after the hand: the hand now includes it.
                self._hand_inclusive = True
        super().on_split(upper, lower)

    def on_remove(self, node, blocks, reason):
        # QueuePolicy.on_remove for SIEVE (no ghost, no trim hook) with the ordered set kept.
        entry = node.policy_data
        if entry is None:
            return
        queue = entry.queue
        if queue is None:
            return
        if node.alive:
            # Trimmed in place: the run keeps its position. A split would have given the
            # remaining upper part a position just after the hand; the hand must include it.
            queue.blocks -= blocks
            if self._hand == _position(entry.key):
                self._hand_inclusive = True
            return
        self._drop(entry)
        queue.blocks -= len(node.keys)
        entry.queue = None
        entry.ver += 1

    def _admit_new(self, node, now_s):
        self._place(node, self.queue)

    def on_access(self, node, now_s, hit=False):
        # Overrides QueuePolicy.on_access, not its _on_touch hook: one frame less
        # (it runs for every node of every path).
        if hit:
            entry = node.policy_data
            if entry is not None and entry.queue is not None:
                entry.flag = True

    def _select(self, now_s):
        ready = self._ready
        at = self._at
        leaf_only = self._leaf_only
        start_over = False
        while ready:
            hand = self._hand
            if hand is None:
                index = 0
            elif self._hand_inclusive:
                index = ready.bisect_left(hand)
            else:
                index = ready.bisect_right(hand)
            self._hand_inclusive = False
            if index >= len(ready):  # wrap from the head to the tail
                if start_over and hand is None:
                    return None
                self._hand = None
                start_over = True
                continue
            pos = ready[index]
            node = at[pos]
            if not node.alive or node.lock_ref or node.parent is None or (leaf_only and node.children):
                del ready[index]  # pass over without touching its bit; re-added when eligible
                del at[pos]
                self.skipped_entries += 1
                self._hand, self._hand_inclusive = pos, True
                if index == 0 and not ready:
                    return None
                continue
            entry = node.policy_data
            if entry.flag:
                entry.flag = False
                self._hand = pos
                continue
            self._hand = pos
            if node.children and self.mode == "cascade":
                self._hand_inclusive = True  # come back to it until it is a leaf
            return node
        return None

    def pop_victim(self, now_s):
        node = self._select(now_s)
        if node is None:
            return None
        if node.children and self.mode == "cascade":
            while node.children:
                node = max(node.children.values(), key=lambda n: (n.end_block, n.node_id))
        return node

    def peek_victim(self):
        return None
