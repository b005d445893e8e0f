"""Helpers shared by admission and tool-gap movement to move KV up a memory hierarchy."""

from __future__ import annotations

from agentsim.cache.radix_tree import _common_prefix
from agentsim.cache.tiers import TieredCache


def below_hbm_segments(cache: TieredCache, start, deepest) -> list[tuple[int, int, object]]:
    """Below-HBM nodes from ``start`` (exclusive) to ``deepest`` grouped into runs of equal
    source tier: [(tier, blocks, last node)]; stops at a node another load is bringing in."""
    path = []
    node = deepest
    while node is not start and node.parent is not None:
        path.append(node)
        node = node.parent
    segments: list[list] = []
    for node in reversed(path):
        if node.loading:
            break
        src = cache.source_tier(node)
        if segments and segments[-1][0] == src:
            segments[-1][1] += len(node.keys)
            segments[-1][2] = node
        else:
            segments.append([src, len(node.keys), node])
    return [tuple(seg) for seg in segments]


def load_along_path(links, tier_name: str, size_bytes: float):
    """SimPy process body: move ``size_bytes`` from ``tier_name`` to HBM over each link in turn
    (disk and remote stage through DRAM)."""
    for link in links.load_path(tier_name):
        yield link.transfer(size_bytes)


def stream_through(env, links, size_bytes: float):
    """SimPy process body: move ``size_bytes`` through every link in ``links`` at once (a network
    transfer streams through the sender's and the receiver's NIC together), so it takes as long
    as its slowest link: latency + bytes / that link's current share of its bandwidth."""
    if len(links) == 1:
        yield links[0].transfer(size_bytes)
    else:
        yield env.all_of([link.transfer(size_bytes) for link in links])


def tier_prefix_blocks(cache: TieredCache, keys: list[int], tier: int) -> int:
    """Prefix blocks of ``keys`` resident in tier ``tier`` of ``cache`` (each tier is
    prefix-closed, so the walk stops at the first node without a copy there); changes nothing.
    A shared remote store's reader asks this of every other instance's share."""
    node = cache.root
    pos = 0
    n = len(keys)
    while pos < n:
        child = node.children.get(keys[pos])
        if child is None or child.entries[tier] is None:
            break
        run = child.keys
        length = len(run)
        if keys[pos:pos + length] == run:
            pos += length
        else:
            pos += _common_prefix(run, keys, pos)
            break
        node = child
    return pos
