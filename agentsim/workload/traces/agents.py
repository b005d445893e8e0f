"""Agents and their pauses in a flat trace request stream (what agentic cache policies need).

Agentic policies (TTL-pin, Continuum, InferCept, KVFlow, the Belady agent-oracle) act when an
agent pauses between two of its calls: a tool runs, or the human answers. A trace says so
where it records agents and stop reasons (WEKA / AgentX):

* **agent identity** = ``(session_id, agent_id)``: the main conversation of a session
  (``agent_id == "main"``) or one sub-agent (its id path). Requests without a session
  (Mooncake) have no agent.
* **what follows a request** = the pause before the same agent's next request, by the
  request's ``stop``: ``tool_use`` -> ``tool``, ``end_turn`` -> ``human``. If the agent spawned
  sub-agents in between (the *first* request of an agent whose ``parent_agent_id`` is this
  agent, in the same session, arrives before the agent's next request; later calls of a
  sub-agent spawned earlier do not make the parent's next pause a join), it is a ``join``: the agent waits for its
  sub-agents and its KV is not paused (as in the simulated agents). The agent's last request,
  or one whose stop is unknown or empty (interrupted, streaming), is followed by no pause
  (``""``).
* **gap** = the time to the agent's next request on the replay clock: next ``timestamp_s``
  minus this one (a cache-only replay serves a request at its arrival time, so that is when
  the agent calls again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from agentsim.workload.traces.records import TraceRequest

STOP_TO_PAUSE = {"tool_use": "tool", "end_turn": "human"}


@dataclass(frozen=True, slots=True)
class AgentSignals:
    """What a request stream tells agentic policies (see the module docstring).

    ``pauses[i]`` is ``(owner, kind, gap_s)`` for request ``i`` (``owner`` =
    ``(session_id, agent_id)``; ``kind`` in ``tool``, ``human``, ``join``, ``""``) or None for a
    request without an agent. ``paused_requests`` counts requests followed by a tool or human
    pause; ``agents`` the distinct owners.
    """

    pauses: list
    agents: int
    paused_requests: int
    subagent_joins: int

    @property
    def has_pauses(self) -> bool:
        return self.paused_requests > 0


def pause_kind(stop: str | None) -> str:
    """The pause a request's stop reason announces (``""`` if none is known)."""
    return STOP_TO_PAUSE.get(stop or "", "")


def agent_signals(requests: Sequence[TraceRequest]) -> AgentSignals:
    """Agents, pause kinds and gaps of ``requests`` (in replay order; see the module docstring)."""
    pauses: list = [None] * len(requests)
    last: dict[tuple[str, str], int] = {}            # owner -> index of its latest request
    spawned_since: dict[tuple[str, str], bool] = {}  # owner -> a sub-agent of it called since
    paused = joins = 0
    for i, request in enumerate(requests):
        if not request.session_id:
            continue
        owner = (request.session_id, request.agent_id)
        parent = request.parent_agent_id
        previous = last.get(owner)
        if parent is not None and previous is None:  # a sub-agent starts: its parent is joining it
            spawned_since[(request.session_id, parent)] = True
        if previous is not None:
            kind = "join" if spawned_since.get(owner) else pause_kind(requests[previous].stop)
            pauses[previous] = (owner, kind, request.timestamp_s - requests[previous].timestamp_s)
            paused += kind in ("tool", "human")
            joins += kind == "join"
        last[owner] = i
        spawned_since[owner] = False
        pauses[i] = (owner, "", float("nan"))
    return AgentSignals(pauses=pauses, agents=len(last), paused_requests=paused, subagent_joins=joins)
