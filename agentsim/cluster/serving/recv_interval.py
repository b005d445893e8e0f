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

TensorRT-LLM's attention-DP balancing (``attention_dp_config: enable_balance, timeout_iters``,
``tensorrt_llm/_torch/pyexecutor``'s ``_balance_adp_requests``) is the same counter with other
release rules: every iteration (prefill ones included) in which not every attention-DP rank has a
context request adds 1, and no context request is scheduled until every rank has one (here: as
many are waiting as there are ranks), the counter reaches ``timeout_iters``, or some rank has no
generation request (fewer requests running than ranks); each release resets the counter. It keeps
a rank's context requests from stalling the others' decode steps one prefill at a time.

:class:`RecvInterval` keeps the counter for one instance; N = 1 (the engine default) receives
every request at once, as an instance without it does. :func:`adp_balance` builds the
TensorRT-LLM variant.

Both engines count engine iterations, while an instance counts its decode steps in output tokens.
Without speculative decoding the two are the same. With multi-token prediction one iteration
emits ``1 + E`` tokens a sequence (``serving.speculative_decoding``,
:mod:`agentsim.hardware.timing.speculative`), so :func:`receive_gate` sets a gate of N iterations
to ``round(N x (1 + E))`` steps, and a prefill iteration counts ``round(1 + E)`` steps. Counted in
tokens, an SGLang receive interval of 30 iterations with 3 draft tokens (2.1 tokens an iteration)
is 63 steps: 30 would receive new requests twice as often as the engine does (on 68 SGLang rows
of InferenceX that ran MTP, TTFT error median 1.77 with 30 steps, 1.26 with 63; docs/validation.md).
"""

from __future__ import annotations

from collections import deque

from agentsim.cluster.serving.batch_wait import BatchWait
from agentsim.hardware.timing.speculative import accepted_per_iteration


class RecvInterval:
    """The receive counter of one instance and the requests not yet received."""

    def __init__(self, interval_steps: int, release_at: int = 0, min_running: int = 1,
                 reset_on_prefill: bool = True, prefill_steps: int = 1):
        """``release_at``: receive at once when this many requests wait (0: never early);
        ``min_running``: receive at once while fewer requests run (1: when idle);
        ``reset_on_prefill``: a prefill iteration makes the next loop a receive point (SGLang's
        weight of 1000), else it counts as ``prefill_steps`` decode steps (TensorRT-LLM: one
        iteration)."""
        if interval_steps < 1:
            raise ValueError(f"receive interval must be at least 1 step, got {interval_steps}")
        self.interval_steps = interval_steps
        self.prefill_steps = prefill_steps
        self.release_at = release_at
        self.min_running = min_running
        self.reset_on_prefill = reset_on_prefill
        #: Decode steps since the last receive (0 .. interval_steps - 1).
        self.counter = 0
        #: Whether the last iteration ended at a receive point.
        self.due = True
        self.unreceived: deque = deque()

    def __len__(self) -> int:
        return len(self.unreceived)

    def on_prefill_iteration(self) -> None:
        """A prefill batch ran: its weight (1000) passes any interval, so the next loop receives
        (SGLang); or it counts as one iteration (TensorRT-LLM's balancing)."""
        if not self.reset_on_prefill:
            self.on_decode_steps(self.prefill_steps)
            return
        self.counter = 0
        self.due = True

    def _early(self) -> bool:
        """Whether enough requests wait to be received at once (every rank has one)."""
        return 0 < self.release_at <= len(self.unreceived)

    def on_decode_steps(self, steps: int) -> None:
        """``steps`` decode steps ran; the stretch ended at a receive point when the count is a
        multiple of the interval (a stretch never runs past a receive point with requests
        waiting for it: :meth:`steps_until_receive` bounds it)."""
        total = self.counter + steps
        self.counter = total % self.interval_steps
        self.due = self.counter == 0

    def steps_until_receive(self, done_steps: int = 0, running: int | None = None) -> int:
        """Decode steps from the start of a stretch to the first receive point after
        ``done_steps`` of them have completed (at least ``done_steps + 1``)."""
        if self._early() or (running is not None and running < self.min_running):
            return done_steps + 1
        after = self.counter + done_steps + 1
        return done_steps + 1 + (-after) % self.interval_steps

    def take(self, running: int) -> list:
        """The requests received now, ``running`` requests being in the batch: all waiting ones
        when the last iteration ended at a receive point, fewer than ``min_running`` run (an
        idle engine's loop receives at once) or ``release_at`` of them wait, else none."""
        if not self.unreceived or not (self.due or running < self.min_running or self._early()):
            return []
        self.counter = 0
        self.due = False
        received = list(self.unreceived)
        self.unreceived.clear()
        return received


def adp_balance(timeout_iters: int, attention_dp: int, steps_per_iteration: float = 1.0) -> RecvInterval:
    """TensorRT-LLM's attention-DP balancing for ``attention_dp`` ranks: context requests wait
    until one per rank waits, at most ``timeout_iters`` iterations (of ``steps_per_iteration``
    decode steps each), at once while a rank has no generation request."""
    return RecvInterval(_steps(timeout_iters, steps_per_iteration), release_at=attention_dp,
                        min_running=attention_dp, reset_on_prefill=False,
                        prefill_steps=_steps(1, steps_per_iteration))


def steps_per_iteration(serving) -> float:
    """Decode steps (output tokens a sequence) one engine iteration of ``serving`` advances:
    ``1 + E`` with multi-token prediction, else 1."""
    spec = serving.speculative_decoding
    if spec is None:
        return 1.0
    return 1.0 + accepted_per_iteration(spec.draft_tokens, spec.accept_rates)


def _steps(iterations: int, per_iteration: float) -> int:
    return max(1, round(iterations * per_iteration))


def receive_gate(serving, prefills: bool = True) -> RecvInterval | BatchWait | None:
    """The receive gate a ``serving`` config asks for: TensorRT-LLM's attention-DP balancing
    (``adp_balance_timeout_iters`` with more than one attention-DP rank, on an instance that
    ``prefills``: a disaggregated decode worker schedules no context requests), or its batch
    waiting (``batch_wait_timeout_iters`` with one attention-DP rank, which is where TensorRT-LLM
    applies it: :mod:`.batch_wait`), else SGLang's receive interval (``scheduler_recv_interval``
    above 1), else None (every request received at once)."""
    dp = serving.parallelism.attention_dp
    per_iteration = steps_per_iteration(serving)   # the gates count iterations, an instance tokens
    if serving.adp_balance_timeout_iters and dp > 1 and prefills:
        return adp_balance(serving.adp_balance_timeout_iters, dp, per_iteration)
    if serving.batch_wait_timeout_iters and dp == 1 and prefills:
        return BatchWait(_steps(serving.batch_wait_timeout_iters, per_iteration), serving.batch_wait_max_tokens_ratio,
                         serving.instance_batch_tokens(), prefill_steps=_steps(1, per_iteration))
    if serving.scheduler_recv_interval > 1:
        return RecvInterval(_steps(serving.scheduler_recv_interval, per_iteration))
    return None
