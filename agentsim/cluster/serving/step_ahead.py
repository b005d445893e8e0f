"""Scheduling one step ahead: a request that arrives during a step joins the step after next.

vLLM, SGLang and TensorRT-LLM all form the next batch on the CPU while the GPU runs the current
one, so that the GPU never waits for the scheduler:

* vLLM's async scheduling (``--async-scheduling``, the default since the V1 engine's async
  scheduling plan, vllm-project/vllm#27679 / #27614): the engine core keeps a batch queue of two
  (``vllm/v1/engine/core.py``, ``step_with_batch_queue``). Step N+1 is scheduled right after
  step N is submitted, before N's output exists (its tokens are placeholders); the core then
  blocks on N's result, and only after that reads its input queue and schedules N+2.
* SGLang's overlap schedule (on unless ``--disable-overlap-schedule``;
  ``Scheduler.event_loop_overlap``): each loop receives requests, launches the next batch, then
  waits for the previous batch's result.
* TensorRT-LLM's overlap scheduler (PyTorch backend, on unless ``disable_overlap_scheduler``):
  the executor loop fetches new requests and launches step N+1 before it processes step N's
  output.

Step N+1 is thus fixed when step N starts: a request that arrives while N runs is not in it and
joins N+2, one whole step later than a scheduler that waits for N to end. When the engine is idle
it is scheduled at once (the loop blocks on its input and wakes for it). The first token is
still the one sampled by the step that finishes the prompt, sent when that step ends.

:class:`StepAhead` keeps the arrivals of the step in progress for one instance.
"""

from __future__ import annotations

from collections import deque


class StepAhead:
    """Arrivals not yet visible to the scheduler, with the start of the last step run."""

    __slots__ = ("pending", "last_step_start_s")

    def __init__(self):
        #: ``(arrival time, request)`` in arrival order.
        self.pending: deque = deque()
        #: When the last step that ran began (the moment the step after it was formed).
        self.last_step_start_s = float("-inf")

    def __len__(self) -> int:
        return len(self.pending)

    def arrive(self, request, now_s: float) -> None:
        """``request`` arrived at ``now_s`` while a step was running."""
        self.pending.append((now_s, request))

    def release(self, idle: bool) -> list:
        """The arrivals the next step can take: those that came before the last step began
        (the step formed then has run, so the one formed now sees them), or all of them when the
        engine has nothing to run (its idle loop schedules an arrival at once)."""
        pending = self.pending
        released = []
        while pending and (idle or pending[0][0] <= self.last_step_start_s):
            released.append(pending.popleft()[1])
        return released
