"""Replaying a real trace through the timed simulation.

* ``open-loop``: every request arrives at its recorded timestamp, whatever the simulated latency.
* ``closed-loop``: sessions keep their think times. An agent issues its next call only when its
  previous call has completed plus the recorded gap (WEKA ``think_time``; for formats without it,
  the recorded inter-arrival time of the session's consecutive requests), so a slower cache
  delays the agent. WEKA sub-agents run concurrently (a run of consecutive sub-agent entries is
  spawned together) and the parent waits for all of them before its next call. Mooncake has no
  sessions: each request is its own session, so closed-loop equals open-loop there.

Block keys come from the trace (already namespaced per conversation by the readers). Only the
prompt's blocks are committed after a call: traces do not say which keys the output has.

**Agents and their pauses** (what agentic policies act on; the same derivation as cache-only
replay, :mod:`agentsim.workload.traces.agents`): every request carries its agent
(``agent_id``, one integer per ``(session_id, agent_id)`` of the trace: a session's main
conversation or one sub-agent) and the pause that follows it (``next_gap_kind``): ``tool`` after
a ``tool_use`` stop, ``human`` after ``end_turn``, ``join`` when the agent spawns sub-agents
next, ``""`` after its last call or an unknown stop. ``next_gap_s`` is the recorded gap (WEKA
closed-loop: the next call's ``think_time``; open-loop: the next call's timestamp minus this
one's). The engine turns tool and human pauses into ``on_tool_start`` at the call's end; the
driver calls ``on_resume(agent_id, request)`` when the pause is over: in closed-loop after the
think time, just before the agent's next call; in open-loop when the agent's next call
arrives, or when the paused call ends if the next one arrived first (the pause then lasted no
time). Formats without stop reasons (Mooncake, Bailian) announce no pauses.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable

import simpy

from agentsim.cluster.request import LLMRequest
from agentsim.engine.agents import WorkloadCounters
from agentsim.workload.traces import SubAgent, TraceRequest, WekaSession
from agentsim.workload.traces.agents import agent_signals, pause_kind

#: Pause kinds after which the driver reports the agent's resumption (sub-agent joins hold no pin).
PAUSE_KINDS = ("tool", "human")


class TraceDriver:
    """Issues a trace's requests into the simulation (see the module docstring for the modes)."""

    on_idle: Callable[[], None] | None = None
    #: ``on_resume(agent_id, request)``: the tool or human pause that followed ``request`` is
    #: over (set by the engine when the policy acts on pauses; see the module docstring).
    on_resume: Callable[[int, LLMRequest], None] | None = None

    def __init__(self, env: simpy.Environment, scenario, submit: Callable[[LLMRequest], None],
                 requests: list[TraceRequest] | None = None, sessions: list[WekaSession] | None = None,
                 mode: str = "open-loop", on_mutation=None):
        self.env = env
        self.submit = submit
        self.requests = requests or []
        self.sessions = sessions
        self.mode = mode
        self.counters = WorkloadCounters()
        self._open_processes = 0
        self._next_id = 0
        self._session_ids: dict[str, int] = {}
        self._agent_ids: dict[tuple[str, str], int] = {}
        #: Requests issued with a tool or human pause after them (what agentic policies act on).
        self.paused_requests = 0
        span_s = max((r.timestamp_s for r in self.requests), default=0.0)
        self.sample_interval_s = max(span_s / 200.0, 1.0)

    def finished_issuing(self) -> bool:
        return self._open_processes == 0

    def _done_one(self) -> None:
        self._open_processes -= 1
        if self._open_processes == 0 and self.on_idle is not None:
            self.on_idle()

    def _session_number(self, name: str) -> int:
        if name not in self._session_ids:
            self._session_ids[name] = len(self._session_ids)
        return self._session_ids[name]

    def _agent_number(self, trace: TraceRequest) -> int:
        """One integer per agent of the trace (-1 for a request without a session)."""
        if not trace.session_id:
            return -1
        owner = (trace.session_id, trace.agent_id)
        if owner not in self._agent_ids:
            self._agent_ids[owner] = len(self._agent_ids)
        return self._agent_ids[owner]

    def _request(self, trace: TraceRequest, session: int, call_index: int, gap_s: float, gap_kind: str,
                 next_gap_s: float = float("nan"), next_gap_kind: str = "") -> LLMRequest:
        keys = trace.block_keys   # array('q'), as the agents' token streams; never mutated
        request = LLMRequest(
            request_id=self._next_id, session_id=session, agent_class=trace.agent_id if trace.depth else "main",
            depth=trace.depth, call_index=call_index, arrival_s=self.env.now,
            prompt_tokens=max(1, trace.input_tokens), output_tokens=max(1, trace.output_tokens),
            prompt_blocks=len(keys), total_keys=keys, done=self.env.event(), gap_before_s=gap_s, gap_kind=gap_kind,
            agent_id=self._agent_number(trace), next_gap_s=next_gap_s, next_gap_kind=next_gap_kind)
        self.paused_requests += next_gap_kind in PAUSE_KINDS and request.agent_id >= 0
        self._next_id += 1
        return request

    def _resume(self, previous: LLMRequest | None) -> None:
        """The pause after ``previous`` (the same agent's last call) is over."""
        if previous is not None and previous.next_gap_kind in PAUSE_KINDS and self.on_resume is not None:
            self.on_resume(previous.agent_id, previous)

    def _resume_when_done(self, previous: LLMRequest):
        """Open loop: the agent called again before its previous call ended; its pause (announced
        at that call's end) is over as soon as it starts."""
        yield previous.done
        self._resume(previous)

    def start(self) -> None:
        if self.mode == "open-loop":
            self._open_processes = 1
            self.env.process(self._open_loop())
        elif self.sessions is not None:
            self._open_processes = len(self.sessions)
            for session in self.sessions:
                self.env.process(self._weka_session(session))
        else:
            by_session: dict[str, list[TraceRequest]] = defaultdict(list)
            singles = []
            for trace in self.requests:
                (by_session[trace.session_id] if trace.session_id else singles).append(trace)
            groups = list(by_session.values()) + [[t] for t in singles]
            groups.sort(key=lambda g: (g[0].timestamp_s, g[0].index))
            self._open_processes = len(groups)
            for group in groups:
                self.env.process(self._chain(group))
        if self._open_processes == 0 and self.on_idle is not None:
            self.on_idle()

    # --- open loop ------------------------------------------------------------------------
    def _open_loop(self):
        env = self.env
        last_in_session: dict[str, float] = {}
        pauses = agent_signals(self.requests).pauses
        last_of_agent: dict[int, LLMRequest] = {}
        for i, trace in enumerate(self.requests):
            if trace.timestamp_s > env.now:
                yield env.timeout(trace.timestamp_s - env.now)
            previous = last_in_session.get(trace.session_id) if trace.session_id else None
            gap = trace.timestamp_s - previous if previous is not None else float("nan")
            last_in_session[trace.session_id] = trace.timestamp_s
            session = self._session_number(trace.session_id or f"#{trace.index}")
            pause = pauses[i]
            next_kind, next_gap = (pause[1], pause[2]) if pause is not None else ("", float("nan"))
            request = self._request(trace, session, 0, gap, "first" if previous is None else "tool",
                                    next_gap, next_kind)
            before = last_of_agent.get(request.agent_id) if request.agent_id >= 0 else None
            if before is not None and before.next_gap_kind in PAUSE_KINDS:
                if before.done.triggered:
                    self._resume(before)
                else:
                    env.process(self._resume_when_done(before))
            if request.agent_id >= 0:
                last_of_agent[request.agent_id] = request
            self.counters.sessions_started = len(self._session_ids)
            self.submit(request)
        self._done_one()

    # --- closed loop ----------------------------------------------------------------------
    def _chain(self, group: list[TraceRequest]):
        """A session without think times: the next call waits for the previous plus the
        recorded inter-arrival gap."""
        env = self.env
        session = self._session_number(group[0].session_id or f"#{group[0].index}")
        self.counters.sessions_started += 1
        if group[0].timestamp_s > env.now:
            yield env.timeout(group[0].timestamp_s - env.now)
        gap, kind = float("nan"), "first"
        for call_index, trace in enumerate(group):
            if call_index:
                gap = max(0.0, trace.timestamp_s - group[call_index - 1].timestamp_s)
                kind = "tool"
                yield env.timeout(gap)
            request = self._request(trace, session, call_index, gap, kind)
            self.submit(request)
            yield request.done
        self.counters.sessions_finished += 1
        self._done_one()

    def _weka_session(self, session: WekaSession):
        env = self.env
        number = self._session_number(session.session_id)
        self.counters.sessions_started += 1
        if session.offset_s > env.now:
            yield env.timeout(session.offset_s - env.now)
        yield from self._agent_items(session.items, number)
        self.counters.sessions_finished += 1
        self._done_one()

    @staticmethod
    def _pause_after(items: list, index: int) -> tuple[str, float]:
        """``(next_gap_kind, next_gap_s)`` of request ``items[index]``: what its agent does next
        (see the module docstring)."""
        if index + 1 >= len(items):
            return "", float("nan")
        following = items[index + 1]
        if isinstance(following, SubAgent):
            return "join", float("nan")
        kind = pause_kind(items[index].stop)
        if not kind:
            return "", float("nan")
        gap = following.think_time_s if following.think_time_s is not None else 0.0
        return kind, max(0.0, gap)

    def _agent_items(self, items: list, session: int):
        env = self.env
        previous_stop: str | None = None
        previous: LLMRequest | None = None
        call_index = 0
        index = 0
        while index < len(items):
            item = items[index]
            if isinstance(item, SubAgent):
                group = []
                while index < len(items) and isinstance(items[index], SubAgent):
                    group.append(items[index])
                    index += 1
                self.counters.subagents_spawned += len(group)
                started = env.now
                children = [env.process(self._agent_items(agent.items, session)) for agent in group]
                yield simpy.AllOf(env, children)
                previous_stop = "join"
                join_gap = env.now - started
                continue
            trace: TraceRequest = item
            if call_index == 0 and previous_stop is None:
                gap, kind = float("nan"), "first"
            elif previous_stop == "join":
                gap, kind = join_gap, "join"
            else:
                gap = trace.think_time_s if trace.think_time_s is not None else 0.0
                kind = "human" if previous_stop == "end_turn" else "tool"
                if gap > 0:
                    yield env.timeout(gap)
                self._resume(previous)
            next_kind, next_gap = self._pause_after(items, index)
            request = self._request(trace, session, call_index, gap, kind, next_gap, next_kind)
            self.submit(request)
            yield request.done
            previous = request
            previous_stop = trace.stop or ""
            call_index += 1
            index += 1
