"""What one instance's cache lost: block keys -> a code (1 + the tier it lost them from last), held
as runs of consecutive keys.

The recompute split (:mod:`agentsim.engine.recompute`) asks, for the blocks a finished request
missed, which of them its instance had held and lost. Every removal from a tier is recorded, so
on a run with lower tiers a block is recorded up to once per tier it leaves. The keys are the
key allocator's ids, handed out in runs (a session's appended text takes consecutive ids), and a
removal takes a node's tail: a run of consecutive keys, or a few. So the record is a set of
disjoint runs ``[start, end)`` with one code each, adjacent runs of one code joined:

* a removal of ``n`` keys in ``r`` runs costs ``r`` assignments (a bisection and a few array
  operations each), whatever ``n`` (a per-key record cost a Python step per key, and a dense
  array per instance would cost a byte per key of the allocator's span on every instance);
* memory is 17 bytes a run, and a tier removing a node piece by piece extends one run instead
  of adding one per piece.

The runs are three parallel arrays, sorted by start: starts and ends (unsigned 64-bit: trace
keys use all of int64) and codes (a byte). The starts are bisected in C. An array holds a run in
17 bytes where a sorted list of starts and a dict from start to end and code held about 100
(an int object, a list slot, a dict entry and a second int): on the GB300 rack the record was
9% of what the event loop's memory grew by per request. An insertion moves the arrays' tails,
which at the few thousand runs an instance holds (3,600 on a rack after 40 minutes, at most
3,750 on four instances over a day) costs less than the tree bookkeeping of
``sortedcontainers.SortedDict`` (its positional lookups were 3 us each, most of the record's
time on a day of four instances). A fleet's instances hold far more runs, so the recompute split
keeps one :class:`LossRuns` per bucket of keys (:class:`BucketedLossRuns`).

Contract: :meth:`assign` gives every key of ``[start, end)`` the code (1..255), replacing what
those keys had; :meth:`code` is a key's code, 0 for one never assigned (or dropped);
:meth:`keep_live` forgets the runs below a key that hold no live key.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_right


class LossRuns:
    """Disjoint key runs ``[start, end)`` -> code, adjacent runs of one code joined."""

    __slots__ = ("_starts", "_ends", "_codes")

    def __init__(self) -> None:
        self._starts = array("Q")
        self._ends = array("Q")
        self._codes = array("B")

    def __len__(self) -> int:
        """Number of runs."""
        return len(self._starts)

    def code(self, key: int) -> int:
        """The code of ``key`` (0: not held)."""
        i = bisect_right(self._starts, key) - 1
        if i < 0:
            return 0
        return self._codes[i] if key < self._ends[i] else 0

    def codes(self, runs) -> list[int]:
        """The code of every key of ``runs`` (``(start, end)`` pairs, as
        :func:`agentsim.workload.key_runs.key_runs` gives a key sequence), in their order."""
        starts, ends, codes = self._starts, self._ends, self._codes
        n = len(starts)
        out: list[int] = []
        for start, end in runs:
            i = bisect_right(starts, start) - 1
            if i < 0:
                i = 0
            pos = start
            while pos < end and i < n:
                run_start = starts[i]
                if run_start >= end:
                    break
                run_end = ends[i]
                i += 1
                if run_end <= pos:
                    continue
                if run_start > pos:
                    out.extend([0] * (run_start - pos))
                    pos = run_start
                upto = run_end if run_end < end else end
                out.extend([codes[i - 1]] * (upto - pos))
                pos = upto
            if pos < end:
                out.extend([0] * (end - pos))
        return out

    def assign(self, start: int, end: int, code: int) -> None:
        """Give every key of ``[start, end)`` (``start < end``) the ``code`` (1..255)."""
        starts, ends, codes = self._starts, self._ends, self._codes
        i = bisect_right(starts, start) - 1
        # The common cases first: a run that touches or overlaps no other run, or extends the
        # run of its code that ends where it starts (a node's tail lost piece by piece).
        nxt = i + 1
        if nxt == len(starts) or starts[nxt] > end:
            if i < 0 or ends[i] < start:
                starts.insert(nxt, start)
                ends.insert(nxt, end)
                codes.insert(nxt, code)
                return
            if ends[i] == start and codes[i] == code:
                ends[i] = end
                return
        new_start, new_end = start, end
        lo = i + 1                      # the first run the new one replaces
        head = tail = None              # kept pieces of another code, (start, end, code)
        j = lo                          # the first run not yet looked at
        if i >= 0:
            left_end = ends[i]
            if left_end >= start:       # run i overlaps the new one or touches it
                left_code = codes[i]
                if left_code == code:
                    if left_end >= end:
                        return          # already so
                    new_start = starts[i]
                    lo = i
                elif left_end > start:
                    lo = i
                    left = starts[i]
                    if left < start:
                        head = (left, start, left_code)
                    elif i > 0 and ends[i - 1] == start and codes[i - 1] == code:
                        new_start = starts[i - 1]   # the run before ends where the new one starts
                        lo = i - 1
                    if left_end > end:
                        tail = (end, left_end, left_code)   # nothing else overlaps then
                        j = len(starts)
        if tail is None:
            n = len(starts)
            while j < n:
                inner = starts[j]
                if inner > end:
                    break
                inner_code = codes[j]
                if inner == end and inner_code != code:
                    break               # touches it, another code: stays
                inner_end = ends[j]
                j += 1
                if inner_end > end:
                    if inner_code == code:
                        new_end = inner_end
                    else:
                        tail = (end, inner_end, inner_code)
                    break
            hi = j
        else:
            hi = i + 1
        # Runs lo .. hi - 1 give way to the pieces: overwritten in place, the rest inserted or
        # deleted (one piece for one run is the usual case).
        pieces = [(new_start, new_end, code)]
        if head is not None:
            pieces.insert(0, head)
        if tail is not None:
            pieces.append(tail)
        gone = hi - lo
        at = lo
        for piece_start, piece_end, piece_code in pieces:
            if at < hi:
                starts[at] = piece_start
                ends[at] = piece_end
                codes[at] = piece_code
            else:
                starts.insert(at, piece_start)
                ends.insert(at, piece_end)
                codes.insert(at, piece_code)
            at += 1
        if gone > len(pieces):
            del starts[at:hi]
            del ends[at:hi]
            del codes[at:hi]

    def keep_live(self, live_starts: list[int], live_ends: list[int], top: int) -> int:
        """Forget the runs below ``top`` that hold no key of the live runs (sorted disjoint
        ``[live_starts[i], live_ends[i])``); returns how many were dropped."""
        starts, ends, codes = self._starts, self._ends, self._codes
        keep = []
        for i in range(len(starts)):
            end = ends[i]
            if end > top:
                keep.append(i)
                continue
            k = bisect_right(live_starts, end - 1) - 1
            if k >= 0 and live_ends[k] > starts[i]:
                keep.append(i)
        dropped = len(starts) - len(keep)
        if dropped:
            self._starts = array("Q", [starts[i] for i in keep])
            self._ends = array("Q", [ends[i] for i in keep])
            self._codes = array("B", [codes[i] for i in keep])
        return dropped

    def items(self) -> list[tuple[int, int, int]]:
        """``(start, end, code)`` of every run, in key order."""
        return list(zip(self._starts, self._ends, self._codes))

    def state_bytes(self) -> int:
        """Bytes the runs' arrays hold (their spare room included)."""
        return sum(map(sys.getsizeof, (self._starts, self._ends, self._codes)))


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
            # The run count read from the array itself (same module): ``len(held)`` is a method
            # call each side of every assignment, on the recompute split's hottest path.
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

    def state_bytes(self) -> int:
        """Bytes the buckets' runs hold, with the buckets' own objects and the dict of them."""
        return sys.getsizeof(self._buckets) + sum(sys.getsizeof(runs) + runs.state_bytes()
                                                  for runs in self._buckets.values())
