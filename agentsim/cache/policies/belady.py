"""Belady / MIN, the offline optimum (policies spec section 3.13).

Evicts the evictable run whose deepest block is next used furthest in the future (never used
again = infinity); ties: deepest first, then the newest node. Under the tree property a
child's next use is never earlier than its parent's, and a run's deepest block has the
latest next use of the run, so restricting MIN to evictable leaves loses nothing.

Feeding the future (the replay helper's API):
* ``policy.set_future(requests)`` with the whole request sequence, each a list of block keys
  (root first), builds a next-use index (key -> sorted request positions), O(total blocks);
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
from typing import Sequence

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.policy import KeyedLeafPolicy

NEVER = float("inf")


@EVICTION_POLICIES.register("belady")
class Belady(KeyedLeafPolicy):
    """Furthest next use first (offline; needs ``set_future``)."""

    def __init__(self, params=None):
        super().__init__(params)
        self._uses: dict[int, list[int]] = {}
        self.position = -1

    def set_future(self, requests: Sequence[Sequence[int]]) -> None:
        uses: dict[int, list[int]] = {}
        for index, keys in enumerate(requests):
            for key in keys:
                positions = uses.get(key)
                if positions is None:
                    uses[key] = [index]
                elif positions[-1] != index:
                    positions.append(index)
        self._uses = uses
        self.position = -1

    def begin_request(self, index: int) -> None:
        self.position = index

    def next_use(self, key: int) -> float:
        positions = self._uses.get(key)
        if not positions:
            return NEVER
        i = bisect.bisect_right(positions, self.position)
        return positions[i] if i < len(positions) else NEVER

    def key(self, node):
        return (-self.next_use(node.keys[-1]), -node.end_block, -node.node_id)
