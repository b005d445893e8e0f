"""Why waiting requests wait: time in the queue split by cause.

Admission is FCFS with head-of-line blocking, so at any moment every waiting request waits for
the same reason, the one that ended the last admission pass: no batch slot (``slot``), no KV
memory (``kv``), every request left held by its own prefetch or return prefetch (``load``), or,
when the pass admitted all it could see, the iteration in progress (``step``: a request that
arrives mid-iteration joins at its end). One clock per cause accumulates time spent in that
state; a request stores the clocks when it enters the queue and adds the differences when it
leaves, so the split costs O(1) per request and per pass, and its parts sum to its time queued.
"""

from __future__ import annotations

SLOT, KV, LOAD, STEP = 0, 1, 2, 3
CAUSES = ("slot", "kv", "load", "step")


class QueueCauses:
    """Cumulative seconds per cause of one instance's waiting queue."""

    __slots__ = ("totals", "cause", "since_s")

    def __init__(self):
        self.totals = [0.0, 0.0, 0.0, 0.0]
        self.cause = STEP
        self.since_s = 0.0

    def set(self, cause: int, now_s: float) -> None:
        """From ``now_s`` on, waiting requests wait because of ``cause``."""
        if cause != self.cause:
            self.totals[self.cause] += now_s - self.since_s
            self.since_s = now_s
            self.cause = cause

    def mark(self, now_s: float) -> tuple:
        """The clocks now (store when a request enters the queue)."""
        totals = list(self.totals)
        totals[self.cause] += now_s - self.since_s
        return tuple(totals)

    def charge(self, req, now_s: float) -> None:
        """``req`` leaves the queue now: add its time waited per cause."""
        now = self.mark(now_s)
        then = req.queue_mark
        req.queue_slot_s += now[SLOT] - then[SLOT]
        req.queue_kv_s += now[KV] - then[KV]
        req.queue_load_s += now[LOAD] - then[LOAD]
        req.queue_step_s += now[STEP] - then[STEP]
