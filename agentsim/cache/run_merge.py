"""Run merging for the tiered cache, as a mixin of :class:`~agentsim.cache.tiers.TieredCache` (it
works on the cache's tree and tiers).

A session's leaf grows in place only while it is held in HBM alone; once
it has a copy below, the next call's blocks become a child node. So without merging, a session
that is demoted and loaded back between calls gains a node per call, and every later load,
path-touch and router lookup walks them all (per-request cost grew with session age). When a
node's residency changes, it is merged with its parent or its only child if the two are
resident in exactly the same tiers, unpinned, not in transfer, and were last touched at the
same time (a path-touch stamps a whole path, so a session's own runs are). That is exact only
for policies that rank leaves by a key equal along such a run and keep no other per-node state
(:func:`merges_exactly`: LRU), so it is done only when every tier's policy qualifies; the
merged node keeps the upper node's identity and stats.
"""

from __future__ import annotations

from agentsim.cache.residency import TNode


class RunMerging:
    """Merges a node of a :class:`~agentsim.cache.tiers.TieredCache` with its parent or only child
    when the two are one run in every respect its policies can see (module docstring).

    Needs of the host class: ``tiers``, ``_merge_needs_equal_hits`` and a ``merged_nodes`` counter.
    """

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
