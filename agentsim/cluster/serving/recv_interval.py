"""SGLang's ``--scheduler-recv-interval``: new requests reach the scheduler every N decode steps.

SGLang's scheduler takes new requests from its tokenizer process at the top of its event loop,
and with ``scheduler_recv_interval`` N > 1 only every N-th time
(``sglang/srt/managers/scheduler_recv_skipper.py``): each loop adds the weight of the batch it
just ran to a counter (a decode step 1, any other forward mode 1000, no batch 1) and receives
once the counter reaches N, then resets it to 0. So while the batch decodes, a request that
arrived waits for the next multiple of N decode steps; after a prefill (extend) batch, or when
the engine is idle, it is received at once. Deployments tuned for throughput set N to 10-30 to
save the receive's inter-process polling on every step; it batches arrivals, which keeps the
closed-loop clients of a benchmark together.

:class:`RecvInterval` keeps the counter for one instance; N = 1 (the engine default) receives
every request at once, as an instance without it does.
"""

from __future__ import annotations

from collections import deque


class RecvInterval:
    """The receive counter of one instance and the requests not yet received."""

    def __init__(self, interval_steps: int):
        if interval_steps < 1:
            raise ValueError(f"receive interval must be at least 1 step, got {interval_steps}")
        self.interval_steps = interval_steps
        #: Decode steps since the last receive (0 .. interval_steps - 1).
        self.counter = 0
        #: Whether the last iteration ended at a receive point.
        self.due = True
        self.unreceived: deque = deque()

    def __len__(self) -> int:
        return len(self.unreceived)

    def on_prefill_iteration(self) -> None:
        """A prefill batch ran: its weight (1000) passes any interval, so the next loop receives."""
        self.counter = 0
        self.due = True

    def on_decode_steps(self, steps: int) -> None:
        """``steps`` decode steps ran; the stretch ended at a receive point when the count is a
        multiple of the interval (a stretch never runs past a receive point with requests
        waiting for it: :meth:`steps_until_receive` bounds it)."""
        total = self.counter + steps
        self.counter = total % self.interval_steps
        self.due = self.counter == 0

    def steps_until_receive(self, done_steps: int = 0) -> int:
        """Decode steps from the start of a stretch to the first receive point after
        ``done_steps`` of them have completed (at least ``done_steps + 1``)."""
        after = self.counter + done_steps + 1
        return done_steps + 1 + (-after) % self.interval_steps

    def take(self, idle: bool) -> list:
        """The requests received now: all waiting ones when the last iteration ended at a receive
        point or the engine is idle (its idle loop receives at once), else none."""
        if not self.unreceived or not (self.due or idle):
            return []
        self.counter = 0
        self.due = False
        received = list(self.unreceived)
        self.unreceived.clear()
        return received
