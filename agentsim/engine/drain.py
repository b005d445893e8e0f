"""The drain limit: how long after ``duration_s`` a run may take to finish the calls in flight.

Sessions stop calling at ``duration_s``; the run then drains, finishing the calls already issued,
and ends when none is left. A workload that still issues calls after ``duration_s`` (a timed trace
replay: the trace, not ``duration_s``, says when calls arrive) is not cut while it does: past the
limit, the run is cut only once its driver has stopped issuing (and ``max_drain_s`` has passed
since its last call), or when calls are in flight and none was issued or ended for ``max_drain_s``
(a stuck call holding a closed-loop session open). A call that nothing will ever let in (a plugin whose pins are never
freed, a queue behind a request that can never get memory) would keep the run draining for
ever, its sampler ticking and memory growing. So the drain has a limit: ``limits.max_drain_s``
simulated seconds (``drain: false``: none, the run ends at ``duration_s``). Calls still in flight
then are recorded as rejected with reason ``drain_limit`` (they count in ``requests_rejected``,
``requests_rejected_by_reason`` and against SLA attainment, as a refused call does) and the run
ends; a run that needed the limit says so (``calls_cut_at_drain_limit``, and a warning).

Why a time limit and not a detector of stuck requests: whether a waiting request can ever be
admitted depends on every policy's and plugin's future decisions (a TTL pin that will expire, a
prefetch that will finish); a limit far above any call's service time decides without that. The
default (one simulated hour) is longer than the longest call of the shipped workloads (16,000
output tokens at 50-100 ms a token) plus its queue.
"""

from __future__ import annotations

from typing import Callable

from agentsim.cluster.request import LLMRequest
from agentsim.metrics.records import RequestRecord

NAN = float("nan")


def drain_limit_s(scenario) -> float:
    """Simulated time at which the run ends whatever is still in flight."""
    return scenario.duration_s + (scenario.limits.max_drain_s if scenario.drain else 0.0)


def cut_record(request: LLMRequest, now_s: float) -> RequestRecord:
    """The requests-table row of a call still in flight at the drain limit: rejected, reason
    ``drain_limit``, no hit (a rejected prompt counts as all misses), no latencies."""
    return RequestRecord(
        request_id=request.request_id, session_id=request.session_id, agent_class=request.agent_class,
        depth=request.depth, call_index=request.call_index, instance=request.instance,
        arrival_s=request.arrival_s, gap_before_s=request.gap_before_s, gap_kind=request.gap_kind,
        prompt_tokens=request.prompt_tokens, output_tokens=request.output_tokens,
        hit_tokens=0, recomputed_tokens=request.prompt_tokens,
        queue_wait_s=NAN, ttft_s=NAN, tpot_s=NAN, e2e_s=NAN, finish_s=now_s,
        slo_met=False, rejected=True, preemptions=request.preemptions, swap_preemptions=request.swap_preemptions,
        prefill_worker=request.prefill_worker, reject_reason="drain_limit",
    )


class DrainLimit:
    """Tracks the calls in flight (:meth:`issued`, :meth:`ended`) and, at the drain limit, hands
    every one still in flight to ``record(row)`` and calls ``finish()`` (a SimPy process:
    :meth:`run`)."""

    def __init__(self, env, scenario, record: Callable[[RequestRecord], None], finish: Callable[[], None],
                 finished_issuing: Callable[[], bool] = lambda: True):
        self.env = env
        #: When the run is cut if it has not finished; moves later while a driver still issues
        #: calls after ``duration_s`` (only with ``drain`` on: ``drain: false`` ends at ``duration_s``).
        self.limit_s = drain_limit_s(scenario)
        self._drain_s = scenario.limits.max_drain_s if scenario.drain else None
        self._finished_issuing = finished_issuing
        self._last_issued_s = 0.0
        self._last_activity_s = 0.0   # a call issued or ended
        self._record = record
        self._finish = finish
        self._in_flight: dict[int, LLMRequest] = {}   # by id(): insertion order, so rows come out deterministically
        self.cut_calls = 0

    def issued(self, request: LLMRequest) -> None:
        self._in_flight[id(request)] = request
        self._last_issued_s = self._last_activity_s = self.env.now

    def ended(self, request: LLMRequest) -> None:
        self._in_flight.pop(id(request), None)
        self._last_activity_s = self.env.now

    def _extended_limit_s(self) -> float | None:
        """A later limit while the workload is still issuing calls; None: cut now."""
        if self._drain_s is None:
            return None
        now = self.env.now
        if self._finished_issuing():
            later = self._last_issued_s + self._drain_s
        elif self._in_flight:
            later = self._last_activity_s + self._drain_s   # stuck if nothing moved for a drain
        else:
            later = now + self._drain_s                      # idle until the trace's next call
        return later if later > now else None

    def run(self, finished):
        """Wait until the limit; if the run has not ``finished`` (a SimPy event) by then, cut it."""
        yield self.env.timeout(self.limit_s)
        while not finished.triggered:
            later = self._extended_limit_s()
            if later is None:
                break
            self.limit_s = later
            yield self.env.timeout(later - self.env.now)
        if finished.triggered:
            return
        now = self.env.now
        cut = list(self._in_flight.values())
        self._in_flight.clear()
        self.cut_calls = len(cut)
        for request in cut:
            self._record(cut_record(request, now))
        self._finish()


__all__ = ["DrainLimit", "cut_record", "drain_limit_s"]
