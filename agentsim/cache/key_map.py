"""A map from block keys to positive ints, dense over the key allocator's ids.

The block keys of a simulation are consecutive ints from one allocator
(:mod:`agentsim.workload.content`), so a map over them is nearly an array. A ``dict`` costs
about 70-100 bytes a key (its entry and hash slot, amortised over its growth, plus an int object
for every value above 256); an ``array`` of 4-byte (or 8-byte) unsigned values indexed by
``key - base`` costs 4 (8) bytes a key of its span, set or not. No library offers this mix (numpy's scalar indexing
costs about three times an ``array``'s from Python, and these maps are read and written one key
at a time on the eviction path), hence this small class.

Contract: values are positive ints that fit the typecode (``"I"``, the default: up to
``2**32 - 1``; a map of narrower values may :meth:`~DenseKeyMap.retype` to a wider one); 0 means
absent (:meth:`get` returns it for a key never set). Keys inside the dense span, or close above
it (the span grows by a quarter, so appends of new keys are amortised O(1)), live in the array;
any other key (a trace's hash ids, negative keys, keys below a span that moved up) lives in a
dict, so every key works. When the span must grow while fewer than a quarter of its slots are
set (the low keys of a long run were removed; a few, such as shared prefixes, remain), its start
moves up past the low ones first and those few move to the dict, so a long run's span follows
its live keys.

Growth by a quarter rather than doubling: the span's unset tail (keys not yet allocated) is
at most a fifth of it instead of half. The array is resized in place (``realloc``, which for
large blocks remaps pages rather than copying), so the smaller steps cost little.
"""

from __future__ import annotations

from array import array

import numpy as np

#: Keys this far above the dense span still extend it (rather than going to the dict).
_GROWTH_SLACK = 65536
#: A growing span grows by at least this fraction of its size (amortised O(1) appends).
_GROWTH_SHIFT = 2       # size >> 2: a quarter
#: Spans shorter than this are never re-based (the move would save little).
_REBASE_MIN = 1 << 16
#: A re-base may move this many set keys to the dict, or an eighth of them if more: enough for a
#: run's shared prefixes (always resident, allocated first) not to pin the span's start.
_REBASE_MOVES = 4096


#: Values converted at a time when a map widens.
_RETYPE_CHUNK = 1 << 20


class DenseKeyMap:
    """``key -> value`` (positive int), an ``array('I')`` over a span of keys plus a dict beyond it."""

    __slots__ = ("values", "base", "far", "count")

    def __init__(self, typecode: str = "I") -> None:
        self.values = array(typecode)
        #: The key stored at ``values[0]``.
        self.base = 0
        self.far: dict[int, int] = {}
        #: Number of keys set (dense and far).
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def get(self, key: int) -> int:
        i = key - self.base
        if 0 <= i < len(self.values):
            return self.values[i]
        return self.far.get(key, 0)

    def set(self, key: int, value: int) -> None:
        """Set ``key`` to ``value`` (> 0)."""
        values = self.values
        i = key - self.base
        size = len(values)
        if 0 <= i < size:
            if not values[i]:
                self.count += 1
            values[i] = value
            return
        if size <= i < 2 * size + _GROWTH_SLACK:
            if size >= _REBASE_MIN and 4 * (self.count - len(self.far)) < size and self._rebase():
                self.set(key, value)      # the span moved up: place the key again
                return
            self._grow_to(i + 1)
            if not values[i]:
                self.count += 1
            values[i] = value
            return
        if key not in self.far:
            self.count += 1
        self.far[key] = value

    def _rebase(self) -> bool:
        """Move the span's start up past at most ``max(_REBASE_MOVES, an eighth)`` of its set
        keys (those go to the dict), if that frees at least half the span; returns whether it
        moved."""
        values = self.values
        view = np.frombuffer(values, dtype=np.dtype(values.typecode))
        set_at = np.flatnonzero(view)
        del view                                # the array cannot shrink while exported
        allowed = max(len(set_at) // 8, _REBASE_MOVES)
        cut = int(set_at[allowed]) if allowed < len(set_at) else len(values)
        if 2 * cut < len(values):
            return False
        base = self.base
        for i in set_at[:allowed].tolist():
            self.far[base + i] = values[i]
        del values[:cut]
        self.base = base + cut
        return True

    def _grow_to(self, slots: int) -> None:
        """Extend the span to at least ``slots`` slots, and by at least a quarter (amortised O(1)
        appends); the dict's keys it now covers move into the array."""
        values = self.values
        size = len(values)
        values.frombytes(bytes(values.itemsize * (max(size + (size >> _GROWTH_SHIFT), slots, 1024) - size)))
        if self.far:
            self._absorb_far()

    def _absorb_far(self) -> None:
        """Move the dict's keys that the grown span now covers into the array."""
        base, values = self.base, self.values
        end = base + len(values)
        for key in [k for k in self.far if base <= k < end]:
            values[key - base] = self.far.pop(key)

    def retype(self, typecode: str) -> None:
        """Hold the values in arrays of ``typecode`` from now on (a wider type: values keep)."""
        old = self.values
        if array(typecode).itemsize < old.itemsize:
            raise ValueError(f"cannot narrow a {old.typecode!r} map to {typecode!r}")
        wider = array(typecode)
        view = np.frombuffer(old, dtype=np.dtype(old.typecode))
        dtype = np.dtype(typecode)
        for start in range(0, len(view), _RETYPE_CHUNK):   # no whole-length temporary beside the two
            wider.frombytes(view[start:start + _RETYPE_CHUNK].astype(dtype).view(np.uint8))
        del view
        self.values = wider

    def pop(self, key: int) -> int:
        """Unset ``key``; returns its value (0 if it was not set)."""
        i = key - self.base
        values = self.values
        if 0 <= i < len(values):
            value = values[i]
            if value:
                values[i] = 0
                self.count -= 1
            return value
        value = self.far.pop(key, 0)
        if value:
            self.count -= 1
        return value

    def state_bytes(self) -> int:
        """Memory held (an estimate for the dict: 100 bytes a key)."""
        return self.values.itemsize * len(self.values) + 100 * len(self.far)
