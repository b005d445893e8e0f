"""A provable upper bound on the prefix-cache hits of *every* policy on a request stream.

The ``belady`` policy (furthest next use first over the radix tree's evictable leaves) is a
strong offline *heuristic* in prefix mode, not a proven optimum: MIN's proof is for one block
per request, while a prefix cache serves a request's blocks together, must commit them and
evicts leaves from the tail (issue 22 saw it below LRU by a few hit blocks in a million). This
module computes a number that no policy can exceed, online or offline, under the replay semantics of
:func:`agentsim.cache.sequential.replay_sequence` with the cache capacity ``C`` in blocks.

**The relaxation.** Request ``j`` *references* the blocks of its prompt and of its total (prompt
plus output). A hit is a prompt reference to a block held since that block's previous
reference. After request ``j`` its own first ``f_j = min(|total_j|, C)`` blocks are resident
(the cache commits them) and its deeper ones are not, so at most ``C - f_j`` *other* blocks are
held across that boundary. Any prefix position, any subset of blocks and bypass (not keeping a
block past the request that brought it) are allowed.

**Why it bounds every policy (proof sketch).** Let ``S_j`` be the blocks resident after request
``j``; the cache guarantees ``|S_j| <= C``, and ``S_j`` holds the first ``f_j`` blocks of
request ``j``'s total (its matched prefix is pinned and the rest is committed into reserved
room). A block enters the cache only by the commit of a request whose total contains it. So if
prompt block ``x`` of request ``k`` is a hit and ``i < k`` is the last request before ``k`` that
references ``x``, then ``x`` is in ``S_i, S_(i+1), ..., S_(k-1)``: nothing between ``i`` and ``k``
could have put it back. Each of the policy's hits is therefore a *holding interval* of one
block over the boundaries ``i+1 .. k-1`` (where it is not a block of that boundary's request),
the intervals of one block are disjoint, and the intervals through boundary ``j`` are distinct
blocks of ``S_j`` outside request ``j``'s ``f_j``: at most ``C - f_j``. The hits of any policy
(TTL, pins, admission filters, tree modes, an offline policy such as ``belady``) are such a
family, and the bound is the size of the largest family. Prefix contiguity, the leaf rule and
the forced commit of blocks never used again only remove families, so they cannot raise a
policy above it. A request longer than the cache keeps only its first ``C`` blocks, so its
deeper blocks are not resident after it: their intervals end there (a hit on them would need a
matched prefix longer than the cache).

**Why the sweep finds the largest family.** Choosing the most unit intervals with at most
``C - f_j`` through every point ``j`` is solved exactly by a left-to-right sweep that, wherever
more are open, drops those that end latest (Belady's furthest-next-use rule *with bypass* on
unit blocks; exchange argument: of two intervals open at a point, the one that ends earlier
occupies a subset of the later one's remaining points, so keeping it never raises a later
load). A reference whose next reference to the same block is an output-only one opens an
interval worth nothing (that reference re-inserts the block for free), so it is
dropped at once. ``tests/test_hit_bound.py`` checks the sweep against a linear program of the
same relaxation (integral: interval matrices are totally unimodular) and against every
registered policy on random agent streams.

**Cost.** Each request is two or three *steps* (its prompt, the blocks it leaves resident,
and, only when some request is longer than the cache, its whole total). Blocks that are
referenced by exactly the same steps are interchangeable; the
sweep holds a count per such group (a run of the radix tree of all prompts and totals, from
:func:`agentsim.cache.policies._next_use.build_index`), so an agent stream that re-sends its
history costs a few dozen group references per request, not one per block.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from agentsim.cache.policies._next_use import build_index


@dataclass(frozen=True)
class HitBound:
    """The bound on one stream at one capacity (block counts)."""

    capacity_blocks: int
    requested_blocks: int
    #: No policy hits more prompt blocks of the stream (see the module docstring).
    hit_blocks: int
    #: Prompt blocks referenced before (prompt or output of an earlier request): the bound with
    #: an unbounded cache (compulsory misses only), >= ``hit_blocks``.
    unbounded_hit_blocks: int

    @property
    def hit_ratio(self) -> float:
        return self.hit_blocks / self.requested_blocks if self.requested_blocks else 0.0


def _group_occurrences(sequences: list[Sequence[int]], stride: int):
    """(group weight per slot, step of each occurrence, slot of each occurrence, step of the
    slot's next occurrence in a *later* request or -1), occurrences sorted by step.
    ``sequences[stride * j + m]`` is request ``j``'s ``m``-th key sequence (its step)."""
    slot_of, bounds, positions = build_index(sequences)
    bounds_np = np.asarray(bounds, dtype=np.int64)
    slots = len(bounds_np) - 1
    if slot_of is None:
        weight = np.ones(slots, dtype=np.int64)
    else:
        weight = np.bincount(np.fromiter(slot_of.values(), dtype=np.int64, count=len(slot_of)), minlength=slots)
    pos = np.asarray(positions, dtype=np.int64)  # ascending within each slot
    slot = np.repeat(np.arange(slots, dtype=np.int64), np.diff(bounds_np))
    request = pos // stride
    # Occurrences of one slot in one request form a run; each takes the step that follows the
    # run's last occurrence in the same slot.
    last = np.ones(len(pos), dtype=bool)
    if len(pos) > 1:
        last[:-1] = (slot[1:] != slot[:-1]) | (request[1:] != request[:-1])
    after_last = np.full(len(pos), -1, dtype=np.int64)
    if len(pos) > 1:
        continues = last[:-1] & (slot[1:] == slot[:-1])
        after_last[:-1][continues] = pos[1:][continues]
    run_end = np.flatnonzero(last)
    run_of = np.searchsorted(run_end, np.arange(len(pos)), side="left")
    following = after_last[run_end][run_of] if len(pos) else after_last
    order = np.argsort(pos, kind="stable")
    return weight, pos[order], slot[order], following[order]


def prefix_hit_upper_bound(prompts: Sequence[Sequence[int]], capacity_blocks: int,
                           totals: Sequence[Sequence[int]] | None = None) -> HitBound:
    """The most prompt blocks any policy can hit on ``prompts`` with ``capacity_blocks`` blocks.

    ``prompts[i]`` / ``totals[i]``: request ``i``'s block keys, root first, as given to
    :func:`agentsim.cache.sequential.replay_sequence` (``totals`` default: the prompts; each
    total starts with its prompt; a key determines its prefix, as block hashes do). Exact for
    the relaxation of the module docstring; O(group references * log) time. Raises ValueError
    for a non-positive capacity or a total that does not start with its prompt.
    """
    if capacity_blocks <= 0:
        raise ValueError(f"capacity must be positive, got {capacity_blocks}")
    totals = prompts if totals is None else totals
    if len(totals) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(totals)} totals")
    requested = 0
    longest = 0
    for i, (prompt, total) in enumerate(zip(prompts, totals)):
        n = len(prompt)
        requested += n
        if len(total) > longest:
            longest = len(total)
        # A key determines its prefix (chained block hashes), so a total that holds the
        # prompt's last key at the same depth starts with the prompt: O(1), no copy of the path.
        if total is not prompt and n and (len(total) < n or total[n - 1] != prompt[n - 1]):
            raise ValueError(f"request {i}: its total does not start with its prompt")
    if not prompts:
        return HitBound(capacity_blocks, 0, 0, 0)
    capacity = capacity_blocks
    # Steps of request j: its prompt (stride * j), then the blocks it leaves resident (its total
    # up to the capacity), then, only when some request is longer than the cache, its whole
    # total (the blocks past the capacity are referenced but not kept).
    stride = 3 if longest > capacity else 2
    sequences: list[Sequence[int]] = []
    for prompt, total in zip(prompts, totals):
        sequences.append(prompt)
        if stride == 3:
            sequences.append(total[:capacity])
        sequences.append(total)
    weight_np, step_np, slot_np, following_np = _group_occurrences(sequences, stride)
    edges = np.searchsorted(step_np, np.arange(stride * len(prompts) + 1), side="left").tolist()
    weight = weight_np.tolist()
    slot_at = slot_np.tolist()
    following = following_np.tolist()
    held = [0] * len(weight)       # blocks of each group held across the current boundary
    due = [-1] * len(weight)       # step of the prompt reference a held group waits for
    heap: list[tuple[int, int]] = []  # (-due, group): the group due last is evicted first
    seen = bytearray(len(weight))   # referenced before (for the unbounded count)
    held_total = hits = unbounded = 0  # held_total: blocks held besides the request's own
    for j in range(len(prompts)):
        base = stride * j
        prompt_lo, kept_lo, total_lo, end = edges[base], edges[base + 1], edges[base + stride - 1], edges[base + stride]
        for o in range(prompt_lo, kept_lo):  # prompt references: hits on what was held
            group = slot_at[o]
            hits += held[group]
            if seen[group]:
                unbounded += weight[group]
        # The request's blocks leave the pool of held blocks: its first min(total, C) are
        # resident after it anyway (committed), the rest cannot be (deeper than the cache).
        for o in range(total_lo, end):
            group = slot_at[o]
            seen[group] = 1
            held_total -= held[group]
            held[group] = 0
            due[group] = -1
        room = capacity - min(len(totals[j]), capacity)
        while held_total > room:
            neg_due, group = heap[0]
            if held[group] == 0 or due[group] != -neg_due:
                heapq.heappop(heap)  # superseded entry
                continue
            excess = held_total - room
            if held[group] <= excess:
                held_total -= held[group]
                held[group] = 0
                due[group] = -1
                heapq.heappop(heap)
            else:
                held[group] -= excess
                held_total = room
        for o in range(kept_lo, total_lo if stride == 3 else end):  # the resident ones may stay
            nxt = following[o]
            if nxt >= 0 and nxt % stride == 0:
                group = slot_at[o]
                held_total += weight[group]
                held[group] = weight[group]
                due[group] = nxt
                heapq.heappush(heap, (-nxt, group))
            # else: next referenced as an output (which re-inserts it for free), or never: drop
    return HitBound(capacity_blocks, requested, hits, unbounded)
