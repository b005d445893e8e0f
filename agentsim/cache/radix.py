"""A radix tree over KV blocks with runs of blocks per node.

Blocks are identified by integer keys (a chained prefix hash: equal key at equal position means
the whole prefix up to that block is equal). A node holds a *run* of consecutive blocks that
share all state (residency, pins, timestamps): under path-touch every block of a unary chain
carries the same timestamp, so a run is exact, and a 100k-token request costs a handful of node
operations instead of ~1,600 block operations. Matching compares whole runs with C-level list
slice equality (:mod:`agentsim.cache.radix_tree`: nodes and walks); eviction trims a leaf from its
tail by splitting it.

Contracts (checked by :meth:`RadixCache.check_invariants` and the tests):
* ``used_blocks = reserved_blocks + sum(len(node.keys))`` and ``used_blocks <= capacity_blocks``;
* a node with ``lock_ref > 0`` is never evicted; eviction takes only childless nodes, so the
  resident set is prefix-closed;
* request flow: :meth:`match` (path-touch) -> :meth:`pin` the matched node -> :meth:`reserve`
  blocks for the new tokens (may evict, never the pinned prefix) -> :meth:`commit` the new keys
  -> :meth:`unpin` when the request ends.
"""

from __future__ import annotations

from agentsim.cache.pinned import pinned_subtree_blocks
from agentsim.cache.policy import EvictionPolicy
from agentsim.cache.radix_tree import Match, Node, _common_prefix, _new_match, descend, iter_subtree
from agentsim.errors import InvariantViolation


def _is_noop(hook, noop) -> bool:
    """Whether the bound method ``hook`` is the base class's no-op ``noop``."""
    return getattr(hook, "__func__", None) is noop


class RadixCache:
    """One tier's prefix cache of ``capacity_blocks`` blocks ruled by an eviction policy."""

    def __init__(self, capacity_blocks: int, policy: EvictionPolicy, name: str = "hbm"):
        if capacity_blocks <= 0:
            raise ValueError("capacity_blocks must be positive")
        self.name = name
        self.capacity_blocks = int(capacity_blocks)
        self.policy = policy
        self._next_id = 1
        self.root = Node(0, None, [], 0, 0.0)
        self.used_blocks = 0
        self.reserved_blocks = 0
        self.evicted_blocks = 0
        self.evicted_by_reason: dict[str, int] = {}
        self.inserted_blocks = 0
        #: ``flat`` tree mode only: resident blocks whose ancestor was evicted (never hit).
        self.orphan_blocks = 0
        self.orphaned_blocks_total = 0
        #: Optional A1 admission filter (``agentsim.cache.policies.admission``): decides at
        #: unpin whether a released, childless node is kept or freed at once.
        self.admission = None
        #: ``cache.eviction_granularity: node``: an eviction frees its victims' whole nodes.
        self.whole_node_eviction = False
        #: KV events (``cluster/kv_events.py``): told of blocks entering and leaving the cache
        #: (by the serving path; :meth:`serve`, the cache-only replay path, publishes none).
        self.kv_listener = None
        #: Blocks of pinned nodes (``lock_ref > 0``), kept by :meth:`pin`, :meth:`unpin` and the
        #: commits; splits keep both parts' pins and only unpinned nodes are trimmed, merged or
        #: removed. Engine-style admission asks every scheduling pass: a walk of the pinned
        #: subtree there was 63% of a 2,048-client disaggregated row's emulation.
        self.pinned_node_blocks = 0
        policy.bind(self)
        # Hooks a policy leaves as the base class's no-ops (its own or, for a wrapper, its
        # base's bound method) are not called on the hot paths.
        self._notify_lookup = not _is_noop(policy.on_lookup, EvictionPolicy.on_lookup)
        self._notify_release = not _is_noop(policy.on_release, EvictionPolicy.on_release)

    # --- helpers ---------------------------------------------------------------------
    def _new_node(self, parent: Node, keys: list[int], start_block: int, now_s: float) -> Node:
        node = Node(self._next_id, parent, keys, start_block, now_s)
        self._next_id += 1
        return node

    def is_evictable(self, node: Node) -> bool:
        return node.alive and node.lock_ref == 0 and not node.children and node.parent is not None

    @property
    def resident_blocks(self) -> int:
        return self.used_blocks - self.reserved_blocks

    def _split(self, node: Node, offset: int) -> Node:
        """Split ``node`` after ``offset`` blocks; the new upper node takes the first part.

        The upper node inherits all state (pins, timestamps, counts): every block of the run had
        the same state. ``node`` keeps its identity, its children and the tail blocks.
        """
        parent = node.parent
        upper = self._new_node(parent, node.keys[:offset], node.start_block, node.created_s)
        upper.lock_ref = node.lock_ref
        upper.last_access_s = node.last_access_s
        upper.hit_count = node.hit_count
        upper.orphan = node.orphan
        node.keys = node.keys[offset:]
        node.start_block += offset
        parent.children[upper.keys[0]] = upper
        upper.children[node.keys[0]] = node
        node.parent = upper
        self.policy.on_split(upper, node)
        return upper

    # --- request flow ------------------------------------------------------------------
    def match(self, keys: list[int], now_s: float, touch: bool = True) -> Match:
        """Longest cached prefix of ``keys``; with ``touch``, path-touch it and count a hit."""
        node, pos = descend(self.root, keys, self._split)
        if touch:
            if node is not self.root:
                self._touch_path(node, now_s, hit=True)
            if self._notify_lookup:
                self.policy.on_lookup(keys, pos, now_s)
        return _new_match(node, pos)

    def split(self, node: Node, offset: int) -> Node:
        """Split ``node`` after ``offset`` blocks (0 < offset < n_blocks); returns the new upper node.

        For policies that must give parts of a run different state (ghost hits on part of a
        re-inserted run, T-LRU's budget boundary); the cache's accounting is unchanged.
        """
        if not 0 < offset < len(node.keys):
            raise InvariantViolation(f"split of {node!r} at {offset}")
        return self._split(node, offset)

    def _touch_path(self, node: Node, now_s: float, hit: bool) -> None:
        if self.policy.access_leaf_only:
            # The policy only acts on evictable leaves, and every ancestor on the path has a
            # child: stamp the path, notify its deepest node (after stamping it, as below).
            deepest = node
            while node.parent is not None:
                node.last_access_s = now_s
                if hit:
                    node.hit_count += 1
                node = node.parent
            if deepest.parent is not None:
                self.policy.on_access(deepest, now_s, hit)
            return
        on_access = self.policy.on_access
        while node.parent is not None:
            node.last_access_s = now_s
            if hit:
                node.hit_count += 1
            on_access(node, now_s, hit)
            node = node.parent

    def pin(self, node: Node) -> None:
        """Pin ``node`` and all its ancestors (in-flight use)."""
        while node.parent is not None:
            if not node.lock_ref:
                self.pinned_node_blocks += len(node.keys)
            node.lock_ref += 1
            node = node.parent

    def unpin(self, node: Node) -> None:
        """Release one pin on ``node`` and its ancestors; newly unpinned leaves become candidates.

        Nodes whose pin count drops to 0 are reported deepest first to ``policy.on_release``
        (vLLM's tail-first free queue). With an admission filter, a released childless node the
        filter rejects is freed at once (reason ``admission``), which may expose its parent.
        """
        policy = self.policy
        on_candidate = policy.on_candidate
        on_release = policy.on_release if self._notify_release else None
        admission = self.admission
        while node.parent is not None:
            node.lock_ref -= 1
            if node.lock_ref < 0:
                raise InvariantViolation(f"negative lock_ref on {node!r}")
            parent = node.parent
            if node.lock_ref == 0:
                self.pinned_node_blocks -= len(node.keys)
                if on_release is not None:
                    on_release(node)
                if not node.children:
                    if admission is not None and not admission.admit(node, self):
                        self.remove_tail(node, len(node.keys), "admission")
                    else:
                        on_candidate(node)
            node = parent

    def reserve(self, n_blocks: int, now_s: float) -> bool:
        """Make room for ``n_blocks`` new blocks (evicting as needed) and count them as used.

        Returns False, without reserving, if unpinned blocks cannot free enough room; the
        caller must wait or preempt. Blocks evicted while trying stay evicted (as in SGLang).
        """
        if n_blocks <= 0:
            return True
        shortfall = self.used_blocks + n_blocks - self.capacity_blocks
        if shortfall > 0 and not self.evict(shortfall, now_s, "capacity"):
            return False
        self.used_blocks += n_blocks
        self.reserved_blocks += n_blocks
        return True

    def release(self, n_blocks: int) -> None:
        """Return reserved blocks that were not committed (partial blocks, duplicates)."""
        if n_blocks > self.reserved_blocks:
            raise InvariantViolation(f"releasing {n_blocks} blocks but only {self.reserved_blocks} reserved")
        self.used_blocks -= n_blocks
        self.reserved_blocks -= n_blocks

    def evict(self, n_blocks: int, now_s: float, reason: str = "capacity") -> bool:
        """Free at least ``n_blocks`` resident blocks; False if not enough are evictable. Each
        victim gives the blocks still wanted from its tail (or what the policy's
        ``victim_tail_blocks`` says), or its whole node with :attr:`whole_node_eviction` (SGLang's
        ``RadixCache.evict``; may free more than ``n_blocks``)."""
        freed = 0
        policy = self.policy
        tail_rule = policy.victim_tail_blocks
        whole_nodes = self.whole_node_eviction
        while freed < n_blocks:
            victim = policy.pop_victim(now_s)
            if victim is None:
                return False
            if victim.lock_ref or not victim.alive or (victim.children and not policy.allows_orphans):
                raise InvariantViolation(f"policy {policy.registered_name} chose a non-evictable node {victim!r}")
            take = len(victim.keys)
            if not whole_nodes:
                if take > n_blocks - freed:  # min() with two arguments costs ~10x this test
                    take = n_blocks - freed
                if tail_rule is not None:
                    take = tail_rule(victim, take)
            self.remove_tail(victim, take, reason)
            freed += take
        return True

    def remove_tail(self, node: Node, n_blocks: int, reason: str) -> None:
        """Drop the last ``n_blocks`` blocks of leaf ``node`` (all of it if it has no more).

        Only a policy in ``flat`` tree mode (``allows_orphans``) may remove a node with
        children; its resident descendants then become orphans (counted, never hit).
        """
        if n_blocks < len(node.keys):
            policy = self.policy
            if policy.trim_in_place and not node.children:
                # Shorten the leaf: no node is created and the policy re-reads its key. The
                # policy hears of the removal first, while node.keys[-n_blocks:] are the blocks.
                policy.on_remove(node, n_blocks, reason)
                if self.kv_listener is not None:
                    self.kv_listener.blocks_removed(node.keys[-n_blocks:])
                node.keys = node.keys[:-n_blocks]
                if policy.trim_renews_id:
                    node.node_id = self._next_id
                    self._next_id += 1
                if node.orphan:
                    self.orphan_blocks -= n_blocks
                self.used_blocks -= n_blocks
                self.evicted_blocks += n_blocks
                by_reason = self.evicted_by_reason
                by_reason[reason] = by_reason.get(reason, 0) + n_blocks
                if node.lock_ref == 0:
                    policy.on_candidate(node)
                return
            upper = self._split(node, len(node.keys) - n_blocks)
        else:
            upper = node.parent
        node.alive = False
        del upper.children[node.keys[0]]
        if node.orphan:
            self.orphan_blocks -= n_blocks
        if node.children:
            self._orphan_subtree(node)
        self.used_blocks -= n_blocks
        self.evicted_blocks += n_blocks
        self.evicted_by_reason[reason] = self.evicted_by_reason.get(reason, 0) + n_blocks
        self.policy.on_remove(node, n_blocks, reason)
        if self.kv_listener is not None:
            self.kv_listener.blocks_removed(node.keys)
        if upper.parent is not None and not upper.children and upper.lock_ref == 0:
            self.policy.on_candidate(upper)

    def _orphan_subtree(self, node: Node) -> None:
        stack = [child for child in node.children.values() if not child.orphan]
        while stack:
            child = stack.pop()
            child.orphan = True
            if self.kv_listener is not None:  # unreachable: no longer a hit for the router either
                self.kv_listener.blocks_removed(child.keys)
            self.orphan_blocks += len(child.keys)
            self.orphaned_blocks_total += len(child.keys)
            stack.extend(c for c in child.children.values() if not c.orphan)

    def invalidate(self, keys: list[int], from_block: int, reason: str = "mutation") -> int:
        """Context mutation: drop cached blocks of ``keys`` at positions ``>= from_block``.

        Called when an agent rewrites its history (compaction, edits): its old blocks past the
        rewrite offset can never be hit by it again. Only the sequence's own unshared tail is
        dropped: the walk goes up from the deepest cached block and stops at a pinned node, at
        a node other sequences continue (children), or at ``from_block``. Returns blocks freed.
        """
        node = self.match(keys, 0.0, touch=False).node
        freed = 0
        while (node.parent is not None and node.alive and node.end_block > from_block
               and not node.children and node.lock_ref == 0):
            parent = node.parent
            take = node.end_block - max(node.start_block, from_block)
            whole = take == len(node.keys)
            self.remove_tail(node, take, reason)
            freed += take
            if not whole:
                break
            node = parent
        return freed

    def expire(self, now_s: float, reason: str = "ttl_expiry") -> int:
        """Free the nodes the policy reports as expired at ``now_s`` (leaf first); returns blocks freed.

        The engine calls this (through ``policy.on_timer``) at ``policy.next_timer_s()``.
        """
        freed = 0
        pop_expired = self.policy.pop_expired
        while True:
            node = pop_expired(now_s)
            if node is None:
                return freed
            if node.lock_ref or node.children or not node.alive:
                raise InvariantViolation(f"policy {self.policy.registered_name} expired a non-evictable node {node!r}")
            freed += len(node.keys)
            self.remove_tail(node, len(node.keys), reason)

    def commit(self, node: Node, keys: list[int], start_block: int, n_reserved: int, now_s: float) -> Node:
        """Attach ``keys`` (blocks ``start_block...``) below ``node`` using reserved blocks.

        The caller holds a pin on ``node``'s path; the returned deepest node carries that pin
        extended over the new blocks (unpin it when the request ends). Blocks another request
        committed meanwhile are shared, not duplicated, and their reservation is released, as
        is any reservation beyond ``len(keys)``.
        """
        if len(keys) > n_reserved:
            raise InvariantViolation(f"committing {len(keys)} blocks with only {n_reserved} reserved")
        if node.start_block + len(node.keys) != start_block and node.parent is not None:
            raise InvariantViolation(f"commit at block {start_block} below a node ending at {node.end_block}")
        pos = 0
        n = len(keys)
        # Walk blocks that already exist (committed concurrently by a request with the same prefix).
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None:
                break
            run = child.keys
            common = _common_prefix(run, keys, pos)
            if common < len(run):
                child = self._split(child, common)
            if not child.lock_ref:
                self.pinned_node_blocks += len(child.keys)
            child.lock_ref += 1
            node = child
            pos += common
        fresh = keys[pos:]
        if fresh:
            if self.kv_listener is not None:
                self.kv_listener.blocks_stored(fresh)
            if (self.policy.merge_runs and node.parent is not None and not node.children
                    and node.lock_ref == 1 and node.start_block + len(node.keys) == start_block + pos):
                node.keys.extend(fresh)
                self.pinned_node_blocks += len(fresh)
            else:
                child = self._new_node(node, fresh[:], start_block + pos, now_s)  # a copy: the listener may hold ``fresh``
                child.lock_ref = 1
                self.pinned_node_blocks += len(fresh)
                node.children[fresh[0]] = child
                node = child
                self.policy.on_insert(node, now_s)
        # Fresh blocks turn from reserved into resident; the rest of the reservation (blocks
        # that turned out to be shared, and any surplus) is returned.
        self.reserved_blocks -= len(fresh)
        self.inserted_blocks += len(fresh)
        surplus = n_reserved - len(fresh)
        if surplus:
            self.release(surplus)
        self._touch_path(node, now_s, hit=False)
        return node

    def serve(self, keys: list[int], keep: int, now_s: float) -> int:
        """One whole request of a sequential cache-only replay; returns its hit blocks.

        Exactly :meth:`match` (path-touch) and then, if fewer than ``keep`` blocks hit,
        :meth:`pin` -> :meth:`reserve` ``keep - hit`` blocks -> :meth:`commit` ``keys[hit:keep]``
        -> :meth:`unpin`: the same tree changes and the same policy notifications in the same
        order, with the per-request calls fused and the walks that cannot change anything
        skipped (a replay's per-request path is mostly call overhead otherwise).

        Contract: no other request is in flight, so the pins taken here are the only ones on
        the path. For the plain :class:`RadixCache` only: a subclass that overrides the steps
        (the tiered cache) must use them, not this. Raises InvariantViolation if the room for
        the missing blocks cannot be made.
        """
        policy = self.policy
        node, hit = descend(self.root, keys, self._split)  # match ...
        if node is not self.root:
            self._touch_path(node, now_s, hit=True)  # ... with its path-touch
        if self._notify_lookup:
            policy.on_lookup(keys, hit, now_s)
        fresh = keep - hit
        if fresh <= 0:
            return hit  # fully cached: nothing to insert
        self.pin(node)
        # reserve
        shortfall = self.used_blocks + fresh - self.capacity_blocks
        if shortfall > 0 and not self.evict(shortfall, now_s, "capacity"):
            raise InvariantViolation(f"could not reserve {fresh} blocks")
        self.used_blocks += fresh
        self.reserved_blocks += fresh
        new_keys = keys[hit:keep]
        if new_keys[0] in node.children:
            # Blocks committed meanwhile by another request (impossible in a sequential replay,
            # kept exact anyway): the general commit shares them.
            self.unpin(self.commit(node, new_keys, hit, fresh, now_s))
            return hit
        # commit: extend the request's own leaf or attach a new node (as commit(); the node
        # ends at block ``hit``, and ``fresh == len(new_keys)`` leaves no surplus to release).
        if policy.merge_runs and node.parent is not None and not node.children and node.lock_ref == 1:
            node.keys.extend(new_keys)
            self.pinned_node_blocks += fresh
        else:
            child = Node(self._next_id, node, new_keys, hit, now_s)
            self._next_id += 1
            child.lock_ref = 1
            self.pinned_node_blocks += fresh
            node.children[new_keys[0]] = child
            node = child
            policy.on_insert(node, now_s)
        self.reserved_blocks -= fresh
        self.inserted_blocks += fresh
        # The commit's path-touch (hit=False). The match stamped this same path at ``now_s`` (a
        # new node is created with it), so for a policy that acts only on evictable leaves it
        # is a no-op (the deepest node is pinned), as for one whose re-stamp does nothing, or
        # that says this one changes nothing (``restamp_is_noop``).
        if not policy.access_leaf_only and policy.restamp_notifies:
            restamp_is_noop = policy.restamp_is_noop
            if restamp_is_noop is None or not restamp_is_noop(node):
                self._touch_path(node, now_s, hit=False)
        self.unpin(node)
        return hit

    # --- inspection ----------------------------------------------------------------------
    def iter_nodes(self):
        return iter_subtree(self.root)

    def check_invariants(self) -> None:
        """Raise InvariantViolation if accounting, capacity or tree structure is inconsistent."""
        resident = 0
        for node in self.iter_nodes():
            resident += len(node.keys)
            if not node.alive:
                raise InvariantViolation(f"dead node {node!r} still in the tree")
            if node.lock_ref < 0:
                raise InvariantViolation(f"negative lock_ref on {node!r}")
            if node.parent.parent is not None and node.start_block != node.parent.end_block:
                raise InvariantViolation(f"{node!r} does not continue its parent {node.parent!r}")
            if node.lock_ref > 0 and node.parent.parent is not None and node.parent.lock_ref < node.lock_ref:
                raise InvariantViolation(f"{node!r} pinned more than its parent")
            if not node.keys:
                raise InvariantViolation(f"empty node {node!r}")
        if resident + self.orphan_blocks + self.reserved_blocks != self.used_blocks:
            raise InvariantViolation(
                f"{self.name}: resident {resident} + orphans {self.orphan_blocks} + reserved {self.reserved_blocks}"
                f" != used {self.used_blocks}")
        if self.used_blocks > self.capacity_blocks:
            raise InvariantViolation(f"{self.name}: used {self.used_blocks} blocks > capacity {self.capacity_blocks}")
        walked = pinned_subtree_blocks(self.root, lambda node: True)
        if walked != self.pinned_node_blocks:
            raise InvariantViolation(f"{self.name}: pinned nodes hold {walked} blocks, counted {self.pinned_node_blocks}")

    def pinned_blocks(self) -> int:
        """Blocks no eviction can free now: pinned resident runs and reservations."""
        return self.pinned_node_blocks + self.reserved_blocks


__all__ = ["Match", "Node", "RadixCache", "descend", "iter_subtree"]
