"""The sum over a batch's running requests of their output tokens still to produce, each
clipped at ``clip_tokens`` (SGLang's admission reserves a share of it every pass), kept
without scanning the batch.

Decoding requests advance on one shared clock (:class:`~agentsim.cluster.serving.batch.DecodingSet`),
so a request whose finish clock is ``f`` has ``f - clock`` tokens left. While that is at least
the clip it counts the clip ("far"); once the clock passes ``f - clip`` it counts ``f - clock``
("near"): the near ones sum to ``sum(f) - n_near * clock``, and a heap of ``f - clip`` says when
a far one turns near. Requests of the batch that are not decoding (prefilling, loading, waiting
to join) count their frozen ``output_left``, clipped. The batch calls the hooks below on every
change of membership; :meth:`total` is exact (integers), equal to a scan.
"""

from __future__ import annotations

import heapq


class ClippedOutputLeft:
    """``sum(min(output tokens left, clip_tokens))`` over a batch's running requests."""

    __slots__ = ("clip", "outside_sum", "far_count", "far_heap", "near_count", "near_finish_sum")

    def __init__(self, clip_tokens: int):
        self.clip = clip_tokens
        self.outside_sum = 0        # not decoding: their clipped output_left
        self.far_count = 0          # decoding, at least ``clip`` left: each counts the clip
        self.far_heap: list = []    # (finish - clip, seq, state) of the far ones (stale entries skipped)
        self.near_count = 0         # decoding, fewer than ``clip`` left
        self.near_finish_sum = 0    # their finish clocks

    def enter(self, state) -> None:
        """``state`` joined the batch, not decoding yet."""
        left = state.output_left
        state.clip_share = left if left < self.clip else self.clip
        self.outside_sum += state.clip_share

    def reshare(self, state) -> None:
        """``state`` (not decoding) has a new ``output_left``."""
        left = state.output_left
        share = left if left < self.clip else self.clip
        self.outside_sum += share - state.clip_share
        state.clip_share = share

    def leave_outside(self, state) -> None:
        """``state`` left the batch without decoding, or starts decoding."""
        self.outside_sum -= state.clip_share
        state.clip_share = 0

    def start_decoding(self, state, clock: int) -> None:
        """``state`` joins the decoding set at ``clock`` (its ``finish_clock`` is set)."""
        self.leave_outside(state)
        finish = state.finish_clock
        if finish - clock >= self.clip:
            state.clip_near = False
            self.far_count += 1
            heapq.heappush(self.far_heap, (finish - self.clip, state.seq, state))
        else:
            state.clip_near = True
            self.near_count += 1
            self.near_finish_sum += finish

    def stop_decoding(self, state) -> None:
        """``state`` left the decoding set (finished or preempted)."""
        if state.clip_near:
            self.near_count -= 1
            self.near_finish_sum -= state.finish_clock
        else:
            self.far_count -= 1   # its heap entry goes stale (``decoding`` is False)

    def total(self, clock: int) -> int:
        """The sum at decoding clock ``clock`` (never earlier than a previous call's)."""
        heap = self.far_heap
        while heap and heap[0][0] < clock:
            state = heapq.heappop(heap)[2]
            if not state.decoding or state.clip_near:
                continue
            state.clip_near = True
            self.far_count -= 1
            self.near_count += 1
            self.near_finish_sum += state.finish_clock
        return self.outside_sum + self.clip * self.far_count + self.near_finish_sum - self.near_count * clock
