"""The KV-aware router's view of every worker's cache, built only from the KV events the
workers publish (blocks stored, blocks removed), like Dynamo's KV indexer.

One global index maps a block key to the set of workers holding it (a bit mask: bit ``w`` for
worker ``w``), so a request costs lookups in one dictionary, however many workers there are; no
worker's tree is walked. Block keys are chained prefix hashes (a key determines its whole prefix),
so "worker ``w`` holds the request's first ``k`` blocks" is "``w`` holds block ``k - 1``".

Overlap query. A worker's cache is prefix-closed (a block is only held with its whole prefix),
and events reach the indexer in the order they happened, so the view is too: along a request's
keys the set of holders can only shrink. :meth:`KvIndexer.overlap_blocks` therefore bisects the
key list for the positions where the set changes, instead of looking up every block (a 100k-token
prompt has ~1,600 blocks of 64 tokens; an agent request typically has 2-3 distinct holder sets:
the shared system and tool prefix on every worker, the session's history on one). Cost:
O(changes x log(blocks)) dictionary lookups. Dynamo walks its radix tree block by block, which
is cheap in Rust and gives the same answer on a prefix-closed view.

A block removed from one position and stored again is just a new bit in the mask; removing a
block the view does not hold (an orphan already reported) does nothing.
"""

from __future__ import annotations


class KvIndexer:
    """block key -> bit mask of workers holding it, fed by :meth:`apply_stored` / :meth:`apply_removed`."""

    def __init__(self) -> None:
        self._holders: dict[int, int] = {}
        self.stored_events = 0
        self.removed_events = 0

    def __len__(self) -> int:
        return len(self._holders)

    def apply_stored(self, worker: int, keys: list[int]) -> None:
        """Worker ``worker`` now holds the blocks ``keys``."""
        self.stored_events += 1
        bit = 1 << worker
        holders = self._holders
        get = holders.get
        for key in keys:
            holders[key] = get(key, 0) | bit

    def apply_removed(self, worker: int, keys: list[int]) -> None:
        """Worker ``worker`` no longer holds the blocks ``keys``."""
        self.removed_events += 1
        keep = ~(1 << worker)
        holders = self._holders
        get = holders.get
        for key in keys:
            mask = get(key)
            if mask is None:
                continue
            mask &= keep
            if mask:
                holders[key] = mask
            else:
                del holders[key]

    def holders(self, key: int) -> int:
        """The bit mask of workers holding block ``key`` (0: none)."""
        return self._holders.get(key, 0)

    def overlap_blocks(self, keys: list[int]) -> dict[int, int]:
        """worker -> number of leading blocks of ``keys`` it holds (workers holding none omitted)."""
        n = len(keys)
        if n == 0:
            return {}
        get = self._holders.get
        first = get(keys[0], 0)
        if not first:
            return {}
        overlaps: dict[int, int] = {}
        last = get(keys[n - 1], 0) & first
        # Segments [lo, hi] whose end masks differ hold a change; equal end masks mean the whole
        # segment has that mask (the mask only shrinks along the keys).
        stack = [(0, first, n - 1, last)] if first != last else []
        while stack:
            lo, lo_mask, hi, hi_mask = stack.pop()
            if hi - lo == 1:
                dropped = lo_mask & ~hi_mask  # workers whose prefix ends with block lo
                while dropped:
                    low_bit = dropped & -dropped
                    overlaps[low_bit.bit_length() - 1] = hi
                    dropped ^= low_bit
                continue
            mid = (lo + hi) // 2
            # Clamped between the ends, so a view that is not prefix-closed cannot loop or widen.
            mid_mask = (get(keys[mid], 0) & lo_mask) | hi_mask
            if mid_mask != lo_mask:
                stack.append((lo, lo_mask, mid, mid_mask))
            if mid_mask != hi_mask:
                stack.append((mid, mid_mask, hi, hi_mask))
        while last:
            low_bit = last & -last
            overlaps[low_bit.bit_length() - 1] = n
            last ^= low_bit
        return overlaps
