"""Agents as SimPy processes: sessions arrive, call the LLM, wait on tools or humans, call again.

Closed loop: an agent issues its next call only after the previous one completed plus the gap,
so a slower cache delays the agent, as it would a real one. Sub-agents fork the parent's
context (sharing its prefix), run concurrently, and are joined before the parent continues.

Randomness: every session draws from its own generator, seeded from
``SeedSequence(seed, spawn_key=(class index, session index))``, so a session's gaps and lengths do
not depend on event timing: two policies compared on the same seed see the same sessions
(common random numbers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import simpy

from agentsim.cluster.request import LLMRequest
from agentsim.workload.content import KeyAllocator, SharedPrefixes, TokenStream
from agentsim.workload.distributions import Sampler, build
from agentsim.workload.key_runs import key_runs, merged_runs


@dataclass
class WorkloadCounters:
    sessions_started: int = 0
    sessions_finished: int = 0
    sessions_context_full: int = 0
    subagents_spawned: int = 0
    compactions: int = 0
    edits: int = 0
    invalidated_blocks: int = 0
    active_sessions: int = 0


class AgentClassModel:
    """Samplers of one agent class, built once from its spec."""

    def __init__(self, name: str, index: int, spec):
        self.name = name
        self.index = index
        self.spec = spec
        self.initial_context = build(spec.initial_context_tokens)
        self.calls = build(spec.calls_per_session)
        self.tool_gap = build(spec.tool_gap_s)
        self.human_gap = build(spec.human_gap_s)
        self.appended = build(spec.appended_tokens)
        self.output = build(spec.output_tokens)
        sub = spec.subagents
        self.sub_probability = sub.probability
        self.sub_fanout = build(sub.fanout)
        self.sub_calls = build(sub.calls)
        self.sub_task = build(sub.task_tokens)
        self.sub_result = build(sub.result_tokens)
        self.edit_dropped = build(spec.edits.dropped_tokens) if spec.edits is not None else None


def _count(sampler: Sampler, rng: np.random.Generator, minimum: int = 0) -> int:
    value = sampler.sample(rng)
    if not math.isfinite(value):
        return minimum
    count = int(round(value))
    return count if count > minimum else minimum  # max(minimum, count), without the builtin's cost


def _tokens(sampler: Sampler, rng: np.random.Generator, minimum: int, window_tokens: int) -> int:
    """A token count drawn like :func:`_count`, at most ``window_tokens + 1``: a draw past the
    context window ends the session as context-full (or is compacted away) whatever its size,
    so the tokens past the window are never sent, and giving them block keys would only take
    memory (a draw of 1e15 tokens used to allocate until the process died)."""
    count = _count(sampler, rng, minimum)
    return count if count <= window_tokens else window_tokens + 1


class AgentDriver:
    """Starts sessions of every agent class and runs them until ``end_s``."""

    def __init__(self, env: simpy.Environment, scenario, submit: Callable[[LLMRequest], None],
                 on_mutation: Callable[[int, list[int], int], None] | None = None):
        """``submit(request)`` hands a call to the cluster; ``on_mutation(instance, old_keys,
        from_block)`` is told when an agent rewrites its history (compaction or an edit)."""
        self.on_mutation = on_mutation
        self.env = env
        self.scenario = scenario
        self.submit = submit
        self.block_tokens = scenario.cache.block_tokens
        self.end_s = scenario.duration_s
        self.seed = scenario.seed
        self.alloc = KeyAllocator()
        self.prefixes = SharedPrefixes(self.block_tokens, self.alloc, scenario.workload.global_system_prompt_tokens)
        self.live_streams: dict[int, TokenStream] = {}   # the running agents' contexts, by id
        self.classes = [AgentClassModel(name, index, spec)
                        for index, (name, spec) in enumerate(scenario.workload.agent_classes.items())]
        self.counters = WorkloadCounters()
        self._next_request_id = 0
        self._next_session_id = 0
        self._next_agent_id = 0
        self._session_index = [0] * len(self.classes)

    on_idle: Callable[[], None] | None = None
    #: Prefill-ahead of tool output during tool gaps (:mod:`agentsim.engine.prefill_ahead`), or None.
    prefill_ahead = None
    #: ``on_resume(agent_id, request)``: the tool or human pause that followed ``request`` is over
    #: (the engine releases the agent's TTL-pin there: policy ``on_tool_end``).
    on_resume: Callable[[int, LLMRequest], None] | None = None

    def finished_issuing(self) -> bool:
        """After ``duration_s`` no agent issues a new call (in-flight ones still finish)."""
        return self.env.now >= self.end_s

    def start(self) -> None:
        for model in self.classes:
            arrival = model.spec.arrival
            if arrival.kind == "poisson":
                self.env.process(self._poisson(model))
            else:
                rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(0, model.index)))
                for slot in range(arrival.concurrent):
                    delay = float(rng.uniform(0, arrival.ramp_s)) if arrival.ramp_s > 0 else 0.0
                    self.env.process(self._population_slot(model, delay))

    # --- arrivals ---------------------------------------------------------------------------
    def _poisson(self, model: AgentClassModel):
        """Poisson arrivals; with a diurnal profile or bursts, a non-homogeneous Poisson process
        sampled by thinning against the peak rate."""
        rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(0, model.index)))
        arrival = model.spec.arrival
        peak = arrival_rate_multiplier_peak(arrival)
        rate_max = arrival.rate_per_s * peak
        # Thinning whenever the rate varies, also when its peak multiplier is exactly 1 (a
        # profile normalised to its peak hour).
        thinned = arrival.diurnal is not None or bool(arrival.bursts)
        t = self.env.now
        while True:
            t += float(rng.exponential(1.0 / rate_max))
            if t >= self.end_s:
                return
            if thinned and rng.random() * peak > arrival_rate_multiplier(arrival, t):
                continue
            yield self.env.timeout(t - self.env.now)
            self.env.process(self._session(model))

    def _population_slot(self, model: AgentClassModel, delay_s: float):
        if delay_s:
            yield self.env.timeout(delay_s)
        while self.env.now < self.end_s:
            yield self.env.process(self._session(model))
            if model.spec.arrival.restart_delay_s:
                yield self.env.timeout(model.spec.arrival.restart_delay_s)

    # --- sessions ---------------------------------------------------------------------------
    def _session(self, model: AgentClassModel):
        counters = self.counters
        session_index = self._session_index[model.index]
        self._session_index[model.index] += 1
        session_id = self._next_session_id
        self._next_session_id += 1
        rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(1, model.index, session_index)))
        counters.sessions_started += 1
        counters.active_sessions += 1
        prefix_keys, prefix_tokens = self.prefixes.for_class(model.name, model.spec.tools_prefix_tokens)
        stream = TokenStream(self.block_tokens, self.alloc, prefix_keys, prefix_tokens)
        stream.append(_tokens(model.initial_context, rng, 1, model.spec.max_context_tokens))
        n_calls = _count(model.calls, rng, 1)
        agent_id = self._next_agent_id
        self._next_agent_id += 1
        yield from self._conversation(model, stream, rng, session_id, depth=0, n_calls=n_calls, agent_id=agent_id)
        counters.active_sessions -= 1
        counters.sessions_finished += 1

    def _conversation(self, model: AgentClassModel, stream: TokenStream, rng: np.random.Generator,
                      session_id: int, depth: int, n_calls: int, agent_id: int = -1):
        self.live_streams[id(stream)] = stream
        try:
            yield from self._conversation_calls(model, stream, rng, session_id, depth, n_calls, agent_id)
        finally:
            # The agent is done: no later call can send its private keys (live_keys).
            del self.live_streams[id(stream)]

    def _conversation_calls(self, model: AgentClassModel, stream: TokenStream, rng: np.random.Generator,
                            session_id: int, depth: int, n_calls: int, agent_id: int = -1):
        env = self.env
        spec = model.spec
        gap_s, gap_kind = float("nan"), "first"
        last_instance = -1
        last_cached_blocks = 0      # full blocks the previous call left cached (its total_keys)
        rewrite: tuple = ()         # rewrites since the previous call (see LLMRequest.rewrite)
        mutations = 0
        ahead = self.prefill_ahead
        gap = None   # the prefill-ahead gap just waited out, told below whether the call came
        for call_index in range(n_calls):
            if call_index > 0 and env.now >= self.end_s:
                if gap is not None:
                    ahead.outcome(gap, called=False)
                return
            if spec.compaction is not None and stream.tokens > spec.compaction.trigger_tokens:
                self.counters.compactions += 1
                old_keys = stream.keys[:]
                self.counters.invalidated_blocks += stream.rewrite_after(spec.compaction.keep_tokens)
                self._mutated(last_instance, old_keys, stream.shared_blocks)
                rewrite = _merge_rewrite(rewrite, last_instance, stream.shared_blocks, last_cached_blocks)
                mutations += 1
            if stream.tokens > spec.max_context_tokens:
                self.counters.sessions_context_full += 1
                if gap is not None:
                    ahead.outcome(gap, called=False)
                return
            if gap is not None:
                ahead.outcome(gap, called=True)
                gap = None
            # The previous call is not needed past its pause: its keys (the context then) are freed
            # while this call runs instead of living on beside the stream's.
            request = None
            request = yield from self._call(model, stream, rng, session_id, depth, call_index, gap_s, gap_kind, mutations,
                                            agent_id=agent_id, last=call_index == n_calls - 1, rewrite=rewrite)
            last_instance = request.instance
            last_cached_blocks = len(request.total_keys)
            rewrite = ()
            if call_index == n_calls - 1:
                return
            # The pause after the call was drawn when it was issued (same draw order as drawing it
            # here), so the engine knows it at the call's end (agentic policies' on_tool_start).
            if request.next_gap_kind == "join":
                start = env.now
                fanout = _count(model.sub_fanout, rng, 1)
                children = []
                # Siblings share the parent's history plus the sub-agents' own system prompt.
                base = stream.fork()
                base.append(model.spec.subagents.system_tokens)
                base.shared_blocks = len(base.keys)
                for k in range(fanout):
                    child_rng = np.random.default_rng(
                        np.random.SeedSequence(self.seed, spawn_key=(2, model.index, session_id, call_index, k)))
                    child = base.fork()
                    child.append(_tokens(model.sub_task, child_rng, 1, model.spec.max_context_tokens))
                    calls = _count(model.sub_calls, child_rng, 1)
                    self.counters.subagents_spawned += 1
                    child_agent = self._next_agent_id
                    self._next_agent_id += 1
                    children.append(env.process(
                        self._conversation(model, child, child_rng, session_id, depth + 1, calls, agent_id=child_agent)))
                yield simpy.AllOf(env, children)
                for _ in range(fanout):
                    stream.append(_tokens(model.sub_result, rng, 0, model.spec.max_context_tokens))
                gap_s, gap_kind = env.now - start, "join"
                continue
            gap_s, gap_kind = request.next_gap_s, request.next_gap_kind
            if ahead is not None and gap_kind == "tool":
                # The tool output is drawn as the gap starts (the same draw as after it: nothing
                # else draws in between) and streamed to the engine as it arrives. Not prefilled
                # when the next call will compact the history or find the context full.
                appended = _tokens(model.appended, rng, 0, spec.max_context_tokens)
                stream.append(appended)
                compacts = spec.compaction is not None and stream.tokens > spec.compaction.trigger_tokens
                gap = yield from ahead.tool_gap(request, stream, appended, gap_s,
                                                prefill=not compacts and stream.tokens <= spec.max_context_tokens)
                if self.on_resume is not None:
                    self.on_resume(agent_id, request)
            else:
                yield env.timeout(gap_s)
                if self.on_resume is not None:
                    self.on_resume(agent_id, request)
                stream.append(_tokens(model.appended, rng, 0, spec.max_context_tokens))
            edits = spec.edits
            if edits is not None and edits.probability > 0 and rng.random() < edits.probability:
                shared_tokens = stream.shared_blocks * self.block_tokens
                depth_fraction = rng.uniform(edits.min_depth_fraction, 1.0)
                offset = shared_tokens + int((stream.tokens - shared_tokens) * depth_fraction)
                old_keys = stream.keys[:]
                self.counters.edits += 1
                self.counters.invalidated_blocks += stream.rewrite_from(offset, _count(model.edit_dropped, rng, 0))
                self._mutated(last_instance, old_keys, offset // self.block_tokens)
                rewrite = _merge_rewrite(rewrite, last_instance, offset // self.block_tokens, last_cached_blocks)
                mutations += 1

    def live_keys(self) -> tuple[tuple[list[int], list[int]], int]:
        """``((starts, ends), top)``: the keys a live agent can still send, as the sorted starts
        and ends of disjoint runs (every running agent's context, which holds its sub-agents'
        shared start while they run, and every shared prefix made so far), and the next key the
        allocator hands out. A key below ``top`` outside the runs is dead for good: an agent's
        history only grows or is rewritten with new keys, and an ended agent's are never sent
        again."""
        runs: list[tuple[int, int]] = []
        for stream in self.live_streams.values():
            runs += key_runs(stream.keys)
        runs += key_runs(sorted(self.prefixes.all_keys()))
        return merged_runs(runs), self.alloc.peek()

    def _mutated(self, instance: int, old_keys: list[int], from_block: int) -> None:
        if self.on_mutation is not None and instance >= 0:
            self.on_mutation(instance, old_keys, from_block)

    def _call(self, model, stream: TokenStream, rng, session_id, depth, call_index, gap_s, gap_kind, mutations=0,
              agent_id: int = -1, last: bool = True, rewrite: tuple = ()):
        prompt_tokens = stream.tokens
        output_tokens = _tokens(model.output, rng, 1, model.spec.max_context_tokens)
        # What follows this call: drawn now, in the order the conversation loop used to draw it
        # after the call (sub-agent coin, then human coin and the gap), so sessions are unchanged.
        next_kind, next_gap = "", float("nan")
        if not last:
            if depth == 0 and model.sub_probability > 0 and rng.random() < model.sub_probability:
                next_kind = "join"
            elif rng.random() < model.spec.human_turn_probability:
                gap = model.human_gap.sample(rng)
                next_kind, next_gap = "human", gap if gap > 0.0 else 0.0  # max(0.0, gap), without the builtin
            else:
                gap = model.tool_gap.sample(rng)
                next_kind, next_gap = "tool", gap if gap > 0.0 else 0.0
        # The prompt's keys are the first ``prompt_blocks`` of the total's (appending only
        # extends the stream's keys), so the request holds one array of them.
        prompt_blocks = min(prompt_tokens // stream.block_tokens, len(stream.keys))
        stream.append(output_tokens)
        total_keys = stream.full_block_keys(prompt_tokens + output_tokens)
        request = LLMRequest(
            request_id=self._next_request_id, session_id=session_id, agent_class=model.name, depth=depth,
            call_index=call_index, arrival_s=self.env.now, prompt_tokens=prompt_tokens,
            output_tokens=output_tokens, prompt_blocks=prompt_blocks, total_keys=total_keys,
            done=self.env.event(), gap_before_s=gap_s, gap_kind=gap_kind, mutations=mutations,
            agent_id=agent_id, next_gap_s=next_gap, next_gap_kind=next_kind, rewrite=rewrite,
        )
        self._next_request_id += 1
        self.submit(request)
        yield request.done
        return request


def _merge_rewrite(rewrite: tuple, instance: int, from_block: int, cached_blocks: int) -> tuple:
    """``rewrite`` (see :attr:`LLMRequest.rewrite`) after one more rewrite from ``from_block``:
    the earliest rewritten block over all rewrites since the previous call."""
    if instance < 0:
        return rewrite
    if rewrite:
        from_block = min(from_block, rewrite[1])
    return (instance, from_block, cached_blocks)


def arrival_rate_multiplier(arrival, t_s: float) -> float:
    """The Poisson rate multiplier at time ``t_s`` (diurnal profile times active bursts)."""
    multiplier = 1.0
    if arrival.diurnal is not None:
        multiplier *= arrival.diurnal[int(t_s // 3600) % 24]
    for burst in arrival.bursts:
        if burst.start_s <= t_s < burst.start_s + burst.duration_s:
            multiplier *= burst.multiplier
    return multiplier


def arrival_rate_multiplier_peak(arrival) -> float:
    """An upper bound of :func:`arrival_rate_multiplier` over all times."""
    peak = max(arrival.diurnal) if arrival.diurnal is not None else 1.0
    for burst in arrival.bursts:
        peak *= max(1.0, burst.multiplier)
    return peak
