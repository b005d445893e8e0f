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

Memory: the index holds every block resident on any worker, which in a long run of a cluster
with large lower tiers is tens of millions. The masks are held in maps dense over the key
allocator's ids (:class:`~agentsim.cache.key_map.DenseKeyMap`, one word per 64 workers per key
of the span) rather than a dict (about 100 bytes a key, plus an int object per mask). Told the
number of workers, the last word is only as wide as its workers need (1, 2, 4 or 8 bytes): one
rack's 18 workers cost 4 bytes a key, four racks' 72 cost 8 + 1.

More than 64 workers: each word is bisected on its own (a worker's view is prefix-closed, so
each word's masks shrink along the keys too) and the per-word answers are joined, so a lookup
never assembles a wide mask key by key; a word that holds no worker with the first block costs
one lookup.
"""

from __future__ import annotations

from agentsim.cache.key_map import DenseKeyMap


class KvIndexer:
    """block key -> bit mask of workers holding it, fed by :meth:`apply_stored` / :meth:`apply_removed`."""

    def __init__(self, n_workers: int | None = None) -> None:
        """``n_workers``: workers ``0 .. n_workers - 1`` may publish (the words are sized for
        them; a worker beyond is an error); None: any worker number (8-byte words)."""
        if n_workers is not None and n_workers <= 0:
            raise ValueError("n_workers must be positive")
        self.n_workers = n_workers
        #: Word ``w``: key -> bits of workers ``64 w .. 64 w + 63`` holding it (0: none).
        self._words: list[DenseKeyMap] = []
        self._word(0 if n_workers is None else n_workers - 1)
        self.stored_events = 0
        self.removed_events = 0

    def __len__(self) -> int:
        """Keys held by at least one worker."""
        if len(self._words) == 1:
            return len(self._words[0])
        keys: set[int] = set()
        for word in self._words:
            base = word.base
            keys.update(base + i for i, v in enumerate(word.values) if v)
            keys.update(word.far)
        return len(keys)

    def _word(self, worker: int) -> DenseKeyMap:
        if self.n_workers is not None and not 0 <= worker < self.n_workers:
            raise ValueError(f"worker {worker} outside the indexer's {self.n_workers} workers")
        while worker >> 6 >= len(self._words):
            self._words.append(DenseKeyMap(self._typecode(len(self._words))))
        return self._words[worker >> 6]

    def _typecode(self, index: int) -> str:
        """Word ``index``'s array type: 8 bytes, or only as wide as its workers need."""
        if self.n_workers is None:
            return "Q"
        bits = min(64, self.n_workers - 64 * index)
        return "B" if bits <= 8 else "H" if bits <= 16 else "I" if bits <= 32 else "Q"

    def apply_stored(self, worker: int, keys: list[int]) -> None:
        """Worker ``worker`` now holds the blocks ``keys``."""
        self.stored_events += 1
        bit = 1 << (worker & 63)
        word = self._word(worker)
        values, base = word.values, word.base
        size = len(values)
        added = 0
        for key in keys:
            i = key - base
            if 0 <= i < size:             # the common case, inline: a key of the dense span
                mask = values[i]
                if not mask:
                    added += 1
                values[i] = mask | bit
            else:
                word.count += added           # set() may re-base, which reads the count
                added = 0
                word.set(key, word.get(key) | bit)
                values, base = word.values, word.base
                size = len(values)
        word.count += added

    def apply_removed(self, worker: int, keys: list[int]) -> None:
        """Worker ``worker`` no longer holds the blocks ``keys``."""
        self.removed_events += 1
        keep = ~(1 << (worker & 63))
        word = self._word(worker)
        values, base = word.values, word.base
        size = len(values)
        removed = 0
        for key in keys:
            i = key - base
            if 0 <= i < size:
                mask = values[i]
                if mask:
                    mask &= keep
                    values[i] = mask
                    if not mask:
                        removed += 1
            else:
                mask = word.get(key) & keep
                if mask:
                    word.set(key, mask)
                else:
                    word.pop(key)
        word.count -= removed

    def holders(self, key: int) -> int:
        """The bit mask of workers holding block ``key`` (0: none)."""
        words = self._words
        if len(words) == 1:
            return words[0].get(key)
        mask = 0
        for index, word in enumerate(words):
            mask |= word.get(key) << (64 * index)
        return mask

    def overlap_blocks(self, keys: list[int]) -> dict[int, int]:
        """worker -> number of leading blocks of ``keys`` it holds (workers holding none omitted)."""
        if not len(keys):
            return {}
        words = self._words
        if len(words) == 1:
            return _word_overlaps(words[0], keys, 0, {})
        overlaps: dict[int, int] = {}
        for index, word in enumerate(words):
            _word_overlaps(word, keys, 64 * index, overlaps)
        return overlaps


def _word_overlaps(word: DenseKeyMap, keys, first_worker: int, overlaps: dict[int, int]) -> dict[int, int]:
    """Add to ``overlaps`` (worker -> leading blocks of ``keys`` held) the workers of ``word``
    (bit ``b`` is worker ``first_worker + b``); returns ``overlaps``."""
    # word.get, inlined (a Python call per lookup was a third of this function's time)
    values, base, far = word.values, word.base, word.far
    size = len(values)
    n = len(keys)
    i = keys[0] - base
    first = values[i] if 0 <= i < size else far.get(keys[0], 0)
    if not first:
        return overlaps
    i = keys[n - 1] - base
    last = (values[i] if 0 <= i < size else far.get(keys[n - 1], 0)) & first
    # Segments [lo, hi] whose end masks differ hold a change; equal end masks mean the whole
    # segment has that mask (the mask only shrinks along the keys).
    stack = [(0, first, n - 1, last)] if first != last else []
    while stack:
        lo, lo_mask, hi, hi_mask = stack.pop()
        if hi - lo == 1:
            dropped = lo_mask & ~hi_mask  # workers whose prefix ends with block lo
            while dropped:
                low_bit = dropped & -dropped
                overlaps[first_worker + low_bit.bit_length() - 1] = hi
                dropped ^= low_bit
            continue
        mid = (lo + hi) // 2
        # Clamped between the ends, so a view that is not prefix-closed cannot loop or widen.
        i = keys[mid] - base
        mid_mask = ((values[i] if 0 <= i < size else far.get(keys[mid], 0)) & lo_mask) | hi_mask
        if mid_mask != lo_mask:
            stack.append((lo, lo_mask, mid, mid_mask))
        if mid_mask != hi_mask:
            stack.append((mid, mid_mask, hi, hi_mask))
    while last:
        low_bit = last & -last
        overlaps[first_worker + low_bit.bit_length() - 1] = n
        last ^= low_bit
    return overlaps
