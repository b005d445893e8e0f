"""Staging for the tiered cache: copies down to lower tiers, loads up into HBM, prefetch of lower-tier hits into the
host tier (DRAM; as HiCache's L3 -> L2 prefetch) and tool-gap swap-out, as a mixin of
:class:`~agentsim.cache.tiers.TieredCache` (it works on the cache's tree and tiers).

**No SimPy here.** Copies down are accounted at once; their bytes are reported through the
cache's ``on_transfer(src_tier, dst_tier, n_blocks)`` callback, which the serving instance turns
into link transfers (so they contend with loads). Loads are two-phase: :meth:`TierStaging.begin_load`
pins the source copies (in every tier, so nothing splits or drops them) and
:meth:`TierStaging.finish_load` makes them HBM-resident when the transfer is done.
"""

from __future__ import annotations

from agentsim.cache.residency import TierEntry, TNode
from agentsim.errors import InvariantViolation


class PrefetchPin:
    """The pins one prefetch holds (see :meth:`TieredCache.begin_prefetch`)."""

    __slots__ = ("deepest", "masks", "staged_blocks", "released")

    def __init__(self, deepest: TNode):
        self.deepest = deepest
        self.masks: dict[TNode, tuple] = {}   # node -> tiers whose copies this prefetch pinned
        self.staged_blocks = 0
        self.released = False


class TierStaging:
    """Copies down (demotion, write-through), loads, prefetch and tool-gap moves of a
    :class:`~agentsim.cache.tiers.TieredCache`."""

    # --- copies down (write policies) ---------------------------------------------------------
    def _write(self, node: TNode, t: int, now_s: float, report: bool = True) -> bool:
        """Copy ``node`` into lower tier ``t`` (evicting there as needed). False if no room.
        ``report``: tell ``on_transfer`` of the copy from tier ``t - 1`` (a copy down); a
        prefetch's staging moved its bytes over the staging path itself."""
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
        if report and self.on_transfer is not None:
            self.on_transfer(self.tiers[t - 1].name, tier.name, n)
        nxt = t + 1
        if nxt < self.n_tiers and self.tiers[nxt].write_policy == "write_through" and node.entries[nxt] is None:
            self._write_through(node, nxt, now_s)
        return True

    def _held_elsewhere(self, node: TNode, t: int, leaving: int) -> bool:
        """Whether exclusive tier ``t`` must not take a copy of ``node`` as it leaves tier
        ``leaving``: another tier keeps one, a tier above (a DRAM victim HBM still holds) or
        below (an HBM victim loaded from an inclusive disk, which kept its copy). Copying would
        leave the block in two tiers; it stays where the other copy is, so no KV is lost."""
        if self.tiers[t].inclusive:
            return False
        return any(entry is not None for s, entry in enumerate(node.entries) if s != leaving and s != t)

    def _write_through(self, node: TNode, t: int, now_s: float) -> None:
        parent = node.parent
        if parent.parent is not None and parent.entries[t] is None:
            return  # keep write-through tiers prefix-closed (HiCache)
        if self._write(node, t, now_s):
            self.written_through_blocks[t] += len(node.keys)

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
        # Exclusive tiers give up what arrived.
        self._free_exclusive_on_path(deepest)
        return by_source

    def _free_exclusive_on_path(self, deepest: TNode, top: TNode | None = None) -> None:
        """Free the exclusive tiers' copies of every HBM-resident node (no load in flight) from
        ``deepest`` up to ``top`` (exclusive; None: the root). Walk the path rather than the
        nodes that entered HBM: a policy may split a node as it enters (2Q and S3-FIFO split
        runs by ghost membership), and the new upper part holds the same copies."""
        node = deepest
        while node is not top and node.parent is not None:
            if node.entries[0] is not None and not node.loading:
                self._free_exclusive_copies(node)
            node = node.parent

    def _release_io(self, entries: list[TierEntry]) -> None:
        """Drop one transfer pin from each entry; lazy policy heaps may have discarded entries
        seen pinned, so re-announce the ones that became evictable. An exclusive copy kept
        only because a transfer pinned it while the block arrived elsewhere goes now."""
        for entry in entries:
            entry.io_ref -= 1
        for entry in entries:
            if not entry.alive or entry.io_ref:
                continue
            if not entry.tier.inclusive and not entry.node.loading:
                self._free_exclusive_copies(entry.node)
            if entry.alive and entry.tier.is_evictable(entry):
                entry.tier.policy.on_candidate(entry)

    def _free_exclusive_copies(self, node: TNode) -> bool:
        """An exclusive tier holds a block only where no other tier does: once the block has a
        copy in HBM or another tier, the exclusive tiers' unpinned copies go. A copy pinned by a
        transfer stays until the pin is released (:meth:`_release_io` comes back here).
        Returns whether a copy was freed."""
        freed = False
        for t in range(1, self.n_tiers):
            entry = node.entries[t]
            if entry is None or self.tiers[t].inclusive or entry.io_ref:
                continue
            if any(other is not None for s, other in enumerate(node.entries) if s != t):
                self._leave(node, t, "promoted")
                freed = True
        return freed

    def stage(self, node: TNode, t: int, now_s: float) -> bool:
        """Copy ``node`` from a lower tier into tier ``t`` (prefetch staging into the host tier;
        the caller moved the bytes, so no copy down is reported)."""
        if node.entries[t] is not None:
            return True
        if not node.alive:
            return False
        ok = self._write(node, t, now_s, report=False)
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
        """The first ``n_blocks`` blocks of ``node`` (on the pinned path) arrived in the host
        tier (:attr:`staging_tier`) from a tier below it: copy them there (splitting ``node`` if
        only part arrived) and keep the new copy pinned until :meth:`end_prefetch`. An exclusive
        source tier frees its copy at once. Returns the blocks staged (0 if the host tier had no
        room or the blocks were already there)."""
        host = self.staging_tier
        mask = dict(self._pinned_path(pin)).get(node)
        if host is None or mask is None or not node.alive or not 0 < n_blocks <= len(node.keys):
            return 0
        target = node
        if n_blocks < len(node.keys):
            target = self._split(node, n_blocks)
            pin.masks[target] = mask
        if target.entries[host] is not None:
            return 0
        if not self.stage(target, host, now_s):
            return 0
        target.entries[host].io_ref += 1
        kept = [host]
        for t in mask:
            entry = target.entries[t]
            if t > host and not self.tiers[t].inclusive and entry is not None:
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
        """The first node (from the root) of the pinned path with no HBM or host-tier copy, and
        the lower tier it would be read from; None if the whole path is in HBM or the host tier."""
        host = self.staging_tier
        for node, _ in reversed(self._pinned_path(pin)):
            if node.entries[0] is None and (host is None or node.entries[host] is None):
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
            if node.entries[1] is None and not self._held_elsewhere(node, 1, 0):
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
