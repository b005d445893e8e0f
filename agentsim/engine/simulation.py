"""The composition root: a validated scenario becomes a wired SimPy simulation, and its run
becomes a :class:`RunResult` (summary dict plus long-form tables). No file I/O here: the caller
persists results (:func:`agentsim.results.write_run`).
"""

from __future__ import annotations

import math
import time
from typing import Callable

import simpy

from agentsim.cache.radix import RadixCache
from agentsim.cluster.serving.instance import ServingInstance
from agentsim.cluster.serving.kv_admission import make_kv_admission
from agentsim.cluster.serving.recv_interval import receive_gate
from agentsim.cluster.request import LLMRequest
from agentsim.cluster.routers import make_router
from agentsim.engine.disaggregated import DisaggregatedCluster
from agentsim.engine.hierarchy import Hierarchy, load_breakdown
from agentsim.engine.agents import AgentDriver
from agentsim.metrics.records import OccupancySample, RecordBuffer, RequestRecord, TierHitRecord
from agentsim.engine.agentic import AgenticWiring
from agentsim.engine.policy_factory import eviction_policy
from agentsim.engine.collector import FREEZE_EVERY_REQUESTS, freezing_collector
from agentsim.engine.drain import DrainLimit
from agentsim.engine.diagnostics import RunDiagnostics
from agentsim.memory_release import return_freed_memory
from agentsim.engine.prefill_ahead import PrefillAhead
from agentsim.engine.recompute import RecomputeClassifier
from agentsim.engine.run_result import RunResult, build_result
from agentsim.metrics.timeseries import TimeSeriesSampler
from agentsim.errors import InvariantViolation
from agentsim.hardware.timing.select import build_timer
from agentsim.workload.content import KeySpaceExhausted

ProgressCallback = Callable[[float, float], None]


class StopRequest:
    """Asks a running simulation to stop at the next event (set from a signal handler).

    ``reason`` is None until :meth:`set`; the run then ends early and its summary says
    ``complete: false`` with this reason. Setting only stores a string, so it is safe to call
    from a signal handler at any point of an event.
    """

    def __init__(self, after_served: int | None = None) -> None:
        self.reason: str | None = None
        #: Stop once this many requests have been served (finished, not rejected), if set: a
        #: caller that needs only the first requests (``check-timing``'s measured ones) ends
        #: the run there instead of simulating the rest of its duration.
        self.after_served = after_served

    def set(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason


#: What an instance was doing when an invariant broke, by the method it was in.
_EVENTS = {"admit": "admission", "_admit_with_holds": "admission", "_admit_one": "admission",
           "_complete": "request completion", "_finish": "request completion", "_load": "load completion",
           "_prefill_iteration": "prefill iteration", "_decode_stretch": "decode stretch", "_loop": "scheduling"}


def _locate_violation(exc: BaseException) -> tuple[int | None, str]:
    """(instance id, event) of the innermost serving-instance frame where ``exc`` was raised.

    SimPy re-raises a process's exception as a copy whose ``__cause__`` is the original, so the
    cause chain is walked (outermost first) and the innermost matching frame wins."""
    chain = []
    while exc is not None and exc not in chain:
        chain.append(exc)
        exc = exc.__cause__
    instance, event, fallback = None, None, None
    for link in chain:
        tb = link.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            module = frame.f_globals.get("__name__", "")
            owner = frame.f_locals.get("self")
            # The instance's collaborators (admission, prefetch, ...) reach it as ``host``.
            owner = getattr(owner, "host", owner)
            if isinstance(owner, ServingInstance):
                instance = owner.instance_id
                event = _EVENTS.get(frame.f_code.co_name, frame.f_code.co_name)
            elif module.startswith("agentsim.") and not module.startswith("agentsim.cache") and module != __name__:
                fallback = frame.f_code.co_name
            tb = tb.tb_next
    return instance, event or fallback or "an event"


class Simulation:
    """One wired simulation. Build it, :meth:`run` it once."""

    def __init__(self, scenario, progress: ProgressCallback | None = None, env: simpy.Environment | None = None,
                 driver_factory=None):
        """``driver_factory(env, scenario, submit, on_mutation)`` builds the workload driver
        (default: :class:`AgentDriver`, the scenario's agents; trace replay passes its own). A
        driver has ``start()``, ``counters`` and ``finished_issuing() -> bool``, and calls its
        ``on_idle`` attribute (set here) when it may have issued its last call."""
        self.scenario = scenario
        self.progress = progress
        self.env = env if env is not None else simpy.Environment()
        # Step timing: measured kernel tables where the databases have the deployment, else the
        # roofline; every instance of a cluster has the same deployment, hence one timer.
        self.block_tokens = scenario.cache.block_tokens
        self.request_records = RecordBuffer(RequestRecord)
        self.tier_hit_records = RecordBuffer(TierHitRecord)
        self.occupancy = RecordBuffer(OccupancySample)
        policy_ref = scenario.cache.eviction
        self.instances = []
        # Memory hierarchy below HBM (tiers, links, topology): only when the scenario enables it,
        # so HBM-only runs keep the single-tier cache and its speed.
        tiers = scenario.cache.tiers
        # Disaggregated serving: prefill and decode pools; the decode workers are the instances
        # the rest of the run sees, and the pools' front takes the router's place (it builds the
        # hierarchy over both pools' workers).
        self.hierarchy = None
        self.disaggregated = None
        if scenario.serving.disaggregation is not None:
            self.disaggregated = DisaggregatedCluster(self.env, scenario, self._on_finish, scenario.run.check_invariants)
            self.hierarchy = self.disaggregated.hierarchy
            self.cost, self.timing = self.disaggregated.timers["decode"]
            self.capacity_blocks = self.disaggregated.capacity_blocks["decode"]
            self.instances = self.disaggregated.decode
        else:
            self.cost, self.timing = build_timer(scenario)
            self.capacity_blocks = scenario.kv_capacity_blocks_per_instance()
            self.hierarchy = Hierarchy(self.env, scenario) if tiers is not None and tiers.active() else None
        for index in range(scenario.hardware.instances if self.disaggregated is None else 0):
            extra = {}
            if self.hierarchy is not None:
                cache = self.hierarchy.make_cache(index, self.capacity_blocks)
                extra = self.hierarchy.instance_kwargs(index)
            else:
                cache = RadixCache(self.capacity_blocks, eviction_policy(policy_ref, scenario),
                                   name="hbm")
            cache.whole_node_eviction = scenario.cache.eviction_granularity == "node"
            serving = scenario.serving
            self.instances.append(ServingInstance(
                self.env, index, cache, self.cost, self.block_tokens,
                serving.batch_requests(), serving.instance_batch_tokens(),
                on_finish=self._on_finish, check_invariants=scenario.run.check_invariants,
                kv_rule=make_kv_admission(serving, self.block_tokens), preemption=serving.preemption,
                long_prefill_tokens=serving.long_prefill_token_threshold,
                mixed_prefill=serving.mixes_prefill(), rank_chunk_tokens=serving.rank_chunk_tokens(),
                receive_gate=receive_gate(serving), schedule_ahead=serving.schedules_ahead(),
                **extra,
            ))
        if self.hierarchy is not None and self.disaggregated is None:
            self.hierarchy.connect_peers(self.instances)
        self.router = (make_router(scenario, self.instances, self.env) if self.disaggregated is None
                       else self.disaggregated.front)
        self.driver = (driver_factory or AgentDriver)(self.env, scenario, self._submit, on_mutation=self._on_mutation)
        self.driver.on_idle = self._maybe_finish
        # Prefill-ahead of tool output during tool gaps (off by default).
        self.prefill_ahead = None
        if scenario.serving.prefill_ahead.name != "none" and hasattr(self.driver, "prefill_ahead"):
            self.prefill_ahead = PrefillAhead(self.env, scenario, self.instances)
            self.driver.prefill_ahead = self.prefill_ahead
        # Policy timers (TTL expiry, pin time-outs), tool start/end events, admission filters;
        # then the diagnostics (evictions by reason, T_C, regime, Belady headroom).
        self.agentic = AgenticWiring(self.env, scenario, self.instances, self.driver)
        self.diagnostics = RunDiagnostics(self.env, scenario, self.instances)
        # Recomputed tokens split by cause: cold, evicted (by tier), invalidated.
        # (None with run.recompute_split off: the split is then reported as null.)
        self.recompute = None
        if scenario.run.recompute_split:
            self.recompute = RecomputeClassifier(self.instances, self.block_tokens, scenario.run.warmup_s)
            self.recompute.live_keys = getattr(self.driver, "live_keys", None)
        # Evictions by reason and link traffic over time (read-only samples, for the figures).
        self.timeseries = TimeSeriesSampler(self.instances, self.hierarchy)
        self.request_observers: list[Callable[[LLMRequest], None]] = []
        self.in_flight = 0
        # Triggered once the duration has passed and no call is in flight: agents then only
        # wait on gaps after which they would not call again, so the run is over.
        self.finished = self.env.event()
        # ... or once the drain limit passed: calls still in flight then are rejected (drain_limit).
        self.drain = DrainLimit(self.env, scenario, self.request_records.append, self._finish_now,
                                lambda: self.driver.finished_issuing())
        self._last_sample_s = -math.inf
        self.check_invariants = scenario.run.check_invariants
        self.stop_request: StopRequest | None = None
        self.stop_reason: str | None = None
        self._stop_after_served: int | None = None   # served requests still to go (stop_request.after_served)
        self._freeze_survivors: Callable[[], None] = lambda: None   # set while the events run
        self._finishes_to_freeze = FREEZE_EVERY_REQUESTS
        #: True once the run has let go of its live state (:meth:`run` with ``release_state``).
        self.released = False

    def record_buffers(self) -> tuple:
        """Every buffer the run appends records to (requests, their tier hits, occupancy, the
        time series' evictions and link samples): what grows by design, as opposed to the live
        state. A streaming consumer that takes the records as they come clears these."""
        return (self.request_records, self.tier_hit_records, self.occupancy,
                self.timeseries.evictions, self.timeseries.link_samples)

    def _on_mutation(self, instance: int, old_keys: list[int], from_block: int) -> None:
        """An agent rewrote its history: its old blocks past the offset are dead (reason mutation)."""
        self.instances[instance].cache.invalidate(old_keys, from_block, reason="mutation")

    def _submit(self, request: LLMRequest) -> None:
        for observe in self.request_observers:
            observe(request)
        self.in_flight += 1
        self.drain.issued(request)
        self.router.submit(request)

    def _finish_now(self) -> None:
        if not self.finished.triggered:
            self.finished.succeed()

    def _maybe_finish(self) -> None:
        if self.in_flight == 0 and self.driver.finished_issuing() and not self.finished.triggered:
            self.finished.succeed()

    def _end_of_arrivals(self):
        yield self.env.timeout(self.scenario.duration_s)
        self._maybe_finish()

    def _check_conservation(self, request: LLMRequest) -> None:
        """Token conservation of a finished request: hit + recomputed (prefilled) = prompt."""
        prompt, hit = request.prompt_tokens, request.hit_tokens
        problem = None
        if request.rejected:
            if hit or request.prefilled_tokens:
                problem = f"rejected but has {hit} hit and {request.prefilled_tokens} prefilled tokens"
        elif not 0 <= hit <= max(0, prompt - 1):
            problem = f"hit_tokens {hit} outside [0, prompt_tokens - 1 = {prompt - 1}]"
        elif hit + request.prefilled_tokens != prompt:
            problem = f"hit {hit} + recomputed {request.prefilled_tokens} != prompt {prompt} tokens"
        elif request.tier_hit_tokens and sum(request.tier_hit_tokens.values()) != hit:
            problem = f"hits by tier {request.tier_hit_tokens} do not sum to hit_tokens {hit}"
        if problem is not None:
            raise InvariantViolation(f"token conservation of request {request.request_id}: {problem}")

    def _on_finish(self, request: LLMRequest) -> None:
        if request.background:  # a prefill ahead of a call, not a call
            if self.check_invariants:
                self._check_conservation(request)
            self.prefill_ahead.on_finish(request)
            return
        self.router.on_finish(request)  # the response has ended: the router's load bookkeeping
        if self.check_invariants:
            self._check_conservation(request)
        slo = self.scenario.slo
        if request.rejected:
            ttft = tpot = e2e = queue = float("nan")
            met = False
        else:
            ttft = request.first_token_s - request.arrival_s
            e2e = request.finish_s - request.arrival_s
            queue = request.admitted_s - request.arrival_s
            tpot = (request.finish_s - request.first_token_s) / (request.output_tokens - 1) if request.output_tokens > 1 else 0.0
            met = ttft <= slo.ttft_s and tpot <= slo.tpot_s
        load_wait, prefill = load_breakdown(request)
        if request.prefill_worker >= 0 and not request.rejected:
            load_wait, prefill = 0.0, request.prefill_done_s - request.admitted_s   # on the prefill worker
        cold = evicted = invalidated = 0
        if self.recompute is not None:
            cold, evicted, invalidated = self.recompute.classify(request)
        if self.check_invariants and self.recompute is not None and not request.rejected \
                and cold + evicted + invalidated != request.prompt_tokens - request.hit_tokens:
            raise InvariantViolation(f"recompute split of request {request.request_id}: cold {cold} + evicted {evicted} + "
                                     f"invalidated {invalidated} != recomputed {request.prompt_tokens - request.hit_tokens}")
        tier_hits = request.tier_hit_tokens if request.tier_hit_tokens else {"hbm": request.hit_tokens}
        self.request_records.append(RequestRecord(
            request_id=request.request_id, session_id=request.session_id, agent_class=request.agent_class,
            depth=request.depth, call_index=request.call_index, instance=request.instance,
            arrival_s=request.arrival_s, gap_before_s=request.gap_before_s, gap_kind=request.gap_kind,
            prompt_tokens=request.prompt_tokens, output_tokens=request.output_tokens,
            hit_tokens=request.hit_tokens, recomputed_tokens=request.prompt_tokens - request.hit_tokens,
            queue_wait_s=queue, ttft_s=ttft, tpot_s=tpot, e2e_s=e2e, finish_s=request.finish_s,
            slo_met=met, rejected=request.rejected,
            load_wait_s=load_wait, prefill_s=prefill, loaded_bytes=request.loaded_bytes,
            preemptions=request.preemptions, swap_preemptions=request.swap_preemptions,
            preempted_recompute_tokens=request.preempted_recompute_tokens,
            queue_slot_s=request.queue_slot_s, queue_kv_s=request.queue_kv_s, queue_load_s=request.queue_load_s,
            queue_step_s=request.queue_step_s, queue_chunk_s=request.queue_chunk_s,
            requeue_wait_s=request.requeue_wait_s,
            prefill_worker=request.prefill_worker, decode_hit_tokens=request.decode_hit_tokens,
            kv_transfer_bytes=request.kv_transfer_bytes, decode_queue_s=request.decode_queue_s,
            kv_transfer_s=request.kv_transfer_s, decode_first_step_s=request.decode_first_step_s,
            recomputed_cold_tokens=cold, recomputed_evicted_tokens=evicted,
            recomputed_invalidated_tokens=invalidated, reject_reason=request.reject_reason,
        ))
        for tier, tokens in tier_hits.items():
            if tokens:
                self.tier_hit_records.append(TierHitRecord(request.request_id, tier, tokens))
        self._finishes_to_freeze -= 1
        if not self._finishes_to_freeze:       # agentsim.engine.collector: freeze what survived
            self._finishes_to_freeze = FREEZE_EVERY_REQUESTS
            self._freeze_survivors()
        if self._stop_after_served is not None and not request.rejected:
            self._stop_after_served -= 1
            if self._stop_after_served <= 0:
                self.stop_request.set(f"{self.stop_request.after_served} requests served")
        self.agentic.on_request_end(request)
        self.diagnostics.observe_request(request)
        request.done.succeed()
        self.drain.ended(request)
        self.in_flight -= 1
        self._maybe_finish()

    def _sampler(self):
        # About 200 samples over the run; trace replays set ``sample_interval_s`` from the trace span.
        interval = getattr(self.driver, "sample_interval_s", None) or max(self.scenario.duration_s / 200.0, 1e-3)
        while True:
            self._sample(self.env.now)
            # What survived a whole sampling interval is long-lived: keep the collector from
            # rescanning it (see agentsim.engine.collector).
            self._freeze_survivors()
            if self.finished.triggered:
                return
            yield self.env.timeout(interval)

    def _sample(self, now: float) -> None:
        """One occupancy and time-series sample of every instance at ``now``."""
        self._last_sample_s = now
        for instance in self.instances:
            cache = instance.cache
            self.occupancy.append(OccupancySample(
                time_s=now, instance=instance.instance_id, tier=cache.name, used_blocks=cache.used_blocks,
                capacity_blocks=cache.capacity_blocks, pinned_blocks=cache.reserved_blocks,
                running_requests=len(instance.running), waiting_requests=len(instance.waiting)))
            if self.hierarchy is not None:
                for tier, used, capacity, pinned in self.hierarchy.occupancy(instance):
                    self.occupancy.append(OccupancySample(
                        time_s=now, instance=instance.instance_id, tier=tier, used_blocks=used,
                        capacity_blocks=capacity, pinned_blocks=pinned,
                        running_requests=len(instance.running), waiting_requests=len(instance.waiting)))
        self.timeseries.sample(now)

    def _progress(self):
        step = self.scenario.run.progress_interval_s
        while self.env.now < self.scenario.duration_s:
            yield self.env.timeout(min(step, self.scenario.duration_s - self.env.now))
            self.progress(self.env.now, self.scenario.duration_s)

    def run(self, release_state: bool = False) -> RunResult:
        """Run the simulation to its end and return its result. ``release_state``: let go of the
        live state (caches, sessions, processes) once the result has read it and before the
        request table is built, which lowers the run's peak memory by the table's size or the
        state's, whichever is smaller; the simulation's attributes are gone afterwards."""
        started = time.perf_counter()
        stop = self.stop_request
        self._stop_after_served = stop.after_served if stop is not None else None
        self.driver.start()
        self.env.process(self._sampler())
        self.env.process(self._end_of_arrivals())
        self.env.process(self.drain.run(self.finished))   # after it: at the same time, a drained run ends first
        if self.progress is not None:
            self.env.process(self._progress())
        with freezing_collector() as freeze:
            self._freeze_survivors = freeze
            try:
                self._run_events()
            finally:
                self._freeze_survivors = lambda: None
        if self.env.now > self._last_sample_s:
            # The run ends between two ticks: a last sample makes the time series end with the
            # whole-run totals (evictions or occupancy changes after the last tick included).
            self._sample(self.env.now)
        wall_s = time.perf_counter() - started
        return self._result(wall_s, release_state)

    def _run_events(self) -> None:
        """``env.run(until=self.finished)``, plus: stop early when :attr:`stop_request` is set
        (the result then covers the requests finished so far) or the key allocator runs out
        of keys (the same, with :attr:`stop_reason` saying so), and name the simulated time,
        instance and event of an invariant violation."""
        env = self.env
        done: list[bool] = []
        # As simpy's run(until=event): stop once the event's callbacks have run.
        self.finished.callbacks.append(lambda _event: done.append(True))
        stop = self.stop_request
        step = env.step
        try:
            if stop is None:
                while not done:
                    step()
            else:
                while not done:
                    if stop.reason is not None:
                        self.stop_reason = stop.reason
                        return
                    step()
        except KeySpaceExhausted as exc:
            # No fresh block key left for the call being made: the run ends here, as a stop
            # request would end it, with the requests finished so far (that call is not one).
            self.stop_reason = str(exc)
        except simpy.core.EmptySchedule:
            raise RuntimeError("no scheduled events left but the run has not finished") from None
        except InvariantViolation as exc:
            instance, event = _locate_violation(exc)
            where = f" on instance {instance}" if instance is not None else ""
            raise InvariantViolation(f"invariant violated at t={env.now:.6f} s{where} during {event}: {exc}") from exc

    def _result(self, wall_s: float, release_state: bool = False) -> RunResult:
        """The run's summary and tables (:func:`agentsim.engine.run_result.build_result`)."""
        return build_result(self, wall_s, release_state)

    def _release_state(self) -> None:
        """Let go of everything but the scenario, the request and tier-hit records and the stop
        reason, and hand the freed memory back (:mod:`agentsim.memory_release`). The
        simulation cannot be inspected or run afterwards: only a caller that keeps nothing of it
        but the result asks for this (:func:`run_scenario`)."""
        keep = {"scenario", "request_records", "tier_hit_records", "stop_reason", "released"}
        for name in list(vars(self)):
            if name not in keep:
                delattr(self, name)
        self.released = True
        return_freed_memory()


def run_scenario(scenario, progress: ProgressCallback | None = None, stop: StopRequest | None = None) -> RunResult:
    """Simulate ``scenario`` once and return its results (deterministic for a given seed).

    ``stop``: when set during the run (or once its ``after_served`` requests are served), the
    simulation ends at the next event and the result covers the requests finished so far
    (``summary["complete"]`` is False, with the reason).
    """
    simulation = Simulation(scenario, progress)
    simulation.stop_request = stop
    # Nothing but the result leaves this function, so the live state can go before the table.
    return simulation.run(release_state=True)
