"""Nodes of the radix tree over KV blocks and the walks over them, shared by
:class:`~agentsim.cache.radix.RadixCache` and :class:`~agentsim.cache.tiers.TieredCache`.

A node holds a *run* of consecutive blocks that share all state; :func:`descend` matches a key
sequence run by run with C-level list-slice comparisons and :func:`iter_subtree` walks a subtree
depth first. No accounting or policy lives here.
"""

from __future__ import annotations

from typing import NamedTuple


class Node:
    """A run of blocks. ``start_block`` is the position of its first block in the sequence."""

    __slots__ = (
        "node_id", "parent", "children", "keys", "start_block", "lock_ref", "last_access_s",
        "created_s", "hit_count", "heap_version", "alive", "policy_data", "orphan",
    )

    def __init__(self, node_id: int, parent: "Node | None", keys: list[int], start_block: int, now_s: float):
        self.node_id = node_id
        self.parent = parent
        self.children: dict[int, Node] = {}
        self.keys = keys
        self.start_block = start_block
        self.lock_ref = 0
        self.last_access_s = now_s
        self.created_s = now_s
        self.hit_count = 0
        self.heap_version = 0
        self.alive = True
        self.policy_data = None
        #: True once an ancestor was evicted in ``flat`` tree mode: resident but unreachable.
        self.orphan = False

    @property
    def n_blocks(self) -> int:
        return len(self.keys)

    @property
    def end_block(self) -> int:
        return self.start_block + len(self.keys)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Node(id={self.node_id}, blocks={self.start_block}..{self.end_block}, lock={self.lock_ref}, t={self.last_access_s})"


class Match(NamedTuple):
    node: Node
    hit_blocks: int


def _new_match(node: Node, hit_blocks: int) -> Match:
    """``Match(node, hit_blocks)`` without the generated ``__new__``'s extra Python frame."""
    return tuple.__new__(Match, (node, hit_blocks))


def iter_subtree(root):
    """Every node below ``root`` (depth first; ``root`` itself excluded)."""
    stack = list(root.children.values())
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children.values())


def descend(root, keys: list[int], split) -> tuple:
    """Walk ``keys`` down the tree from ``root``: (deepest matched node, matched blocks).

    Whole runs are compared with one list-slice comparison; a run that matches only in part is
    cut by ``split(node, offset)`` (which returns the upper part) so the match ends on a node.
    """
    node = root
    pos = 0
    n = len(keys)
    children = node.children
    while pos < n:
        child = children.get(keys[pos])
        if child is None:
            break
        run = child.keys
        length = len(run)
        if keys[pos:pos + length] == run:
            pos += length
            node = child
            children = child.children
            continue
        common = _common_prefix(run, keys, pos)
        node = split(child, common)
        pos += common
        break
    return node, pos


def _common_prefix(run: list[int], keys: list[int], pos: int) -> int:
    """Length of the common prefix of ``run`` and ``keys[pos:]`` (binary search on slices)."""
    low, high = 0, min(len(run), len(keys) - pos)
    while low < high:
        mid = (low + high + 1) // 2
        if run[:mid] == keys[pos:pos + mid]:
            low = mid
        else:
            high = mid - 1
    return low
