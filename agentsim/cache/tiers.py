"""One radix tree per instance with per-node tier residency (HBM, DRAM, disk, remote).

As in SGLang HiCache, a node of the tree records in which tiers its run of blocks is resident;
it leaves the tree only when it is resident nowhere. Tier 0 is HBM and keeps the request flow of
:class:`~agentsim.cache.radix.RadixCache` (match -> pin -> reserve -> commit -> unpin); tiers
1.. are the lower tiers, top to bottom.

**Policies per tier, unchanged**: every tier has its own capacity accounting and its own
eviction-policy instance, which sees per-tier entries (:mod:`agentsim.cache.residency`).

**Movement.** HBM eviction demotes a block (copy down first, then free) to the next tier if that
tier's write policy is ``write_back``; ``write_through`` tiers received a copy when the block
entered the tier above, ``write_through_selective`` tiers once it had been hit N times (both
only if the parent already has a copy there, so a write-through tier stays prefix-closed, as in
HiCache). Loads copy blocks up; an exclusive tier frees its copy then. A node resident nowhere
leaves the tree, with any descendants (their KV is useless without the prefix). Runs stay runs:
a node is split only when part of it moves.

**Runs merge back** (:mod:`agentsim.cache.run_merge`, a mixin of :class:`TieredCache`): adjacent
runs resident in exactly the same tiers become one node again.

**No SimPy here.** Loads, prefetch and tool-gap moves are in :mod:`agentsim.cache.tier_staging`
(a mixin of :class:`TieredCache`); copies down are reported through ``on_transfer``.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from agentsim.cache.policy import EvictionPolicy
from agentsim.cache.pinned import pinned_subtree_blocks
from agentsim.cache.radix_tree import _common_prefix, descend, iter_subtree
from agentsim.cache.residency import HBM, Tier, TierEntry, TierSpec, TNode, merges_exactly
from agentsim.cache.run_merge import RunMerging
from agentsim.cache.tier_staging import PrefetchPin, TierStaging
from agentsim.errors import InvariantViolation

class Match(NamedTuple):
    node: TNode        # deepest matched node (any tier)
    hit_blocks: int    # matched blocks, all tiers


class TieredCache(RunMerging, TierStaging):
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
        #: Index of the host tier (``TierSpec.host``), which prefetches stage into; None if none.
        self.staging_tier: int | None = next((i for i, spec in enumerate(lower, start=1) if spec.host), None)
        self.on_transfer = on_transfer
        self.policy = policy
        self.dropped_blocks = 0          # blocks that left the tree (resident nowhere)
        self.demoted_blocks = [0] * self.n_tiers   # blocks written into tier t by demotion
        self.written_through_blocks = [0] * self.n_tiers
        self.loaded_blocks = [0] * self.n_tiers    # blocks loaded up from tier t
        #: Adjacent runs with equal residency merge back into one node (:mod:`~agentsim.cache.run_merge`).
        self.merge_runs = all(merges_exactly(tier.policy) for tier in self.tiers)
        # Selective write-through reads per-node hit counts: merge only runs with equal ones.
        self._merge_needs_equal_hits = any(t.write_policy == "write_through_selective" for t in self.tiers[1:])
        self.merged_nodes = 0
        #: KV events (``cluster/kv_events.py``): told of blocks entering and leaving the tree.
        self.kv_listener = None
        #: Blocks of pinned HBM-resident nodes, kept by pin, unpin, commit, _enter and _leave
        #: (engine-style admission asks every pass; a walk cost a rack 30-70 us per request).
        #: Splits keep both parts' pins and residency; merges join unpinned runs only.
        self.pinned_hbm_blocks = 0
        #: ``cache.eviction_granularity: node``: an eviction frees its victims' whole nodes
        #: (SGLang's radix eviction) rather than the blocks still wanted from their tails.
        self.whole_node_eviction = False

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
        if t == 0 and node.lock_ref:
            self.pinned_hbm_blocks += len(node.keys)
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
        pinned = 0
        while node.parent is not None:
            node.lock_ref += 1
            if node.lock_ref == 1 and node.entries[0] is not None:
                pinned += len(node.keys)
            node = node.parent
        self.pinned_hbm_blocks += pinned

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
                self.pinned_hbm_blocks -= len(node.keys)
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
        """Free at least ``n_blocks`` blocks of tier ``tier``; False if not enough are evictable.
        Each victim gives the blocks still wanted from its tail, or all of its node with
        :attr:`whole_node_eviction` (which may free more than ``n_blocks``)."""
        t = self.tiers[tier]
        freed = 0
        while freed < n_blocks:
            victim = t.policy.pop_victim(now_s)
            if victim is None:
                return False
            if not t.is_evictable(victim):
                raise InvariantViolation(f"policy {t.policy.registered_name} chose a non-evictable entry {victim!r} in {t.name}")
            take = len(victim.node.keys)
            if not self.whole_node_eviction and take > n_blocks - freed:
                take = n_blocks - freed
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
        # An exclusive tier takes no copy of a block another tier keeps (_held_elsewhere).
        demote = (nxt < self.n_tiers and node.entries[nxt] is None and self.tiers[nxt].write_policy == "write_back"
                  and not self._held_elsewhere(node, nxt, tier))
        if demote:
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
        if t == 0 and node.lock_ref:
            self.pinned_hbm_blocks -= n
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
        top = node
        recovered = False      # an existing run re-enters HBM (it may hold exclusive copies)
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None:
                break
            common = _common_prefix(child.keys, keys, pos)
            if common < len(child.keys):
                child = self._split(child, common)
            child.lock_ref += 1
            if child.lock_ref == 1 and child.entries[0] is not None:
                self.pinned_hbm_blocks += len(child.keys)
            if child.entries[0] is None:
                used += len(child.keys)
                fresh_nodes.append(child)
                recovered = True
            node = child
            pos += common
        fresh = keys[pos:]
        if fresh and self.kv_listener is not None:
            self.kv_listener.blocks_stored(fresh)
        if fresh and self._can_extend(node):
            # As RadixCache with merge_runs: the request's own childless leaf, held only in HBM,
            # grows in place, so a session's calls do not add a node each (paths stay short).
            node.keys.extend(fresh)
            self.pinned_hbm_blocks += len(fresh)     # the leaf is pinned and in HBM
            used += len(fresh)
            hbm.inserted_blocks += len(fresh)
            fresh = ()
        if fresh:
            child = self._new_node(node, fresh[:], start_block + pos, now_s)  # a copy: the listener may hold ``fresh``
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
        if recovered:   # only a run that existed below HBM can hold exclusive copies
            self._free_exclusive_on_path(node, top)
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
            # An exclusive copy beside another one is allowed only while a transfer pins it (a
            # load in flight, a prefetch staging into the tier): _release_io frees it with the pin.
            exclusive_copies = sum(1 for t, e in enumerate(node.entries)
                                   if e is not None and t > 0 and not self.tiers[t].inclusive and not e.io_ref)
            if exclusive_copies and sum(1 for e in node.entries if e is not None) > 1 and not node.loading:
                raise InvariantViolation(f"{node!r} resident in an exclusive tier and another tier")
        for tier in self.tiers:
            if resident[tier.index] + tier.reserved_blocks != tier.used_blocks:
                raise InvariantViolation(f"{tier.name}: resident {resident[tier.index]} + reserved {tier.reserved_blocks} != used {tier.used_blocks}")
            if tier.used_blocks > tier.capacity_blocks:
                raise InvariantViolation(f"{tier.name}: used {tier.used_blocks} > capacity {tier.capacity_blocks}")
        walked = pinned_subtree_blocks(self.root, lambda n: n.entries[0] is not None)
        if walked != self.pinned_hbm_blocks:
            raise InvariantViolation(f"{walked} pinned HBM blocks in the tree, {self.pinned_hbm_blocks} counted")

    def pinned_blocks(self) -> int:
        """HBM blocks no eviction can free now: pinned resident runs and reservations."""
        return self.pinned_hbm_blocks + self.reserved_blocks


__all__ = ["HBM", "Match", "PrefetchPin", "TieredCache", "Tier", "TierEntry", "TierSpec", "TNode", "merges_exactly"]
