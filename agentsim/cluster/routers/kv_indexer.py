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
with large lower tiers is tens or hundreds of millions. Each key holds a *holder-set id* in a map
dense over the key allocator's ids (:class:`~agentsim.cache.key_map.DenseKeyMap`), and a table
maps ids to the workers' bit masks (Python ints, so any number of workers). Far fewer sets are
alive than keys (thousands on a rack, against millions of keys), so one, two or four bytes a key
do where a mask word per key cost 4 bytes a key on one rack and 9 for four racks' 72 workers.
When a width's ids are all taken, one pass counts the ids in use (``numpy.bincount`` over the map,
C speed) and frees the rest; if fewer than a quarter come free, the map widens (one byte, two,
four), and at four bytes the table may double instead. So a reclaim is paid for by the ids it
frees, the table stays within a few times the sets alive, and the answers do not depend on which
id a set has.
"""

from __future__ import annotations

import numpy as np

from agentsim.cache.key_map import DenseKeyMap


#: Id 0 is the empty set (a key no worker holds: "absent" in the map).
_EMPTY = 0
#: The map's next width when ids run out: one byte, two, four.
_WIDER = {"B": "H", "H": "I"}
#: Ids counted at a time by a reclaim (``numpy.bincount`` copies its input to 8-byte ints).
_COUNT_CHUNK = 1 << 20
#: The step cache is cleared when it holds this many steps (it would grow with every set seen).
_STEPS_KEPT = 1 << 16
#: The largest id a map of each width holds.
_LARGEST_ID = {"B": 0xFF, "H": 0xFFFF, "I": 0xFFFF_FFFF}


class KvIndexer:
    """block key -> bit mask of workers holding it, fed by :meth:`apply_stored` / :meth:`apply_removed`."""

    def __init__(self, n_workers: int | None = None) -> None:
        """``n_workers``: workers ``0 .. n_workers - 1`` may publish (a worker beyond is an
        error); None: any worker number."""
        if n_workers is not None and n_workers <= 0:
            raise ValueError("n_workers must be positive")
        self.n_workers = n_workers
        #: key -> holder-set id (0: no worker holds it).
        self._ids = DenseKeyMap("B")
        #: holder-set id -> bit mask of its workers (bit ``w``: worker ``w``); free ids hold 0.
        #: Grows an id at a time up to what the map's width can hold.
        self._masks: list[int] = [0]
        #: bit mask -> its id, for the sets that have one.
        self._id_of: dict[int, int] = {0: _EMPTY}
        #: Reclaimed ids no key holds, taken from the end (so the lowest first).
        self._free: list[int] = []
        #: With no free id, a table this long is reclaimed before it grows: every id the map's
        #: width holds, or (four bytes) twice the table when a reclaim freed too few. A reclaim
        #: frees at least a quarter of the table or lets it double, so reclaims are amortised
        #: over the ids they free and the table stays within about 2.7 times the most sets
        #: alive at once.
        self._reclaim_at = _LARGEST_ID["B"] + 1
        #: (id, worker bit, stored?) -> the id after the change: most changes repeat.
        self._steps: dict[tuple[int, int, bool], int] = {}
        self.stored_events = 0
        self.removed_events = 0
        self.reclaims = 0

    def __len__(self) -> int:
        """Keys held by at least one worker."""
        return len(self._ids)

    def _bit(self, worker: int) -> int:
        if self.n_workers is not None and not 0 <= worker < self.n_workers:
            raise ValueError(f"worker {worker} outside the indexer's {self.n_workers} workers")
        if worker < 0:
            raise ValueError(f"worker {worker} is negative")
        return 1 << worker

    def _step(self, old: int, bit: int, stored: bool) -> int:
        """The id of holder set ``old`` with worker ``bit`` added (``stored``) or taken away.
        May reclaim ids (then every cached step is forgotten) or widen the map."""
        step = self._steps.get((old, bit, stored))
        if step is not None:
            return step
        mask = self._masks[old]
        mask = mask | bit if stored else mask & ~bit
        new = self._id_of.get(mask)
        if new is None:
            masks = self._masks
            if not self._free and len(masks) >= self._reclaim_at:
                self._reclaim()                # may widen the map
            if self._free:
                new = self._free.pop()
                masks[new] = mask
            else:
                new = len(masks)
                if new > _LARGEST_ID["I"]:
                    raise OverflowError(f"the KV indexer holds more than {new - 1:,} sets of holders")
                masks.append(mask)
            self._id_of[mask] = new
        steps = self._steps
        if len(steps) >= _STEPS_KEPT:
            steps.clear()
        steps[(old, bit, stored)] = new
        return new

    def _reclaim(self) -> None:
        """Free every id no key holds; widen the map if that frees fewer than a quarter of its
        ids. Called when every id the map's width can hold is taken."""
        self.reclaims += 1
        ids = self._ids
        values = ids.values
        masks, id_of = self._masks, self._id_of
        view = np.frombuffer(values, dtype=np.dtype(values.typecode))
        counts = np.zeros(len(masks), dtype=np.int64)
        for start in range(0, len(view), _COUNT_CHUNK):   # bincount makes an 8-byte copy of its input
            counts += np.bincount(view[start:start + _COUNT_CHUNK], minlength=len(masks))
        del view                                # the array cannot resize while exported
        used = counts.tolist()
        for held in ids.far.values():
            used[held] += 1
        free = [i for i in range(len(masks) - 1, 0, -1) if not used[i]]
        for i in free:
            if masks[i]:
                del id_of[masks[i]]
                masks[i] = 0
        self._steps.clear()
        self._free = free
        width = values.typecode
        if 4 * len(free) >= len(masks):
            self._reclaim_at = len(masks)      # the freed ids first; reclaim again when they are gone
        elif width in _WIDER:                  # too few came free: a wider map, a longer table
            width = _WIDER[width]
            ids.retype(width)
            self._reclaim_at = _LARGEST_ID[width] + 1 if width in _WIDER else 2 * len(masks)
        else:
            self._reclaim_at = min(_LARGEST_ID[width] + 1, 2 * len(masks))

    def apply_stored(self, worker: int, keys: list[int]) -> None:
        """Worker ``worker`` now holds the blocks ``keys``."""
        self._apply(worker, keys, True)
        self.stored_events += 1

    def apply_removed(self, worker: int, keys: list[int]) -> None:
        """Worker ``worker`` no longer holds the blocks ``keys`` (one it does not hold: ignored)."""
        self._apply(worker, keys, False)
        self.removed_events += 1

    def _apply(self, worker: int, keys: list[int], stored: bool) -> None:
        bit = self._bit(worker)
        ids = self._ids
        values, base = ids.values, ids.base
        size = len(values)
        # Consecutive keys mostly have the same holder set: the last step is kept at hand.
        last_old, last_new = -1, 0
        counted = 0                   # keys that went from no holder to one (minus the reverse)
        for key in keys:
            i = key - base
            if 0 <= i < size:             # the common case, inline: a key of the dense span
                old = values[i]
                if old != last_old:
                    new = self._step(old, bit, stored)
                    values, base = ids.values, ids.base      # a step may widen the map
                    size = len(values)
                    last_old, last_new = old, new
                    i = key - base
                else:
                    new = last_new
                if new != old:
                    values[i] = new
                    if not old:
                        counted += 1
                    elif not new:
                        counted -= 1
            else:
                ids.count += counted          # set() may re-base, which reads the count
                counted = 0
                old = ids.get(key)
                new = self._step(old, bit, stored)
                last_old, last_new = old, new
                if new:
                    ids.set(key, new)
                else:
                    ids.pop(key)
                values, base = ids.values, ids.base
                size = len(values)
        ids.count += counted

    def holders(self, key: int) -> int:
        """The bit mask of workers holding block ``key`` (0: none)."""
        return self._masks[self._ids.get(key)]

    def overlap_blocks(self, keys: list[int]) -> dict[int, int]:
        """worker -> number of leading blocks of ``keys`` it holds (workers holding none omitted)."""
        n = len(keys)
        if not n:
            return {}
        # self.holders, inlined (a Python call per lookup was a third of this method's time)
        ids, masks = self._ids, self._masks
        values, base, far = ids.values, ids.base, ids.far
        size = len(values)
        overlaps: dict[int, int] = {}
        i = keys[0] - base
        first = masks[values[i] if 0 <= i < size else far.get(keys[0], 0)]
        if not first:
            return overlaps
        i = keys[n - 1] - base
        last = masks[values[i] if 0 <= i < size else far.get(keys[n - 1], 0)] & first
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
            i = keys[mid] - base
            mid_mask = (masks[values[i] if 0 <= i < size else far.get(keys[mid], 0)] & lo_mask) | hi_mask
            if mid_mask != lo_mask:
                stack.append((lo, lo_mask, mid, mid_mask))
            if mid_mask != hi_mask:
                stack.append((mid, mid_mask, hi, hi_mask))
        while last:
            low_bit = last & -last
            overlaps[low_bit.bit_length() - 1] = n
            last ^= low_bit
        return overlaps
