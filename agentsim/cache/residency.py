"""Per-node tier residency for the tiered cache (:mod:`agentsim.cache.tiers`): tree nodes that
record which tiers hold their run, the per-tier entries policies see, and a tier's accounting.

**Policies per tier, unchanged.** Every tier has its own capacity accounting and its own
eviction-policy instance. A policy never sees a tree node directly: it sees that node's
:class:`TierEntry` in its tier, a small proxy whose ``alive`` (resident in this tier),
``lock_ref`` (HBM: request pins; lower tiers: in-flight transfer pins), ``children`` (children
resident in this tier) and ``parent`` (the parent's entry in this tier, or the tier's root
entry) describe the tier's projection of the tree, while ``keys``, ``start_block``,
``last_access_s``, ``hit_count``... are the node's. Entries also carry the per-policy fields
(``heap_version``, ``policy_data``), so two tiers' policies never clobber each other's state.
The policy is bound to its :class:`Tier`, whose ``is_evictable(entry)`` says: resident in the
tier, unpinned there, no child resident in the tier. So every registered policy works per tier.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentsim.cache.policy import EvictionPolicy, KeyedLeafPolicy
from agentsim.cache.radix import Node
from agentsim.errors import InvariantViolation

if TYPE_CHECKING:  # annotations only: tiers.py imports this module
    from agentsim.cache.tiers import TieredCache

HBM = 0


def merges_exactly(policy: EvictionPolicy) -> bool:
    """Whether two adjacent runs, resident in the same tiers and last touched at the same time,
    may become one node in ``policy``'s tier without changing any of its decisions: a keyed
    leaf policy whose runs may grow in place (``merge_runs``: its key is equal along a run after
    path-touch, and ranks a run by its deepest block) and that keeps no per-node state besides
    its lazy heap (the base class's insert, split, removal, timer and agentic hooks)."""
    cls = type(policy)
    return (isinstance(policy, KeyedLeafPolicy) and cls.merge_runs
            and cls.on_insert is KeyedLeafPolicy.on_insert and cls.on_split is KeyedLeafPolicy.on_split
            and cls.on_access is KeyedLeafPolicy.on_access
            and cls.on_remove is EvictionPolicy.on_remove and cls.on_timer is EvictionPolicy.on_timer
            and cls.on_tool_start is EvictionPolicy.on_tool_start and cls.on_lookup is EvictionPolicy.on_lookup)


class TNode(Node):
    """A tree node with per-tier residency: ``entries[t]`` is its entry in tier t or None."""

    __slots__ = ("entries", "loading", "load_tiers", "tier_children")

    def __init__(self, node_id, parent, keys, start_block, now_s, n_tiers):
        super().__init__(node_id, parent, keys, start_block, now_s)
        self.entries: list[TierEntry | None] = [None] * n_tiers
        #: ``tier_children[t]``: children resident in tier t (kept by ``_enter``/``_leave``/
        #: ``_split``), so "is this a leaf of tier t" needs no scan of a shared prefix's
        #: thousands of children.
        self.tier_children: list[int] = [0] * n_tiers
        self.loading = 0  # in-flight loads towards HBM through this node
        # Tiers whose copies each in-flight load pinned (one tuple per load): copies made during
        # the load (a concurrent request recomputing the blocks into HBM) are not its to unpin.
        self.load_tiers: list[tuple] | None = None

    @property
    def hbm(self) -> bool:
        return self.entries[0] is not None

    def resident_anywhere(self) -> bool:
        for entry in self.entries:
            if entry is not None:
                return True
        return False


class TierEntry:
    """A node as one tier's policy sees it (see the module docstring)."""

    __slots__ = ("node", "tier", "alive", "io_ref", "heap_version", "policy_data", "seq")
    _counter = 0

    def __init__(self, node: TNode, tier: "Tier"):
        TierEntry._counter += 1
        self.seq = TierEntry._counter   # creation order: the last tie-break in policy heaps
        self.node = node
        self.tier = tier
        self.alive = True
        self.io_ref = 0
        self.heap_version = 0
        self.policy_data = None

    # Node state shared by all tiers.
    keys = property(lambda self: self.node.keys)
    start_block = property(lambda self: self.node.start_block)
    end_block = property(lambda self: self.node.end_block)
    n_blocks = property(lambda self: len(self.node.keys))
    node_id = property(lambda self: self.node.node_id)
    last_access_s = property(lambda self: self.node.last_access_s)
    created_s = property(lambda self: self.node.created_s)
    hit_count = property(lambda self: self.node.hit_count)

    @property
    def lock_ref(self) -> int:
        if self.tier.index == HBM:
            return self.node.lock_ref + self.io_ref
        return self.io_ref

    @property
    def children(self) -> dict:
        t = self.tier.index
        return {key: child.entries[t] for key, child in self.node.children.items() if child.entries[t] is not None}

    @property
    def parent(self):
        parent = self.node.parent
        if parent is None:
            return None
        entry = parent.entries[self.tier.index]
        return entry if entry is not None else self.tier.root_entry

    def __lt__(self, other: "TierEntry") -> bool:
        # A node that left a tier and came back has a new entry with the same node_id; heap
        # tuples of the two may tie up to here.
        return self.seq < other.seq

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"TierEntry({self.tier.name}, {self.node!r}, io={self.io_ref})"


@dataclass
class TierSpec:
    """Configuration of one lower tier (capacity in blocks of this cache)."""

    name: str
    capacity_blocks: int
    policy: EvictionPolicy
    write_policy: str = "write_back"        # write_through | write_through_selective | write_back
    write_through_hits: int = 2
    inclusive: bool = True
    #: The host tier (the composition root reads it from the tier kind): prefetch stages the
    #: hits of the tiers below it into it. At most one, the first tier below HBM.
    host: bool = False


class Tier:
    """Capacity accounting of one tier; the ``cache`` its policy is bound to (a tier view)."""

    def __init__(self, index: int, name: str, capacity_blocks: int, policy: EvictionPolicy, owner: "TieredCache",
                 write_policy: str = "write_back", write_through_hits: int = 2, inclusive: bool = True):
        if capacity_blocks <= 0:
            raise ValueError(f"tier {name}: capacity_blocks must be positive")
        self.index = index
        self.name = name
        self.capacity_blocks = int(capacity_blocks)
        self.policy = policy
        self.owner = owner
        self.write_policy = write_policy
        self.write_through_hits = write_through_hits
        self.inclusive = inclusive
        self.used_blocks = 0          # resident (+ reserved, for HBM)
        self.reserved_blocks = 0
        self.inserted_blocks = 0
        self.evicted_blocks = 0
        self.evicted_by_reason: dict[str, int] = {}
        self.root_entry = TierEntry(owner.root, self)
        policy.bind(self)

    # --- the view a policy sees -----------------------------------------------------------
    def is_evictable(self, entry: TierEntry) -> bool:
        node = entry.node
        if not entry.alive or node.parent is None or entry.io_ref:
            return False
        if self.index == HBM and node.lock_ref:
            return False
        return not node.tier_children[self.index]

    @property
    def resident_blocks(self) -> int:
        return self.used_blocks - self.reserved_blocks

    def split(self, entry: TierEntry, offset: int) -> TierEntry:
        """Public split for policies (as :meth:`RadixCache.split`); returns the upper entry."""
        if not 0 < offset < len(entry.node.keys):
            raise InvariantViolation(f"split of {entry!r} at {offset}")
        upper = self.owner._split(entry.node, offset)
        return upper.entries[self.index]

    def expire(self, now_s: float, reason: str = "ttl_expiry") -> int:
        """Move the entries the policy reports as expired out of this tier (demoting them)."""
        freed = 0
        while True:
            entry = self.policy.pop_expired(now_s)
            if entry is None:
                return freed
            if not self.is_evictable(entry):
                raise InvariantViolation(f"policy {self.policy.registered_name} expired a non-evictable entry {entry!r}")
            freed += len(entry.node.keys)
            self.owner.remove_tail(entry.node, len(entry.node.keys), reason, self.index, now_s)
