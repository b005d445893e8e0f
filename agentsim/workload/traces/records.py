"""The common request record every trace reader produces, and the WEKA session view.

One :class:`TraceRequest` per LLM call, whatever the source format. Block keys are compact
``array('q')`` integers (8 bytes a block, never one Python object per block) and are namespaced
by the reader so that blocks of different conversations never collide: two requests share a
cached block iff they carry the same key at the same position *and* the same keys before it
(keys are prefix keys, as in every supported format).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field


@dataclass(slots=True)
class TraceRequest:
    """One LLM request of a trace.

    Attributes:
        index: position in reading order (0-based, file order; ties in ``timestamp_s`` keep it).
        timestamp_s: arrival time in seconds from the trace (or session) start. Mooncake's
            milliseconds are converted; WEKA requests get their session's offset plus, for
            sub-agents, the sub-agent's start.
        session_id: the conversation: WEKA session ``id``, Bailian root ``chat_id`` (as text),
            Mooncake ``""`` (the format has no sessions).
        agent_id: ``"main"`` for the top-level agent, else the sub-agent's id path
            (``"agent_001"``, ``"agent_001/agent_004"`` when nested).
        parent_agent_id: the agent that spawned this one (``None`` for ``"main"``).
        depth: sub-agent nesting depth (0 = main agent).
        request_id: Bailian ``chat_id``; ``None`` where the format has none.
        parent_request_id: Bailian ``parent_chat_id`` (``None`` for a first turn).
        turn: Bailian ``turn``; for WEKA the 0-based call number within its agent.
        input_tokens: prompt length in tokens (cached prefix included).
        output_tokens: generated tokens.
        block_keys: prefix block keys, ``block_tokens`` tokens each (the last may be partial).
        block_tokens: tokens per block of ``block_keys``.
        think_time_s: WEKA ``think_time``: client delay before this request (after the previous
            response of the same agent); ``None`` when absent or not in the format.
        api_time_s: WEKA ``api_time``: server time of the call; ``None`` when absent.
        stop: WEKA stop reason (``"tool_use"``, ``"end_turn"``, ``""``); ``None`` elsewhere.
        model: model name when recorded.
        kind: request type (WEKA ``"n"``/``"s"``, Bailian ``type``).
        source: the file the request came from.
        line: 1-based line of the request (JSONL) or of the session object (WEKA).
    """

    index: int
    timestamp_s: float
    session_id: str
    input_tokens: int
    output_tokens: int
    block_keys: array
    block_tokens: int
    agent_id: str = "main"
    parent_agent_id: str | None = None
    depth: int = 0
    request_id: int | None = None
    parent_request_id: int | None = None
    turn: int | None = None
    think_time_s: float | None = None
    api_time_s: float | None = None
    stop: str | None = None
    model: str | None = None
    kind: str | None = None
    source: str = ""
    line: int = 0

    @property
    def n_blocks(self) -> int:
        return len(self.block_keys)


@dataclass(slots=True)
class SubAgent:
    """A sub-agent spawned inside a WEKA session, with its own ordered calls.

    ``start_s`` is relative to the session start (the parent's clock). ``items`` holds its
    requests (their ``timestamp_s`` already absolute: session offset + ``start_s`` + own ``t``)
    and any sub-agents it spawned, in recorded order. Sub-agents share the parent's block-key
    namespace, so their prompts hit the parent's cached prefix where they share it.
    """

    agent_id: str
    parent_agent_id: str
    depth: int
    start_s: float
    subagent_type: str | None = None
    duration_s: float | None = None
    status: str | None = None
    tool_tokens: int | None = None
    system_tokens: int | None = None
    models: list[str] = field(default_factory=list)
    items: list["TraceRequest | SubAgent"] = field(default_factory=list)

    def requests(self) -> list[TraceRequest]:
        """This agent's own calls in order (not those of its sub-agents)."""
        return [item for item in self.items if isinstance(item, TraceRequest)]


@dataclass(slots=True)
class WekaSession:
    """One WEKA/AgentX session: the main agent's ordered items (requests and sub-agents).

    ``offset_s`` is where the session starts on the replay clock (added to every
    ``timestamp_s``); ``namespace`` is the ordinal used to make its block keys unique.
    """

    session_id: str
    source: str
    namespace: int
    offset_s: float
    block_tokens: int
    hash_id_scope: str
    tool_tokens: int | None = None
    system_tokens: int | None = None
    models: list[str] = field(default_factory=list)
    items: list["TraceRequest | SubAgent"] = field(default_factory=list)

    def requests(self) -> list[TraceRequest]:
        """The main agent's own calls in order."""
        return [item for item in self.items if isinstance(item, TraceRequest)]

    def subagents(self) -> list[SubAgent]:
        """Every sub-agent of the session, depth-first in recorded order (nested ones included)."""
        out: list[SubAgent] = []
        stack = [item for item in reversed(self.items) if isinstance(item, SubAgent)]
        while stack:
            agent = stack.pop()
            out.append(agent)
            stack.extend(item for item in reversed(agent.items) if isinstance(item, SubAgent))
        return out

    def all_requests(self) -> list[TraceRequest]:
        """Every request of the session (main and sub-agents), sorted by (timestamp_s, index)."""
        out = list(self.requests())
        for agent in self.subagents():
            out.extend(agent.requests())
        out.sort(key=lambda r: (r.timestamp_s, r.index))
        return out
