"""Counting a cache's pinned blocks without walking its whole tree."""

from __future__ import annotations


def pinned_subtree_blocks(root, counts) -> int:
    """Blocks of the pinned nodes below ``root`` for which ``counts(node)`` holds. Pins cover
    whole paths, so the pinned nodes are a subtree at ``root``: no unpinned subtree is walked
    (engine-style admission asks every scheduling pass, and a long run's tree keeps growing)."""
    total = 0
    stack = [child for child in root.children.values() if child.lock_ref > 0]
    while stack:
        node = stack.pop()
        if counts(node):
            total += len(node.keys)
        for child in node.children.values():
            if child.lock_ref > 0:
                stack.append(child)
    return total
