"""KVFlow (policies spec section 4.3; Pan et al., arXiv 2507.07400): workflow-aware eviction.

KVFlow ranks cached prefixes by how soon an agent that needs them runs again
(*steps-to-execution*). In agentsim the workflow information is the agents' known next-call
times: at ``on_tool_start(owner, node, gap, now)`` the agent announces that it will call again
at ``now + gap`` (its pre-sampled pause), and ``on_tool_end`` says it is running again.

* ``steps(a) = ceil((next_call_s(a) - now) / step_s)`` for a paused agent ``a`` (0 = due now).
* ``hold(leaf) = min(steps(a), hold_step + 1)`` over the paused agents whose deepest cached node
  is that leaf (their paths pass through it; inner nodes are protected by the leaf rule). A leaf
  no known agent needs has ``hold = hold_step + 1``. When an agent's deepest node is evicted
  whole, the agent moves to its parent (the new end of its cached path).
* Eviction runs the fork's passes: for ``k = hold_step - 1`` down to 1 evict leaves with
  ``hold >= k``, then ignore ``hold``. Equivalently the victim minimises
  ``(-min(hold, hold_step - 1) if hold >= 1 else 1, last_access_s, -end_block, node_id)``: within
  a pass the base order is LRU ([sim-choice], as the spec says; the fork walks leaves in tree
  order).
* Without workflow information (no tool events, or ``use_workflow: false``) every leaf has
  ``hold = hold_step + 1`` and the order is exactly LRU (spec section 6 reduction).

Keys change with time only while some agent is paused (``hold`` counts steps to a known
next-call time); then victims are chosen from a snapshot of the candidate leaves (O(L) per
eviction for L evictable leaves), as the spec prescribes for time-varying keys. While no agent
is paused every leaf is in the same class, the order is LRU's and time-invariant, so a lazy
min-heap keyed ``(last_access_s, -end_block, node_id)`` answers in O(log n) (the cache-only
replay of the Mooncake trace went from ~13 s to LRU's order of time). The heap is rebuilt from
the candidate set, once, at the first eviction after a period with paused agents.
[sim-choice] KVFlow's step prefetch of CPU-resident KV is the tier layer's business
(``cache.tiers.prefetch_before_return``); this policy is HBM eviction only.
"""

from __future__ import annotations

import heapq
import itertools
import math

from pydantic import BaseModel, ConfigDict, Field

from agentsim.cache.registries import EVICTION_POLICIES
from agentsim.cache.policy import EvictionPolicy


def _node(x):
    return getattr(x, "node", x)


class KVFlowParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step_s: float = Field(5.0, gt=0, description="seconds per scheduling step (steps-to-execution = time to next call / step_s)")
    hold_step: int = Field(8, ge=1, description="horizon: agents further than this many steps away do not protect their KV")
    use_workflow: bool = Field(True, description="false: ignore the agents' next-call times (= LRU)")


@EVICTION_POLICIES.register("kvflow")
class KVFlow(EvictionPolicy):
    """Evict the leaf whose next user is furthest away in steps; LRU within a step class."""

    Params = KVFlowParams
    merge_runs = True   # as LRU: keys are equal along a run after path-touch

    def __init__(self, params=None):
        super().__init__(params)
        self._candidates: dict = {}       # view entry -> None (insertion-ordered set)
        self._agents: dict = {}           # owner -> [node, next_call_s]
        self._at: dict = {}               # node -> set of owners whose deepest node it is
        self.protected_evictions = 0      # victims chosen while a further-away class was empty
        # Lazy min-heap of (*lru key, push seq, entry) over the candidates, exact while no agent
        # is paused; invalid (rebuilt on demand) after any notification or eviction with one.
        self._heap: list = []
        self._heap_valid = True
        self._seq = itertools.count()
        self._plain_leaf_rule = False

    def bind(self, cache) -> None:
        super().bind(cache)
        from agentsim.cache.radix import RadixCache

        self._plain_leaf_rule = type(cache).is_evictable is RadixCache.is_evictable
        # A touched node that is not evictable only joins the candidate set, which both the
        # scan and the heap rebuild filter by evictability (a node is announced again when it
        # becomes evictable), so the cache may notify only evictable nodes, as for LRU.
        if type(self).on_access is KVFlow.on_access:
            self.access_evictable_only = True
            self.access_leaf_only = self._plain_leaf_rule

    # --- candidates ----------------------------------------------------------------------------
    def _add(self, entry) -> None:
        self._candidates[entry] = None
        if self._at:
            self._heap_valid = False
        elif self._heap_valid:
            # Only evictable entries: one that becomes evictable later is announced again
            # (on_candidate / on_access), exactly as the scan's candidate set relies on.
            if self._plain_leaf_rule:
                evictable = entry.alive and not entry.lock_ref and not entry.children and entry.parent is not None
            else:
                evictable = self.cache.is_evictable(entry)
            if evictable:
                # (_lru_key(entry), seq, entry) flattened: same order, cheaper comparisons.
                heapq.heappush(self._heap, (entry.last_access_s, -(entry.start_block + len(entry.keys)),
                                            entry.node_id, next(self._seq), entry))
                if len(self._heap) > 4 * len(self._candidates) + 4096:
                    self._heap_valid = False   # mostly superseded entries: rebuild at next eviction

    def on_insert(self, node, now_s):
        self._add(node)

    def on_access(self, node, now_s, hit=False):
        self._add(node)

    def on_candidate(self, node):
        self._add(node)

    def on_split(self, upper, lower):
        self._add(upper)
        self._add(lower)

    def on_remove(self, node, blocks, reason):
        n = _node(node)
        if not n.alive or getattr(n, "entries", None) is not None and n.entries[0] is None:
            self._candidates.pop(node, None)
            owners = self._at.pop(n, None)
            if owners:
                parent = n.parent
                for owner in owners:
                    record = self._agents.get(owner)
                    if record is None:
                        continue
                    if parent is None or parent.parent is None:
                        del self._agents[owner]
                    else:
                        record[0] = parent
                        self._at.setdefault(parent, set()).add(owner)

    # --- workflow -----------------------------------------------------------------------------------
    def on_tool_start(self, owner, node, predicted_gap_s, now_s, tool="tool"):
        if not self.params.use_workflow or not math.isfinite(predicted_gap_s):
            return
        self.on_tool_end(owner, now_s)
        n = _node(node)
        self._agents[owner] = [n, now_s + predicted_gap_s]
        self._at.setdefault(n, set()).add(owner)

    def on_tool_end(self, owner, now_s):
        record = self._agents.pop(owner, None)
        if record is not None:
            owners = self._at.get(record[0])
            if owners is not None:
                owners.discard(owner)
                if not owners:
                    del self._at[record[0]]

    def hold(self, node, now_s: float) -> int:
        horizon = self.params.hold_step + 1
        owners = self._at.get(_node(node))
        if not owners:
            return horizon
        best = horizon
        for owner in owners:
            steps = max(0, math.ceil((self._agents[owner][1] - now_s) / self.params.step_s))
            best = min(best, steps)
        return best

    def key(self, entry, now_s: float) -> tuple:
        hold = self.hold(entry, now_s) if self._at else self.params.hold_step + 1
        klass = -min(hold, self.params.hold_step - 1) if hold >= 1 else 1
        return (klass, entry.last_access_s, -entry.end_block, entry.node_id)

    @staticmethod
    def _lru_key(entry) -> tuple:
        """The key's time-invariant part: ``key`` minus the (constant) class when no agent is paused."""
        return (entry.last_access_s, -(entry.start_block + len(entry.keys)), entry.node_id)  # -end_block

    # --- the decision -------------------------------------------------------------------------------
    def pop_victim(self, now_s):
        if self._at:
            self._heap_valid = False
            return self._scan_victim(now_s)
        if not self._heap_valid:
            self._rebuild_heap()
        return self._heap_victim()

    def _rebuild_heap(self) -> None:
        """Heap of the evictable candidates' current keys; drops the others from the candidate
        set as the scan does (they are announced again when they become evictable)."""
        is_evictable = self.cache.is_evictable
        heap, stale = [], []
        seq = self._seq
        for entry in self._candidates:
            if entry.alive and is_evictable(entry):
                heap.append(self._lru_key(entry) + (next(seq), entry))
            else:
                stale.append(entry)
        for entry in stale:
            del self._candidates[entry]
        heapq.heapify(heap)
        self._heap = heap
        self._heap_valid = True

    def _heap_victim(self):
        """Smallest current LRU key among evictable heap entries (no agent paused: = ``key`` order).

        An entry whose stored key is out of date (keys only grow between notifications: time
        moves forward, trims shorten runs) is re-pushed with its current key, so the pop stays
        exact even for a change no notification reported."""
        heap = self._heap
        is_evictable = self.cache.is_evictable
        plain = self._plain_leaf_rule
        while heap:
            item = heap[0]  # flat: (*lru key, seq, entry)
            entry = item[4]
            if plain:  # RadixCache.is_evictable, inlined
                evictable = entry.alive and not entry.lock_ref and not entry.children and entry.parent is not None
            else:
                evictable = entry.alive and is_evictable(entry)
            if not evictable:
                heapq.heappop(heap)
                continue
            last, neg_end, node_id = entry.last_access_s, -(entry.start_block + len(entry.keys)), entry.node_id
            if item[0] != last or item[1] != neg_end or item[2] != node_id:  # key out of date
                heapq.heapreplace(heap, (last, neg_end, node_id, next(self._seq), entry))
                continue
            heapq.heappop(heap)
            return entry
        return None

    def _scan_victim(self, now_s):
        is_evictable = self.cache.is_evictable
        best = best_key = None
        stale = []
        for entry in self._candidates:
            if not entry.alive or not is_evictable(entry):
                stale.append(entry)
                continue
            key = self.key(entry, now_s)
            if best_key is None or key < best_key:
                best, best_key = entry, key
        for entry in stale:
            # Not evictable now: it is announced again (on_candidate / on_access) when it is.
            del self._candidates[entry]
        return best

    def peek_victim(self):
        return None

    def describe(self):
        out = super().describe()
        out["paused_agents"] = len(self._agents)
        return out
