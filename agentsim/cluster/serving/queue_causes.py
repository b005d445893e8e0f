"""Why waiting requests wait: time in the queue split by cause.

Admission is FCFS with head-of-line blocking, so at any moment every waiting request waits for
the same reason, the one that ended the last admission pass: no batch slot (``slot``), no KV
memory (``kv``), every request left held by its own prefetch or return prefetch (``load``), or,
when the pass admitted all it could see, the iteration in progress (``step``: a request that
arrives mid-iteration joins at its end). One clock per cause accumulates time spent in that
state; a request stores the clocks when it enters the queue and adds the differences when it
leaves, so the split costs O(1) per request and per pass.

The causes partition ``queue_wait_s``, TTFT's queue part: the time from arrival to the first
admission. A preempted request waits in the queue again; that wait (``requeue_wait_s``, all
causes together) lies after its first admission, in its prefill or decode time, and is kept
apart, so ``queue_slot_s + queue_kv_s + queue_load_s + queue_step_s == queue_wait_s`` exactly.
A disaggregated call's wait for a decode worker is ``decode_queue_s``, not a queue cause.
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
        """``req`` leaves the queue now (before its ``admitted_s`` is set): its first admission
        adds its time waited per cause; a re-admission after a preemption adds the time to
        ``requeue_wait_s``; a disaggregated call already admitted by its prefill worker adds
        nothing (its decode worker's queue is ``decode_queue_s``)."""
        now = self.mark(now_s)
        then = req.queue_mark
        if req.resume_output_left >= 0:          # preempted: waiting again, after its first token or mid-prefill
            req.requeue_wait_s += (now[SLOT] - then[SLOT]) + (now[KV] - then[KV]) + (now[LOAD] - then[LOAD]) \
                + (now[STEP] - then[STEP])
        elif req.admitted_s != req.admitted_s:   # first admission (admitted_s still nan)
            req.queue_slot_s += now[SLOT] - then[SLOT]
            req.queue_kv_s += now[KV] - then[KV]
            req.queue_load_s += now[LOAD] - then[LOAD]
            req.queue_step_s += now[STEP] - then[STEP]
