"""What one instance's cache lost: block keys -> a code (1 + the tier it lost them from last), held
as runs of consecutive keys.

The recompute split (:mod:`agentsim.engine.recompute`) asks, for the blocks a finished request
missed, which of them its instance had held and lost. Every removal from a tier is recorded, so
on a run with lower tiers a block is recorded up to once per tier it leaves. The keys are the
key allocator's ids, handed out in runs (a session's appended text takes consecutive ids), and a
removal takes a node's tail: a run of consecutive keys, or a few. So the record is a set of
disjoint runs ``[start, end)`` with one code each, adjacent runs of one code joined:

* a removal of ``n`` keys in ``r`` runs costs ``r`` assignments (a bisection and a few list and
  dict operations each), whatever ``n`` (a per-key record cost a Python step per key, and a
  dense array per instance would cost a byte per key of the allocator's span on every instance);
* memory is a few hundred bytes a run, and a tier removing a node piece by piece extends one
  run instead of adding one per piece.

The runs are a sorted list of starts (bisected in C) and a dict from start to ``end << 8 | code``.
An insertion moves the list's tail, which at the few thousand runs an instance holds (3,600 on a
rack after 40 minutes, at most 3,750 on four instances over a day) costs less than the tree
bookkeeping of ``sortedcontainers.SortedDict`` (its positional lookups were 3 us each, most of
the record's time on a day of four instances). A fleet's instances hold far more runs, so the
recompute split keeps one :class:`LossRuns` per bucket of keys (:class:`BucketedLossRuns`).

Contract: :meth:`assign` gives every key of ``[start, end)`` the code (1..255), replacing what
those keys had; :meth:`code` is a key's code, 0 for one never assigned (or dropped);
:meth:`keep_live` forgets the runs below a key that hold no live key.
"""

from __future__ import annotations

from bisect import bisect_right

_CODE_BITS = 8
_CODE_MASK = (1 << _CODE_BITS) - 1


class LossRuns:
    """Disjoint key runs ``[start, end)`` -> code, adjacent runs of one code joined."""

    __slots__ = ("_starts", "_packed")

    def __init__(self) -> None:
        self._starts: list[int] = []
        #: start -> ``end << 8 | code``.
        self._packed: dict[int, int] = {}

    def __len__(self) -> int:
        """Number of runs."""
        return len(self._starts)

    def code(self, key: int) -> int:
        """The code of ``key`` (0: not held)."""
        i = bisect_right(self._starts, key) - 1
        if i < 0:
            return 0
        packed = self._packed[self._starts[i]]
        return packed & _CODE_MASK if key < packed >> _CODE_BITS else 0

    def codes(self, runs) -> list[int]:
        """The code of every key of ``runs`` (``(start, end)`` pairs, as
        :func:`agentsim.workload.key_runs.key_runs` gives a key sequence), in their order."""
        starts, packed_of = self._starts, self._packed
        out: list[int] = []
        for start, end in runs:
            i = bisect_right(starts, start) - 1
            if i < 0:
                i = 0
            pos = start
            n = len(starts)
            while pos < end and i < n:
                run_start = starts[i]
                if run_start >= end:
                    break
                packed = packed_of[run_start]
                run_end = packed >> _CODE_BITS
                i += 1
                if run_end <= pos:
                    continue
                if run_start > pos:
                    out.extend([0] * (run_start - pos))
                    pos = run_start
                upto = run_end if run_end < end else end
                out.extend([packed & _CODE_MASK] * (upto - pos))
                pos = upto
            if pos < end:
                out.extend([0] * (end - pos))
        return out

    def assign(self, start: int, end: int, code: int) -> None:
        """Give every key of ``[start, end)`` (``start < end``) the ``code`` (1..255)."""
        starts, packed_of = self._starts, self._packed
        i = bisect_right(starts, start) - 1
        new_start, new_end = start, end
        if i >= 0:
            left = starts[i]
            packed = packed_of[left]
            left_end, left_code = packed >> _CODE_BITS, packed & _CODE_MASK
            if left_end >= end and left_code == code:
                return                                    # already so
            if left_end > start or (left_end == start and left_code == code):
                if left_code == code:                     # one run with the new one
                    new_start = left
                    del starts[i]
                    del packed_of[left]
                else:
                    if left < start:
                        packed_of[left] = start << _CODE_BITS | left_code   # its head stays
                        i += 1
                    else:
                        del starts[i]
                        del packed_of[left]
                        # It started where the new run does: the run before may end there too.
                        if i > 0:
                            before = starts[i - 1]
                            packed = packed_of[before]
                            if packed >> _CODE_BITS == start and packed & _CODE_MASK == code:
                                new_start = before
                                i -= 1
                                del starts[i]
                                del packed_of[before]
                    if left_end > end:                    # and its tail: nothing else overlaps
                        starts.insert(i, new_start)
                        packed_of[new_start] = new_end << _CODE_BITS | code
                        starts.insert(i + 1, end)
                        packed_of[end] = left_end << _CODE_BITS | left_code
                        return
            else:
                i += 1
        else:
            i = 0
        # Runs from position i start at or after ``start``: drop those starting up to ``end``
        # (the one starting at ``end`` only if it has the same code, joined).
        j = i
        n = len(starts)
        tail = None
        while j < n:
            inner = starts[j]
            if inner > end:
                break
            packed = packed_of[inner]
            inner_end, inner_code = packed >> _CODE_BITS, packed & _CODE_MASK
            if inner == end and inner_code != code:
                break                                     # touches it, another code: stays
            del packed_of[inner]
            j += 1
            if inner_end > end:
                if inner_code == code:
                    new_end = inner_end
                else:
                    tail = (end, packed)
                break
        if tail is None:
            starts[i:j] = [new_start]
        else:
            starts[i:j] = [new_start, tail[0]]
            packed_of[tail[0]] = tail[1]
        packed_of[new_start] = new_end << _CODE_BITS | code

    def keep_live(self, live_starts: list[int], live_ends: list[int], top: int) -> int:
        """Forget the runs below ``top`` that hold no key of the live runs (sorted disjoint
        ``[live_starts[i], live_ends[i])``); returns how many were dropped."""
        starts, packed_of = self._starts, self._packed
        stay = []
        dropped = 0
        for start in starts:
            end = packed_of[start] >> _CODE_BITS
            if end > top:
                stay.append(start)
                continue
            i = bisect_right(live_starts, end - 1) - 1    # the last live run starting before end
            if i >= 0 and live_ends[i] > start:
                stay.append(start)
            else:
                del packed_of[start]
                dropped += 1
        starts[:] = stay
        return dropped

    def items(self) -> list[tuple[int, int, int]]:
        """``(start, end, code)`` of every run, in key order."""
        return [(start, self._packed[start] >> _CODE_BITS, self._packed[start] & _CODE_MASK) for start in self._starts]


#: Keys per bucket of :class:`BucketedLossRuns` (``2**18``): an instance's runs in one bucket
#: number tens to hundreds, so an insertion moves a short list.
BUCKET_BITS = 18


class BucketedLossRuns:
    """:class:`LossRuns` split into buckets of ``2**bucket_bits`` consecutive keys, one
    :class:`LossRuns` each: the same contract, with a run that crosses a bucket's edge held as
    one run per bucket.

    Why: an insertion into one sorted list moves its tail, which grows with the runs. On a fleet
    day an instance's lower tiers lose the blocks of thousands of sessions and a flat list holds
    tens of thousands of runs (an assignment took 4 us at 58,000 runs and 15 us at 220,000,
    against 2 us at 18,000); a bucket holds only the runs of its keys."""

    __slots__ = ("_buckets", "_shift", "_runs")

    def __init__(self, bucket_bits: int = BUCKET_BITS) -> None:
        self._buckets: dict[int, LossRuns] = {}
        self._shift = bucket_bits
        self._runs = 0

    def __len__(self) -> int:
        """Number of runs (a run crossing a bucket's edge counts once per bucket)."""
        return self._runs

    def _pieces(self, start: int, end: int):
        """``(bucket, piece_start, piece_end)`` of ``[start, end)`` cut at the buckets' edges."""
        shift = self._shift
        bucket = start >> shift
        if (end - 1) >> shift == bucket:
            return ((bucket, start, end),)
        pieces = []
        while start < end:
            edge = (bucket + 1) << shift
            piece_end = edge if edge < end else end
            pieces.append((bucket, start, piece_end))
            start, bucket = piece_end, bucket + 1
        return pieces

    def code(self, key: int) -> int:
        """The code of ``key`` (0: not held)."""
        runs = self._buckets.get(key >> self._shift)
        return 0 if runs is None else runs.code(key)

    def codes(self, runs) -> list[int]:
        """The code of every key of ``runs`` (``(start, end)`` pairs), in their order."""
        buckets = self._buckets
        out: list[int] = []
        for start, end in runs:
            for bucket, piece_start, piece_end in self._pieces(start, end):
                held = buckets.get(bucket)
                if held is None:
                    out.extend([0] * (piece_end - piece_start))
                else:
                    out.extend(held.codes(((piece_start, piece_end),)))
        return out

    def assign(self, start: int, end: int, code: int) -> None:
        """Give every key of ``[start, end)`` (``start < end``) the ``code`` (1..255)."""
        buckets = self._buckets
        bucket = start >> self._shift
        # Inside one bucket is the common case: no call to cut the run.
        pieces = ((bucket, start, end),) if (end - 1) >> self._shift == bucket else self._pieces(start, end)
        for bucket, piece_start, piece_end in pieces:
            held = buckets.get(bucket)
            if held is None:
                held = buckets[bucket] = LossRuns()
            starts = held._starts
            before = len(starts)
            held.assign(piece_start, piece_end, code)
            self._runs += len(starts) - before

    def keep_live(self, live_starts: list[int], live_ends: list[int], top: int) -> int:
        """:meth:`LossRuns.keep_live` on every bucket (empty buckets dropped); returns how many
        runs were dropped."""
        dropped = 0
        for bucket in list(self._buckets):
            held = self._buckets[bucket]
            dropped += held.keep_live(live_starts, live_ends, top)
            if not len(held):
                del self._buckets[bucket]
        self._runs -= dropped
        return dropped

    def items(self) -> list[tuple[int, int, int]]:
        """``(start, end, code)`` of every run, in key order (cut at the buckets' edges)."""
        return [item for bucket in sorted(self._buckets) for item in self._buckets[bucket].items()]
