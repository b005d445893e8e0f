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

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.policies._queues import Queue, QueuePolicy


@EVICTION_POLICIES.register("sieve")
class SIEVE(QueuePolicy):
    """FIFO with lazy promotion by a visited bit and a moving hand."""

    restamp_notifies = False  # only hits set the bit (see _on_touch)

    def __init__(self, params=None):
        super().__init__(params)
        self.queue = Queue("sieve")
        self._ready = SortedList()  # (key, node_id) of eligible members, key order = age
        self._nodes: dict[int, object] = {}
        self._hand: tuple | None = None  # resume strictly after this key (None: from the tail)
        self._hand_inclusive = False

    # The lazy heap of the base class is replaced by an ordered set that supports "next after".
    def _push(self, node):
        entry = node.policy_data
        entry.ver += 1
        item = (entry.key, node.node_id)
        if item not in self._ready:
            self._ready.add(item)
        self._nodes[node.node_id] = node

    def _drop(self, node):
        entry = node.policy_data
        self._ready.discard((entry.key, node.node_id))

    def _place(self, node, queue):
        entry = node.policy_data
        if entry.queue is not None and entry.key:
            self._drop(node)
        super()._place(node, queue)

    def on_split(self, upper, lower):
        entry = lower.policy_data
        if entry is not None and entry.queue is not None:
            self._drop(lower)
        super().on_split(upper, lower)

    def on_remove(self, node, blocks, reason):
        entry = node.policy_data
        if node.alive:
            # Trimmed in place: the run keeps its key. A split would have given the remaining
            # upper part a key just after the hand; here the hand must include the run itself.
            if entry is not None and self._hand == entry.key:
                self._hand_inclusive = True
        else:
            if entry is not None and entry.queue is not None:
                self._drop(node)
            self._nodes.pop(node.node_id, None)
        super().on_remove(node, blocks, reason)

    def _admit_new(self, node, now_s):
        self._place(node, self.queue)

    def on_access(self, node, now_s, hit=False):
        # QueuePolicy.on_access with _on_touch inlined (it runs for every node of every path).
        if hit:
            entry = node.policy_data
            if entry is not None and entry.queue is not None:
                entry.flag = True

    def _on_touch(self, node, hit, now_s):
        if hit:
            node.policy_data.flag = True

    def _select(self, now_s):
        ready = self._ready
        start_over = False
        while ready:
            if self._hand is None:
                index = 0
            elif self._hand_inclusive:
                index = ready.bisect_left((self._hand, -1))
            else:
                index = ready.bisect_right((self._hand, float("inf")))
            self._hand_inclusive = False
            if index >= len(ready):  # wrap from the head to the tail
                if start_over and self._hand is None:
                    return None
                self._hand = None
                start_over = True
                continue
            key, node_id = ready[index]
            node = self._nodes.get(node_id)
            entry = node.policy_data if node is not None else None
            if entry is None or entry.queue is not self.queue or entry.key != key or not self._eligible(node):
                del ready[index]  # pass over without touching its bit; re-added when eligible
                self.skipped_entries += 1
                self._hand, self._hand_inclusive = key, True
                if index == 0 and not ready:
                    return None
                continue
            if entry.flag:
                entry.flag = False
                self._hand = key
                continue
            if node.children and self.mode == "cascade":
                self._hand, self._hand_inclusive = key, True  # come back to it until it is a leaf
            else:
                self._hand = key
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
