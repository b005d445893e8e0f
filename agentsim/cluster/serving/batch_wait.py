"""TensorRT-LLM's batch waiting: context requests held back so that prompts are prefilled together.

With ``batch_wait_timeout_iters`` T and ``batch_wait_max_tokens_ratio`` R set, TensorRT-LLM's
executor (``tensorrt_llm/_torch/pyexecutor``, ``PyExecutor._waiting_requests``) checks every
iteration whose schedule has both context and generation requests, and runs the iteration
without its context requests unless the tokens scheduled (the context requests' prompt tokens
plus one per generation request) reach ``R * max_num_tokens`` or T iterations have already been
held that way; running the context requests resets the count. An engine with no generation
request never waits. Deployments tuned for throughput set it so that a 1k-token prompt is not
prefilled on its own in every step (InferenceX's Llama-3.1-70B TensorRT-LLM recipes at 1k/1k:
T = 20, R = 0.9 of 16,384 tokens), at the price of up to T decode steps of every TTFT.

:class:`BatchWait` keeps the count for one instance and the requests held; it has the interface
of :class:`agentsim.cluster.serving.recv_interval.RecvInterval` (the instance's receive gate), and
:func:`agentsim.cluster.serving.recv_interval.receive_gate` chooses it. The held count runs only
while requests are held (from the step after the one in progress when the first arrives), unlike
SGLang's receive counter, which counts every decode step.
"""

from __future__ import annotations

from collections import deque


class BatchWait:
    """The batch-waiting count of one instance and the requests it holds."""

    def __init__(self, timeout_iters: int, max_tokens_ratio: float, budget_tokens: int, prefill_steps: int = 1):
        """``timeout_iters``: most iterations held (T), in decode steps (an instance's steps are
        output tokens: :func:`agentsim.cluster.serving.recv_interval.receive_gate` converts);
        ``max_tokens_ratio``: the share (R) of the iteration's token budget ``budget_tokens``
        (``max_num_tokens``) that releases them earlier; ``prefill_steps``: the steps one
        prefill iteration counts as."""
        if timeout_iters < 1:
            raise ValueError(f"batch wait timeout must be at least 1 iteration, got {timeout_iters}")
        if not 0 < max_tokens_ratio <= 1:
            raise ValueError(f"batch wait token ratio must be in (0, 1], got {max_tokens_ratio}")
        self.timeout_iters = timeout_iters
        self.prefill_steps = prefill_steps
        self.release_tokens = max_tokens_ratio * budget_tokens
        #: Iterations the requests have been held since the last release.
        self.held = 0
        #: Within the stretch in progress, the step from which holding counts (None: nothing held).
        self._count_from: int | None = None
        self.unreceived: deque = deque()

    def __len__(self) -> int:
        return len(self.unreceived)

    def _released(self, running: int) -> bool:
        """Whether the held requests run in the next iteration with ``running`` requests
        decoding: none decode, T iterations were held, or the scheduled tokens reach R of the
        budget. (TensorRT-LLM counts the prompts its scheduler fitted in the budget beside the
        decoding requests; with R at most 1, prompts beyond the budget would pass the threshold
        all the same, so all the held prompts are counted.)"""
        if running < 1 or self.held >= self.timeout_iters:
            return True
        return sum(request.prompt_tokens for request in self.unreceived) + running >= self.release_tokens

    def on_prefill_iteration(self) -> None:
        """An iteration with prefill chunks of requests already running ran: a held iteration
        for the requests waiting."""
        self.on_decode_steps(self.prefill_steps)

    def on_decode_steps(self, steps: int) -> None:
        """``steps`` iterations ran; those after holding began count (a stretch never runs past
        the release: :meth:`steps_until_receive` bounds it)."""
        if self.unreceived and self._count_from is not None:
            self.held += max(steps - self._count_from, 0)
            self._count_from = 0

    def steps_until_receive(self, done_steps: int = 0, running: int | None = None) -> int:
        """Decode steps from the start of a stretch to the release, ``done_steps`` of them
        completed (at least ``done_steps + 1``). A first request arriving mid-stretch is held from
        the step after the one in progress."""
        if self._count_from is None:   # (requests held before the stretch began count from 0: take)
            self._count_from = done_steps + 1
        if running is not None and self._released(running):
            return done_steps + 1
        return max(done_steps + 1, self._count_from + self.timeout_iters - self.held)

    def take(self, running: int) -> list:
        """The held requests when they are released with ``running`` requests decoding, else
        none (and they are held from the next iteration on)."""
        if not self.unreceived:
            return []
        if not self._released(running):
            if self._count_from is None:
                self._count_from = 0
            return []
        self.held = 0
        self._count_from = None
        received = list(self.unreceived)
        self.unreceived.clear()
        return received
