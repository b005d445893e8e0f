"""One radix tree per instance with per-node tier residency (HBM, DRAM, disk, remote).

As in SGLang HiCache, a node of the tree records in which tiers its run of blocks is resident;
it leaves the tree only when it is resident nowhere. Tier 0 is HBM and keeps the request flow of
:class:`~agentsim.cache.radix.RadixCache` (match -> pin -> reserve -> commit -> unpin); tiers
1.. are the lower tiers, top to bottom.

**Policies per tier, unchanged.** Every tier has its own capacity accounting and its own
eviction-policy instance. A policy never sees a tree node directly: it sees that node's
:class:`TierEntry` in its tier, a small proxy whose ``alive`` (resident in this tier),
``lock_ref`` (HBM: request pins; lower tiers: in-flight transfer pins), ``children`` (children
resident in this tier) and ``parent`` (the parent's entry in this tier, or the tier's root
entry) describe the tier's projection of the tree, while ``keys``, ``start_block``,
``last_access_s``, ``hit_count``... are the node's. Entries also carry the per-policy fields
(``heap_version``, ``policy_data``), so two tiers' policies never clobber each other's state.
The policy is bound to a :class:`TierView` whose ``is_evictable(entry)`` says: resident in the
tier, unpinned there, no child resident in the tier. So every registered policy works per tier.

**Movement.** HBM eviction demotes a block (copy down first, then free) to the next tier if that
tier's write policy is ``write_back``; ``write_through`` tiers received a copy when the block
entered the tier above, ``write_through_selective`` tiers once it had been hit N times (both
only if the parent already has a copy there, so a write-through tier stays prefix-closed, as in
HiCache). Loads copy blocks up; an exclusive tier frees its copy then. A node resident nowhere
leaves the tree, with any descendants (their KV is useless without the prefix). Runs stay runs:
a node is split only when part of it moves.

**Runs merge back.** A session's leaf grows in place only while it is held in HBM alone; once
it has a copy below, the next call's blocks become a child node. So without merging, a session
that is demoted and loaded back between calls gains a node per call, and every later load,
path-touch and router lookup walks them all (per-request cost grew with session age). When a
node's residency changes, it is merged with its parent or its only child if the two are
resident in exactly the same tiers, unpinned, not in transfer, and were last touched at the
same time (a path-touch stamps a whole path, so a session's own runs are). That is exact only
for policies that rank leaves by a key equal along such a run and keep no other per-node state
(:func:`merges_exactly`: LRU), so it is done only when every tier's policy qualifies; the
merged node keeps the upper node's identity and stats.

**No SimPy here.** Copies down are accounted at once; their bytes are reported through the
``on_transfer(src_tier, dst_tier, n_blocks)`` callback, which the serving instance turns into
link transfers (so they contend with loads). Loads are two-phase: :meth:`TieredCache.begin_load`
pins the source copies (in every tier, so nothing splits or drops them) and
:meth:`TieredCache.finish_load` makes them HBM-resident when the transfer is done.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

from agentsim.cache.policy import EvictionPolicy, KeyedLeafPolicy
from agentsim.cache.radix import Node, _common_prefix, descend, iter_subtree
from agentsim.errors import InvariantViolation

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


class PrefetchPin:
    """The pins one prefetch holds (see :meth:`TieredCache.begin_prefetch`)."""

    __slots__ = ("deepest", "masks", "staged_blocks", "released")

    def __init__(self, deepest: TNode):
        self.deepest = deepest
        self.masks: dict[TNode, tuple] = {}   # node -> tiers whose copies this prefetch pinned
        self.staged_blocks = 0
        self.released = False


class Match(NamedTuple):
    node: TNode        # deepest matched node (any tier)
    hit_blocks: int    # matched blocks, all tiers


class TieredCache:
    """HBM plus lower tiers over one tree. HBM attributes mirror :class:`RadixCache`."""

    def __init__(self, capacity_blocks: int, policy: EvictionPolicy, lower: list[TierSpec] | tuple = (),
                 name: str = "hbm", on_transfer: Callable[[str, str, int], None] | None = None):
        self.name = name
        self.n_tiers = 1 + len(lower)
        self._next_id = 1
        self.root = TNode(0, None, [], 0, 0.0, self.n_tiers)
        self.tiers: list[Tier] = [Tier(0, name, capacity_blocks, policy, self)]
        for index, spec in enumerate(lower, start=1):
            self.tiers.append(Tier(index, spec.name, spec.capacity_blocks, spec.policy, self, spec.write_policy,
                                   spec.write_through_hits, spec.inclusive))
        for tier in self.tiers:
            self.root.entries[tier.index] = tier.root_entry
        self.on_transfer = on_transfer
        self.policy = policy
        self.dropped_blocks = 0          # blocks that left the tree (resident nowhere)
        self.demoted_blocks = [0] * self.n_tiers   # blocks written into tier t by demotion
        self.written_through_blocks = [0] * self.n_tiers
        self.loaded_blocks = [0] * self.n_tiers    # blocks loaded up from tier t
        #: Adjacent runs with equal residency merge back into one node (module docstring).
        self.merge_runs = all(merges_exactly(tier.policy) for tier in self.tiers)
        # Selective write-through reads per-node hit counts: merge only runs with equal ones.
        self._merge_needs_equal_hits = any(t.write_policy == "write_through_selective" for t in self.tiers[1:])
        self.merged_nodes = 0
        #: KV events (``cluster/kv_events.py``): told of blocks entering and leaving the tree.
        self.kv_listener = None

    # --- HBM-compatible attributes ---------------------------------------------------------
    hbm = property(lambda self: self.tiers[0])
    capacity_blocks = property(lambda self: self.tiers[0].capacity_blocks)
    used_blocks = property(lambda self: self.tiers[0].used_blocks)
    reserved_blocks = property(lambda self: self.tiers[0].reserved_blocks)
    evicted_blocks = property(lambda self: self.tiers[0].evicted_blocks)
    evicted_by_reason = property(lambda self: self.tiers[0].evicted_by_reason)
    inserted_blocks = property(lambda self: self.tiers[0].inserted_blocks)
    resident_blocks = property(lambda self: self.tiers[0].resident_blocks)

    def tier_index(self, name: str) -> int | None:
        for tier in self.tiers:
            if tier.name == name:
                return tier.index
        return None

    def is_evictable(self, node: TNode) -> bool:
        """HBM-evictable (for callers holding nodes, e.g. tests)."""
        entry = node.entries[0]
        return entry is not None and self.tiers[0].is_evictable(entry)

    # --- structure ---------------------------------------------------------------------------
    def _new_node(self, parent: TNode, keys: list[int], start_block: int, now_s: float) -> TNode:
        node = TNode(self._next_id, parent, keys, start_block, now_s, self.n_tiers)
        self._next_id += 1
        return node

    def _split(self, node: TNode, offset: int) -> TNode:
        """Split ``node`` after ``offset`` blocks; the new upper node takes the first part and a
        copy of all state (residency, pins, load marks); ``node`` keeps the tail and children."""
        parent = node.parent
        upper = self._new_node(parent, node.keys[:offset], node.start_block, node.created_s)
        upper.lock_ref = node.lock_ref
        upper.last_access_s = node.last_access_s
        upper.hit_count = node.hit_count
        upper.loading = node.loading
        if node.load_tiers:
            upper.load_tiers = list(node.load_tiers)
        node.keys = node.keys[offset:]
        node.start_block += offset
        parent.children[upper.keys[0]] = upper
        upper.children[node.keys[0]] = node
        node.parent = upper
        for t, entry in enumerate(node.entries):
            if entry is not None:
                up = TierEntry(upper, self.tiers[t])
                up.io_ref = entry.io_ref
                upper.entries[t] = up
                upper.tier_children[t] = 1  # its one child, ``node``, is in the same tiers
        for t, entry in enumerate(node.entries):
            if entry is not None:
                self.tiers[t].policy.on_split(upper.entries[t], entry)
        return upper

    def _enter(self, node: TNode, t: int, now_s: float) -> TierEntry:
        tier = self.tiers[t]
        entry = TierEntry(node, tier)
        node.entries[t] = entry
        node.parent.tier_children[t] += 1
        tier.inserted_blocks += len(node.keys)
        tier.policy.on_insert(entry, now_s)
        # The parent stopped being a leaf of this tier.
        return entry

    # --- lookups -----------------------------------------------------------------------------
    def match(self, keys: list[int], now_s: float, touch: bool = True) -> Match:
        """Longest prefix of ``keys`` in the tree (any tier); with ``touch``, path-touch it."""
        node, pos = descend(self.root, keys, self._split)
        if touch:
            if node is not self.root:
                self._touch_path(node, now_s, hit=True)
            _, hbm_blocks = self.hbm_prefix(node)
            self.tiers[0].policy.on_lookup(keys, hbm_blocks, now_s)
            for tier in self.tiers[1:]:
                tier.policy.on_lookup(keys, pos, now_s)
        return Match(node, pos)

    def peek(self, keys: list[int]) -> tuple[int, int]:
        """(HBM-resident prefix blocks, prefix blocks in any tier) of ``keys``; changes nothing."""
        node = self.root
        pos = 0
        hbm_blocks = 0
        n = len(keys)
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None:
                break
            run = child.keys
            length = len(run)
            if keys[pos:pos + length] == run:
                pos += length
            else:
                pos += _common_prefix(run, keys, pos)
                if child.entries[0] is not None:
                    hbm_blocks = pos
                break
            if child.entries[0] is not None:
                hbm_blocks = pos
            node = child
        return hbm_blocks, pos

    def path(self, node: TNode) -> list[TNode]:
        """Nodes from the root's child down to ``node``."""
        out = []
        while node.parent is not None:
            out.append(node)
            node = node.parent
        out.reverse()
        return out

    @staticmethod
    def hbm_prefix(node: TNode) -> tuple[TNode, int]:
        """The deepest HBM-resident node on the path to ``node`` (HBM is prefix-closed) and the
        number of blocks up to its end (0 and the root if none)."""
        while node.parent is not None and node.entries[0] is None:
            node = node.parent
        return node, (node.end_block if node.parent is not None else 0)

    @staticmethod
    def source_tier(node: TNode) -> int | None:
        """The highest lower tier holding ``node`` (where a load would read it), or None."""
        for t in range(1, len(node.entries)):
            if node.entries[t] is not None:
                return t
        return None

    def _touch_path(self, node: TNode, now_s: float, hit: bool) -> None:
        tiers = self.tiers
        selective = hit and any(t.write_policy == "write_through_selective" for t in tiers[1:])
        touched = [] if selective else None
        # A policy that acts only on evictable entries ignores an entry whose next node down
        # the path is in the same tier (Tier.is_evictable: no child resident in the tier).
        skip = [tier.policy.access_evictable_only for tier in tiers]
        below = None
        while node.parent is not None:
            node.last_access_s = now_s
            if hit:
                node.hit_count += 1
            for t, entry in enumerate(node.entries):
                if entry is not None:
                    if skip[t] and below is not None and below.entries[t] is not None:
                        continue
                    tiers[t].policy.on_access(entry, now_s, hit)
            if touched is not None:
                touched.append(node)
            below = node
            node = node.parent
        if touched:
            for node in reversed(touched):  # root first: keeps write-through tiers prefix-closed
                for t in range(1, self.n_tiers):
                    tier = tiers[t]
                    if (tier.write_policy == "write_through_selective" and node.entries[t] is None
                            and node.entries[t - 1] is not None and node.hit_count >= tier.write_through_hits
                            and node.alive):
                        self._write_through(node, t, now_s)

    # --- request flow (HBM) ----------------------------------------------------------------------
    def pin(self, node: TNode) -> None:
        while node.parent is not None:
            node.lock_ref += 1
            node = node.parent

    def unpin(self, node: TNode) -> None:
        hbm = self.tiers[0]
        on_candidate = hbm.policy.on_candidate
        below_in_hbm = False  # the path's node below this one is HBM-resident
        while node.parent is not None:
            node.lock_ref -= 1
            if node.lock_ref < 0:
                raise InvariantViolation(f"negative lock_ref on {node!r}")
            entry = node.entries[0]
            if node.lock_ref == 0 and entry is not None:
                hbm.policy.on_release(entry)
                # A node with an HBM child is no HBM leaf: skip the children scan for it.
                if not below_in_hbm and hbm.is_evictable(entry):
                    on_candidate(entry)
            below_in_hbm = entry is not None
            node = node.parent

    def reserve(self, n_blocks: int, now_s: float) -> bool:
        """Make room in HBM for ``n_blocks`` (evicting, i.e. demoting, as needed)."""
        if n_blocks <= 0:
            return True
        hbm = self.tiers[0]
        shortfall = hbm.used_blocks + n_blocks - hbm.capacity_blocks
        if shortfall > 0 and not self.evict(shortfall, now_s, "capacity"):
            return False
        hbm.used_blocks += n_blocks
        hbm.reserved_blocks += n_blocks
        return True

    def release(self, n_blocks: int) -> None:
        hbm = self.tiers[0]
        if n_blocks > hbm.reserved_blocks:
            raise InvariantViolation(f"releasing {n_blocks} blocks but only {hbm.reserved_blocks} reserved")
        hbm.used_blocks -= n_blocks
        hbm.reserved_blocks -= n_blocks

    def evict(self, n_blocks: int, now_s: float, reason: str = "capacity", tier: int = 0) -> bool:
        """Free at least ``n_blocks`` blocks of tier ``tier``; False if not enough are evictable."""
        t = self.tiers[tier]
        freed = 0
        while freed < n_blocks:
            victim = t.policy.pop_victim(now_s)
            if victim is None:
                return False
            if not t.is_evictable(victim):
                raise InvariantViolation(f"policy {t.policy.registered_name} chose a non-evictable entry {victim!r} in {t.name}")
            take = min(len(victim.node.keys), n_blocks - freed)
            self.remove_tail(victim.node, take, reason, tier, now_s)
            freed += take
        return True

    def remove_tail(self, node: TNode, n_blocks: int, reason: str, tier: int = 0, now_s: float = 0.0) -> None:
        """Move the last ``n_blocks`` blocks of ``node`` out of ``tier``: copy them down first
        if the next tier takes demotions, then free them here; drop them from the tree if they
        are resident nowhere then."""
        if n_blocks < len(node.keys):
            self._split(node, len(node.keys) - n_blocks)
        t = self.tiers[tier]
        nxt = tier + 1
        if nxt < self.n_tiers and node.entries[nxt] is None and self.tiers[nxt].write_policy == "write_back":
            if self._write(node, nxt, now_s):
                self.demoted_blocks[nxt] += len(node.keys)
        self._leave(node, tier, reason)
        if not node.resident_anywhere():
            self._drop(node, reason)
            return
        if tier == 0:
            # A node leaving HBM stays in the tree; its parent may now be an HBM leaf.
            parent = node.parent
            if parent.parent is not None and parent.entries[0] is not None and t.is_evictable(parent.entries[0]):
                t.policy.on_candidate(parent.entries[0])
        if self.merge_runs:
            self._merge_around(node)

    def _leave(self, node: TNode, t: int, reason: str) -> None:
        tier = self.tiers[t]
        entry = node.entries[t]
        n = len(node.keys)
        entry.alive = False
        node.entries[t] = None
        node.parent.tier_children[t] -= 1
        tier.used_blocks -= n
        tier.evicted_blocks += n
        tier.evicted_by_reason[reason] = tier.evicted_by_reason.get(reason, 0) + n
        tier.policy.on_remove(entry, n, reason)
        parent = node.parent
        if t != 0 and parent.parent is not None:
            pentry = parent.entries[t]
            if pentry is not None and tier.is_evictable(pentry):
                tier.policy.on_candidate(pentry)

    def _drop(self, node: TNode, reason: str) -> None:
        """Remove ``node`` (resident nowhere, or about to be) and its subtree from the tree."""
        parent = node.parent
        del parent.children[node.keys[0]]
        stack = [node]
        while stack:
            cur = stack.pop()
            stack.extend(cur.children.values())
            for t, entry in enumerate(cur.entries):
                if entry is not None:
                    if cur.lock_ref or entry.io_ref:
                        raise InvariantViolation(f"dropping pinned orphan {cur!r}")
                    self._leave(cur, t, reason if cur is node else "orphaned")
            cur.alive = False
            self.dropped_blocks += len(cur.keys)
            if self.kv_listener is not None:
                self.kv_listener.blocks_removed(cur.keys)
        for t, entry in enumerate(parent.entries):
            if entry is not None and parent.parent is not None and self.tiers[t].is_evictable(entry):
                self.tiers[t].policy.on_candidate(entry)

    def _mergeable(self, upper: TNode, lower: TNode) -> bool:
        """``lower`` is ``upper``'s only child and the two may be one run (module docstring)."""
        if (upper.parent is None or len(upper.children) != 1 or upper.lock_ref or lower.lock_ref
                or upper.loading or lower.loading or upper.load_tiers or lower.load_tiers
                or upper.last_access_s != lower.last_access_s
                or (self._merge_needs_equal_hits and upper.hit_count != lower.hit_count)):
            return False
        for up, low in zip(upper.entries, lower.entries):
            if (up is None) != (low is None) or (up is not None and (up.io_ref or low.io_ref)):
                return False
        return True

    def _merge_around(self, node: TNode) -> None:
        """Merge ``node`` into its parent and/or its only child into it, where allowed."""
        parent = node.parent
        if self._mergeable(parent, node):
            self._merge(parent, node)
            node = parent
        if len(node.children) == 1:
            child = next(iter(node.children.values()))
            if self._mergeable(node, child):
                self._merge(node, child)

    def _merge(self, upper: TNode, lower: TNode) -> None:
        """Append ``lower``'s run to ``upper`` (its parent), which takes its children; ``lower``
        leaves the tree. Capacity is unchanged (the same blocks, in one node)."""
        upper.keys.extend(lower.keys)
        upper.children = lower.children
        for child in upper.children.values():
            child.parent = upper
        upper.tier_children = lower.tier_children
        # Ties between leaves of equal key are broken by node id: take the id of the leaf the
        # unmerged tree would rank (as a trim in place renews its node's id).
        upper.node_id = lower.node_id
        lower.alive = False
        lower.children = {}
        lower.keys = []   # stale heap items may hold ``lower`` a while; its blocks live on in ``upper``
        for t, entry in enumerate(lower.entries):
            if entry is not None:
                entry.alive = False   # its heap items are skipped from now on
                lower.entries[t] = None   # no node <-> entry cycle left for the collector
                up = upper.entries[t]
                up.heap_version += 1  # its old heap items carry the old end block: stale
                self.tiers[t].policy.on_candidate(up)
        self.merged_nodes += 1

    def _write(self, node: TNode, t: int, now_s: float) -> bool:
        """Copy ``node`` into lower tier ``t`` (evicting there as needed). False if no room."""
        tier = self.tiers[t]
        n = len(node.keys)
        if n > tier.capacity_blocks:
            return False
        shortfall = tier.used_blocks + n - tier.capacity_blocks
        if shortfall > 0:
            # The eviction (and the demotions it cascades into) must neither split this node
            # nor drop an ancestor (with this node in its subtree): pin their copies meanwhile.
            guarded = []
            anc = node
            while anc.parent is not None:
                for entry in anc.entries:
                    if entry is not None:
                        entry.io_ref += 1
                        guarded.append(entry)
                anc = anc.parent
            try:
                ok = self.evict(shortfall, now_s, "capacity", t)
            finally:
                self._release_io(guarded)
            if not ok or not node.alive:
                return False
        tier.used_blocks += n
        self._enter(node, t, now_s)
        if self.on_transfer is not None:
            self.on_transfer(self.tiers[t - 1].name, tier.name, n)
        nxt = t + 1
        if nxt < self.n_tiers and self.tiers[nxt].write_policy == "write_through" and node.entries[nxt] is None:
            self._write_through(node, nxt, now_s)
        return True

    def _write_through(self, node: TNode, t: int, now_s: float) -> None:
        parent = node.parent
        if parent.parent is not None and parent.entries[t] is None:
            return  # keep write-through tiers prefix-closed (HiCache)
        if self._write(node, t, now_s):
            self.written_through_blocks[t] += len(node.keys)

    def commit(self, node: TNode, keys: list[int], start_block: int, n_reserved: int, now_s: float) -> TNode:
        """As :meth:`RadixCache.commit`: attach ``keys`` below ``node`` using reserved HBM blocks.
        Existing nodes that are not HBM-resident (recomputed instead of loaded) become
        HBM-resident again, using the reservation."""
        hbm = self.tiers[0]
        if len(keys) > n_reserved:
            raise InvariantViolation(f"committing {len(keys)} blocks with only {n_reserved} reserved")
        if node.parent is not None and node.end_block != start_block:
            raise InvariantViolation(f"commit at block {start_block} below a node ending at {node.end_block}")
        pos = 0
        n = len(keys)
        used = 0
        fresh_nodes = []
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None:
                break
            common = _common_prefix(child.keys, keys, pos)
            if common < len(child.keys):
                child = self._split(child, common)
            child.lock_ref += 1
            if child.entries[0] is None:
                used += len(child.keys)
                fresh_nodes.append(child)
            node = child
            pos += common
        fresh = keys[pos:]
        if fresh and self.kv_listener is not None:
            self.kv_listener.blocks_stored(fresh)
        if fresh and self._can_extend(node):
            # As RadixCache with merge_runs: the request's own childless leaf, held only in HBM,
            # grows in place, so a session's calls do not add a node each (paths stay short).
            node.keys.extend(fresh)
            used += len(fresh)
            hbm.inserted_blocks += len(fresh)
            fresh = ()
        if fresh:
            child = self._new_node(node, list(fresh), start_block + pos, now_s)
            child.lock_ref = 1
            node.children[fresh[0]] = child
            node = child
            used += len(fresh)
            fresh_nodes.append(child)
        hbm.reserved_blocks -= used
        surplus = n_reserved - used
        if surplus:
            self.release(surplus)
        for fresh_node in fresh_nodes:
            self._enter(fresh_node, 0, now_s)
            self._free_exclusive_copies(fresh_node)
        self._touch_path(node, now_s, hit=False)
        if self.n_tiers > 1 and self.tiers[1].write_policy == "write_through":
            for fresh_node in fresh_nodes:
                if fresh_node.entries[1] is None and fresh_node.alive:
                    self._write_through(fresh_node, 1, now_s)
        return node

    def _can_extend(self, node: TNode) -> bool:
        """Whether a commit may extend ``node`` in place: the HBM policy merges runs, the node is
        the committing request's own childless HBM leaf with no copy below HBM and no transfer in
        flight, and no lower tier writes through (a new run would owe it a copy)."""
        hbm_entry = node.entries[0]
        return (self.policy.merge_runs and node.parent is not None and not node.children
                and node.lock_ref == 1 and hbm_entry is not None and not hbm_entry.io_ref
                and not node.loading and not any(node.entries[1:])
                and all(tier.write_policy == "write_back" for tier in self.tiers[1:]))

    # --- loads ---------------------------------------------------------------------------------
    def begin_load(self, deepest: TNode) -> int:
        """Pin every non-HBM node on the path to ``deepest`` for an in-flight load to HBM.
        The caller has reserved HBM blocks for them and pins the path itself. Returns blocks."""
        blocks = 0
        node = deepest
        lower = range(1, self.n_tiers)  # entries[0] is None on these nodes
        while node.parent is not None and node.entries[0] is None:
            node.loading += 1
            entries = node.entries
            pinned = tuple([t for t in lower if entries[t] is not None])
            for t in pinned:
                entries[t].io_ref += 1
            if node.load_tiers is None:
                node.load_tiers = [pinned]
            else:
                node.load_tiers.append(pinned)
            blocks += len(node.keys)
            node = node.parent
        return blocks

    @staticmethod
    def _load_pins(node: TNode, newest: bool = False) -> list[TierEntry]:
        """Pop the oldest (or newest) in-flight load's pinned copies of ``node`` (see
        :meth:`begin_load`)."""
        tiers = node.load_tiers.pop(-1 if newest else 0) if node.load_tiers else ()
        if not node.load_tiers:
            node.load_tiers = None
        out = []
        for t in tiers:
            entry = node.entries[t]
            if entry is None:
                raise InvariantViolation(f"load-pinned copy of {node!r} in tier {t} disappeared")
            out.append(entry)
        return out

    def cancel_load(self, deepest: TNode) -> None:
        """Undo :meth:`begin_load` (the request could not get HBM room)."""
        released = []
        node = deepest
        while node.parent is not None and node.loading > 0 and node.entries[0] is None:
            node.loading -= 1
            released.extend(self._load_pins(node, newest=True))
            node = node.parent
        self._release_io(released)

    def finish_load(self, deepest: TNode, n_reserved: int, now_s: float) -> dict[int, int]:
        """The load begun with :meth:`begin_load` arrived: its blocks become HBM-resident using
        ``n_reserved`` reserved blocks (any surplus, e.g. blocks another request recomputed
        meanwhile, is released). Returns loaded blocks by source tier."""
        by_source: dict[int, int] = {}
        hbm = self.tiers[0]
        node = deepest
        arrived = []
        released = []
        while node.parent is not None and node.loading > 0:
            node.loading -= 1
            released.extend(self._load_pins(node))
            if node.entries[0] is None:
                arrived.append(node)
            node = node.parent
        self._release_io(released)
        used = 0
        for node in reversed(arrived):
            source = self.source_tier(node)
            n = len(node.keys)
            used += n
            by_source[source] = by_source.get(source, 0) + n
            self.loaded_blocks[source] += n
            self._enter(node, 0, now_s)
        if used > n_reserved:
            raise InvariantViolation(f"load of {used} blocks with only {n_reserved} reserved")
        hbm.reserved_blocks -= used
        if n_reserved - used:
            self.release(n_reserved - used)
        for node in arrived:
            self._free_exclusive_copies(node)
        return by_source

    def _release_io(self, entries: list[TierEntry]) -> None:
        """Drop one transfer pin from each entry; lazy policy heaps may have discarded entries
        seen pinned, so re-announce the ones that became evictable."""
        for entry in entries:
            entry.io_ref -= 1
        for entry in entries:
            if entry.alive and entry.io_ref == 0 and entry.tier.is_evictable(entry):
                entry.tier.policy.on_candidate(entry)

    def _free_exclusive_copies(self, node: TNode) -> None:
        """Exclusive tiers give up their copy once the block is in HBM."""
        for t in range(1, self.n_tiers):
            entry = node.entries[t]
            if entry is not None and not self.tiers[t].inclusive and entry.io_ref == 0:
                self._leave(node, t, "promoted")

    def stage(self, node: TNode, t: int, now_s: float) -> bool:
        """Copy ``node`` from a lower tier into tier ``t`` (prefetch staging into DRAM)."""
        if node.entries[t] is not None:
            return True
        if not node.alive:
            return False
        ok = self._write(node, t, now_s)
        if ok:
            for s in range(t + 1, self.n_tiers):
                entry = node.entries[s]
                if entry is not None and not self.tiers[s].inclusive and entry.io_ref == 0:
                    self._leave(node, s, "promoted")
        return ok

    # --- prefetch (HiCache L3 -> DRAM staging) and tool-gap swap-out ------------------------------
    def begin_prefetch(self, deepest: TNode) -> "PrefetchPin":
        """Pin (transfer pins) every copy of every node from the root to ``deepest`` while a
        prefetch stages part of that path into DRAM ahead of a request's admission: nothing on
        the path can be evicted, split by eviction, or dropped until :meth:`end_prefetch`.

        Which tiers were pinned is recorded per node; a node another lookup splits meanwhile
        inherits the record of the node below it (a split's upper part sits right above its
        lower part on the path), so copies made later (a concurrent request's recompute, the
        staging itself) are never unpinned by mistake."""
        pin = PrefetchPin(deepest)
        node = deepest
        while node.parent is not None:
            mask = tuple(t for t, entry in enumerate(node.entries) if entry is not None)
            for t in mask:
                node.entries[t].io_ref += 1
            pin.masks[node] = mask
            node = node.parent
        return pin

    def _pinned_path(self, pin: "PrefetchPin") -> list[tuple[TNode, tuple]]:
        """(node, pinned tiers) from ``pin.deepest`` up to the root's child."""
        out = []
        mask: tuple = ()
        node = pin.deepest
        while node.parent is not None:
            mask = pin.masks.get(node, mask)
            out.append((node, mask))
            node = node.parent
        return out

    def stage_prefetched(self, pin: "PrefetchPin", node: TNode, n_blocks: int, now_s: float) -> int:
        """The first ``n_blocks`` blocks of ``node`` (on the pinned path) arrived in DRAM (tier 1)
        from a lower tier: copy them there (splitting ``node`` if only part arrived) and keep the
        new copy pinned until :meth:`end_prefetch`. An exclusive source tier frees its copy at
        once. Returns the blocks staged (0 if DRAM had no room or the blocks were already there)."""
        mask = dict(self._pinned_path(pin)).get(node)
        if mask is None or not node.alive or not 0 < n_blocks <= len(node.keys):
            return 0
        target = node
        if n_blocks < len(node.keys):
            target = self._split(node, n_blocks)
            pin.masks[target] = mask
        if target.entries[1] is not None:
            return 0
        if not self.stage(target, 1, now_s):
            return 0
        target.entries[1].io_ref += 1
        kept = [1]
        for t in mask:
            entry = target.entries[t]
            if t >= 2 and not self.tiers[t].inclusive and entry is not None:
                entry.io_ref -= 1
                if entry.io_ref == 0:
                    self._leave(target, t, "promoted")
                continue
            kept.append(t)
        pin.masks[target] = tuple(sorted(kept))
        n = len(target.keys)
        pin.staged_blocks += n
        return n

    def next_to_stage(self, pin: "PrefetchPin") -> tuple[TNode, int] | None:
        """The first node (from the root) of the pinned path with no HBM or DRAM copy, and the
        lower tier it would be read from; None if the whole path is in HBM or DRAM."""
        for node, _ in reversed(self._pinned_path(pin)):
            if node.entries[0] is None and node.entries[1] is None:
                return node, self.source_tier(node)
        return None

    def end_prefetch(self, pin: "PrefetchPin") -> None:
        """Release the pins of :meth:`begin_prefetch` (and of the staged copies). Idempotent."""
        if pin.released:
            return
        pin.released = True
        released = []
        for node, mask in self._pinned_path(pin):
            for t in mask:
                entry = node.entries[t]
                if entry is None:
                    raise InvariantViolation(f"prefetch-pinned copy of {node!r} in tier {t} disappeared")
                released.append(entry)
        self._release_io(released)
        for node, _ in self._pinned_path(pin):
            if node.entries[0] is not None and not node.loading:
                self._free_exclusive_copies(node)

    def swap_out_path(self, deepest: TNode, now_s: float, reason: str = "tool_demote") -> int:
        """InferCept-style swap at a tool call: move the unpinned HBM-leaf chain ending at
        ``deepest`` to tier 1, copying each node there first whatever tier 1's write policy
        (unlike :meth:`demote_path`, a swap never drops KV), then freeing HBM. Stops at a shared
        or pinned node, or when tier 1 has no room. Returns blocks moved out of HBM."""
        if self.n_tiers < 2:
            return 0
        hbm = self.tiers[0]
        moved = 0
        node = deepest
        while node.parent is not None and node.alive and node.entries[0] is None:
            node = node.parent
        while node.parent is not None and node.alive:
            entry = node.entries[0]
            if entry is None or not hbm.is_evictable(entry):
                break
            n = len(node.keys)
            if node.entries[1] is None:
                if not self._write(node, 1, now_s):
                    break
                self.demoted_blocks[1] += n
            parent = node.parent
            self._leave(node, 0, reason)
            moved += n
            node = parent
        if node.parent is not None and node.entries[0] is not None and hbm.is_evictable(node.entries[0]):
            hbm.policy.on_candidate(node.entries[0])
        return moved

    def demote_path(self, deepest: TNode, now_s: float, reason: str = "tool_demote") -> int:
        """Evict the unpinned HBM-leaf chain ending at ``deepest`` from HBM (demoting it as the
        write policies say). Stops at shared or pinned nodes. Returns blocks moved out of HBM."""
        moved = 0
        hbm = self.tiers[0]
        node = deepest
        while node.parent is not None and node.alive:
            entry = node.entries[0]
            if entry is None:
                node = node.parent
                continue
            if not hbm.is_evictable(entry):
                break
            parent = node.parent
            n = len(node.keys)
            self.remove_tail(node, n, reason, 0, now_s)
            moved += n
            node = parent
        return moved

    def expire(self, now_s: float, reason: str = "ttl_expiry") -> int:
        """TTL expiry in HBM (an expired block is demoted like an evicted one)."""
        return self.tiers[0].expire(now_s, reason)

    def invalidate(self, keys: list[int], from_block: int, reason: str = "mutation") -> int:
        """Context mutation: drop the sequence's own unshared tail at positions ``>= from_block``
        from every tier (those blocks can never be hit again). Stops at pinned, loading or shared
        nodes. Returns blocks dropped from the tree."""
        node = self.match(keys, 0.0, touch=False).node
        freed = 0
        while (node.parent is not None and node.alive and node.end_block > from_block and not node.children
               and node.lock_ref == 0 and node.loading == 0 and not any(e is not None and e.io_ref for e in node.entries)):
            parent = node.parent
            take = node.end_block - max(node.start_block, from_block)
            whole = take == len(node.keys)
            if not whole:
                self._split(node, len(node.keys) - take)
                parent = node.parent
            self._drop(node, reason)
            freed += take
            if not whole:
                break
            node = parent
        return freed

    # --- inspection ----------------------------------------------------------------------------
    def iter_nodes(self):
        return iter_subtree(self.root)

    def check_invariants(self) -> None:
        resident = [0] * self.n_tiers
        for node in self.iter_nodes():
            if not node.alive or not node.keys:
                raise InvariantViolation(f"dead or empty node {node!r} in the tree")
            if not node.resident_anywhere() and not node.loading:
                raise InvariantViolation(f"{node!r} is resident nowhere but still in the tree")
            if node.parent.parent is not None and node.start_block != node.parent.end_block:
                raise InvariantViolation(f"{node!r} does not continue its parent")
            if node.entries[0] is not None and node.parent.parent is not None and node.parent.entries[0] is None:
                raise InvariantViolation(f"HBM residency not prefix-closed at {node!r}")
            if node.lock_ref and node.entries[0] is None and not node.loading:
                raise InvariantViolation(f"pinned node {node!r} neither in HBM nor loading")
            for t, entry in enumerate(node.entries):
                if entry is not None:
                    if not entry.alive or entry.node is not node or entry.io_ref < 0:
                        raise InvariantViolation(f"bad entry {entry!r}")
                    resident[t] += len(node.keys)
            for t in range(self.n_tiers):
                in_tier = sum(1 for child in node.children.values() if child.entries[t] is not None)
                if node.tier_children[t] != in_tier:
                    raise InvariantViolation(f"{node!r}: {node.tier_children[t]} children counted in tier {t}, {in_tier} there")
            exclusive_copies = sum(1 for t, e in enumerate(node.entries) if e is not None and t > 0 and not self.tiers[t].inclusive)
            if exclusive_copies and sum(1 for e in node.entries if e is not None) > 1 and not node.loading:
                raise InvariantViolation(f"{node!r} resident in an exclusive tier and another tier")
        for tier in self.tiers:
            if resident[tier.index] + tier.reserved_blocks != tier.used_blocks:
                raise InvariantViolation(f"{tier.name}: resident {resident[tier.index]} + reserved {tier.reserved_blocks} != used {tier.used_blocks}")
            if tier.used_blocks > tier.capacity_blocks:
                raise InvariantViolation(f"{tier.name}: used {tier.used_blocks} > capacity {tier.capacity_blocks}")

    def pinned_blocks(self) -> int:
        return sum(len(n.keys) for n in self.iter_nodes() if n.lock_ref > 0 and n.entries[0] is not None) + self.reserved_blocks
