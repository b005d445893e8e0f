"""The eviction-policy interface: policies decide, the cache accounts.

The radix cache (:mod:`agentsim.cache.radix`) owns capacity, residency, pins and byte accounting.
A policy only ranks: it is told about inserts, accesses, splits and removals, and when the
cache must free space it asks :meth:`EvictionPolicy.pop_victim` for the next evictable leaf.
The cache then trims blocks from that leaf's tail (a node holds a run of blocks with identical
state, so trimming the tail of a leaf is exactly "evict its deepest blocks first").

A node is *evictable* iff it is alive, resident, not the root, unpinned and has no children
(the leaf rule keeps the resident set prefix-closed). Policies must only return evictable
nodes; :meth:`RadixCache.is_evictable` answers the question.

Adding a policy = one module in :mod:`agentsim.cache.policies` that subclasses
:class:`EvictionPolicy` (or :class:`KeyedLeafPolicy` for a sort-key policy), declares a
``Params`` pydantic model if it takes parameters, and registers itself with
``@EVICTION_POLICIES.register("name")``.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

if TYPE_CHECKING:  # pragma: no cover
    from agentsim.cache.radix import Node, RadixCache


class EvictionPolicy:
    """Base class: every hook is a no-op; subclasses override what they need."""

    Params: ClassVar[type[BaseModel] | None] = None
    #: True if a childless leaf may be extended in place by a later insert of the same owner.
    #: Exact for policies whose per-block state is equal along a run after path-touch (LRU);
    #: policies keyed on creation order or per-block frequency keep runs separate.
    merge_runs: ClassVar[bool] = False
    #: True if the cache may evict part of a leaf by shortening it in place (the node stays,
    #: alive, as the kept upper part) instead of splitting off the evicted tail as a dead node.
    #: ``on_remove`` is then told before the node is shortened, with the node still alive (its
    #: removed blocks are ``node.keys[-blocks:]``), and ``on_candidate`` after: the policy must
    #: leave the node in the state a split would give the upper part (a key re-read on
    #: ``on_candidate`` for LRU; queue position, ghost keys, sketch counts or price updated in
    #: ``on_remove`` for the queue policies and GDSF). A tiered cache always splits.
    trim_in_place: ClassVar[bool] = False
    #: With ``trim_in_place``: the shortened node takes a fresh ``node_id`` (after
    #: ``on_remove``), the id the split's upper part would have had, so policies that break
    #: ties by creation order rank it exactly as after a split. Only for policies that do not
    #: index their state by node id.
    trim_renews_id: ClassVar[bool] = False
    registered_name: ClassVar[str] = "?"
    #: True only in ``flat`` tree mode: the policy may return a victim that has children, whose
    #: resident descendants the cache then counts as orphans (policies spec section 1.4).
    allows_orphans: bool = False
    #: True if :meth:`on_access` does nothing for a node that is not an evictable leaf; the
    #: cache then notifies only the deepest node of a touched path (its ancestors all have a
    #: child, the next node of the path). Set by :class:`KeyedLeafPolicy` when exact.
    access_leaf_only: bool = False
    #: True if :meth:`on_access` does nothing for a node its cache's ``is_evictable`` rejects
    #: (a tiered cache then skips entries whose next node on the path is in the same tier).
    access_evictable_only: bool = False
    #: False if :meth:`on_access` with ``hit=False`` (an insert re-stamping its path) never does
    #: anything; :meth:`RadixCache.serve` then skips that notification walk (SIEVE, S3-FIFO).
    restamp_notifies: ClassVar[bool] = True
    #: Optional ``restamp_is_noop(node) -> bool`` (None: not offered), asked by
    #: :meth:`RadixCache.serve` before that re-stamp walk (``node``: the request's new node; the
    #: walk goes up from it, over the path its match touched just before). True means the walk's
    #: notifications would change no ranking and the policy applied their other effects itself:
    #: the walk is skipped (its time stamps are already ``now_s``).
    restamp_is_noop = None
    #: Optional ``victim_tail_blocks(node, want) -> int`` (None: not offered): how many of the
    #: ``want`` tail blocks of the victim ``node`` :meth:`RadixCache.evict` may take (1 ..
    #: ``want``) before it asks :meth:`pop_victim` again. For a policy whose rank differs
    #: along a run (Belady: the blocks nearer the root are used again sooner), so that a
    #: victim is trimmed only while its tail still ranks as the victim.
    victim_tail_blocks = None
    #: What may follow an agent's call (``tool``, ``human``, ``join``, ``""``: the kinds of
    #: :mod:`agentsim.workload.traces.agents`) after which a sequential replay announces the
    #: agent's next call with :meth:`on_tool_start` (gap = the time to that call). Pause
    #: policies act on real pauses only (a tool runs or the human answers while the agent's KV
    #: waits); an oracle of next calls takes every kind whose next-call time the replay knows.
    announced_gap_kinds: ClassVar[tuple[str, ...]] = ("tool", "human")

    def __init__(self, params: BaseModel | None = None):
        self.params = params if params is not None else (self.Params() if self.Params else None)
        self.cache: RadixCache | None = None

    def bind(self, cache: "RadixCache") -> None:
        """Called once by the cache that owns this policy."""
        self.cache = cache

    # --- notifications (the cache calls these) -------------------------------------------
    # A RadixCache skips on_lookup and on_release when the policy's (bound) hooks are these
    # no-ops; it decides when it is created.
    def on_insert(self, node: "Node", now_s: float) -> None:
        """A new node (a run of freshly written blocks) joined the cache."""

    def on_access(self, node: "Node", now_s: float, hit: bool = False) -> None:
        """``node`` was on the path of a match or insert (path-touch); deepest node first.

        ``hit`` is True for a match that found the node (a reuse), False for the re-stamp of a
        path by an insert (frequency-counting policies count only hits).
        """

    def on_lookup(self, keys: list[int], hit_blocks: int, now_s: float) -> None:
        """A touching match looked up ``keys`` and found the first ``hit_blocks`` resident.

        Called after the path-touch and before the caller reserves room for the missing
        blocks, so ghost-list policies (ARC, 2Q, S3-FIFO) can react to ghost hits of the
        blocks about to be inserted before choosing victims for them.
        """

    def on_release(self, node: "Node") -> None:
        """``node``'s pin count dropped to 0 (deepest node first within one unpin)."""

    def on_candidate(self, node: "Node") -> None:
        """``node`` may have become evictable (unpinned, or its last child left)."""

    def on_split(self, upper: "Node", lower: "Node") -> None:
        """A node was split; ``upper`` is the new node holding the first part of its blocks."""

    def on_remove(self, node: "Node", blocks: int, reason: str) -> None:
        """``blocks`` blocks of ``node`` (its tail, or all of it) left the cache."""

    # --- agentic hooks (called by the engine once it is wired; no-ops by default) --------
    def on_tool_start(self, owner: Any, node: "Node", predicted_gap_s: float, now_s: float,
                      tool: str = "tool") -> None:
        """``owner``'s LLM call ended with a pause (``tool``: "tool" or "human"); ``node`` is the
        deepest node of its context, still pinned by the finishing request (the engine unpins it
        right after this call). ``predicted_gap_s`` is the pause the agent will take (the
        agent's own pre-sampled gap: clairvoyant; history-based policies ignore it)."""

    def on_tool_end(self, owner: Any, now_s: float) -> None:
        """``owner``'s tool returned; its next call will arrive."""

    def on_timer(self, now_s: float) -> None:
        """The deadline announced by :meth:`next_timer_s` is due (TTL expiry, pin time-outs)."""

    def next_timer_s(self) -> float | None:
        """Earliest time at which :meth:`on_timer` has work to do, or None."""
        return None

    # --- the decision ------------------------------------------------------------------
    def pop_victim(self, now_s: float) -> "Node | None":
        """The next evictable leaf to trim, or None if nothing is evictable."""
        raise NotImplementedError

    def pop_expired(self, now_s: float) -> "Node | None":
        """An evictable leaf whose deadline is <= ``now_s`` (for :meth:`RadixCache.expire`), or None."""
        return None

    def peek_victim(self) -> "Node | None":
        """The node :meth:`pop_victim` would most likely return, without changing state (or None)."""
        return None

    def counters(self) -> dict[str, int]:
        """Policy-specific counters for run diagnostics (e.g. ``ttl_expirations_blocks``)."""
        return {}

    def state_bytes(self) -> int:
        """Metadata held by the policy (ghosts, sketches); reported, not charged to capacity."""
        return 0

    def describe(self) -> dict[str, Any]:
        return {"name": self.registered_name, "params": self.params.model_dump() if self.params else {}}


class KeyedLeafPolicy(EvictionPolicy):
    """A policy defined by a sort key over evictable leaves (smallest key evicted first).

    Keeps a lazy min-heap: every time a node's key may have changed or it may have become
    evictable, a fresh entry is pushed and the node's ``heap_version`` bumped; stale entries are
    skipped when popped. This is O(log n) per change instead of SGLang's rebuild-per-eviction,
    and exact for keys that only change on the notifications above (time-invariant keys).

    A tier that rarely evicts (a large DRAM or disk tier) would otherwise keep every superseded
    entry, and through it every node it ever held, for the whole run: memory growing with each
    request. So when the heap outgrows :attr:`_compact_at` its entries that can never be popped
    as victims (superseded version, or a node no longer alive: both are permanent) are dropped
    and the rest re-heapified. Items are totally ordered (``node_id`` and ``version`` make
    them unique), so the remaining victims come out in exactly the same order.
    """

    #: The heap is compacted when it grows past this many items, and the next compaction waits
    #: until it doubles the live entries kept (amortised O(1) per push).
    COMPACT_MIN_ITEMS = 4096

    def __init__(self, params: BaseModel | None = None):
        super().__init__(params)
        self._heap: list = []
        self._compact_at = self.COMPACT_MIN_ITEMS
        self._plain_leaf_rule = False

    def _compact_heap(self) -> None:
        """Drop the items no pop can return as a victim; keep the order of the rest."""
        kept = [item for item in self._heap if item[-2] == item[-1].heap_version and item[-1].alive]
        heapq.heapify(kept)
        self._heap = kept
        self._compact_at = max(self.COMPACT_MIN_ITEMS, 2 * len(kept))

    def key(self, node: "Node") -> tuple:
        """Sort key; ties are broken by the cache's node id (creation order) after this."""
        raise NotImplementedError

    def _push(self, node: "Node") -> None:
        # Heap items are flat, ``key + (node_id, version, node)``: the same order as the nested
        # ``(key, node_id, version, node)`` (a policy's keys all have one length) with cheaper
        # comparisons (no inner tuple compared for equality first).
        node.heap_version = version = node.heap_version + 1
        heapq.heappush(self._heap, self.key(node) + (node.node_id, version, node))
        if len(self._heap) > self._compact_at:
            self._compact_heap()

    def bind(self, cache: "RadixCache") -> None:
        super().bind(cache)
        from agentsim.cache.radix import RadixCache

        #: True when the cache's leaf rule is exactly :meth:`RadixCache.is_evictable`, which
        #: the hot paths below then inline (they run for every node of every touched path).
        self._plain_leaf_rule = type(cache).is_evictable is RadixCache.is_evictable
        cls = type(self)
        self.access_evictable_only = (cls.on_access is KeyedLeafPolicy.on_access
                                      and cls._push_if_evictable is KeyedLeafPolicy._push_if_evictable)
        self.access_leaf_only = self._plain_leaf_rule and self.access_evictable_only

    def _push_if_evictable(self, node: "Node") -> None:
        if self._plain_leaf_rule:
            if not (node.alive and not node.lock_ref and not node.children and node.parent is not None):
                return
        elif not self.cache.is_evictable(node):
            return
        # _push, inlined: this runs for every notification of an evictable node.
        node.heap_version = version = node.heap_version + 1
        heap = self._heap
        heapq.heappush(heap, self.key(node) + (node.node_id, version, node))
        if len(heap) > self._compact_at:
            self._compact_heap()

    def on_insert(self, node, now_s):
        self._push_if_evictable(node)

    def on_access(self, node, now_s, hit=False):
        self._push_if_evictable(node)

    def on_candidate(self, node):
        self._push_if_evictable(node)

    def on_split(self, upper, lower):
        self._push_if_evictable(upper)
        self._push_if_evictable(lower)

    def pop_victim(self, now_s):
        item = self._pop_evictable_item()
        return None if item is None else item[-1]

    def _pop_evictable_item(self):
        """Pop heap items until one names a live, evictable node; return that item (its node
        re-armed: the cache may trim only part of the node and keep it), or None."""
        heap = self._heap
        is_evictable = self.cache.is_evictable
        heappop = heapq.heappop
        plain = self._plain_leaf_rule
        while heap:
            item = heappop(heap)
            node = item[-1]
            if item[-2] != node.heap_version:
                continue
            if plain:  # RadixCache.is_evictable, inlined
                evictable = node.alive and not node.lock_ref and not node.children and node.parent is not None
            else:
                evictable = is_evictable(node)
            if evictable:
                node.heap_version += 1
                return item
        if len(heap) == 0:
            self._heap = []
        return None

    def peek_victim(self):
        heap = self._heap
        is_evictable = self.cache.is_evictable
        while heap:
            item = heap[0]
            node = item[-1]
            if item[-2] == node.heap_version and is_evictable(node):
                return node
            heapq.heappop(heap)
        return None
