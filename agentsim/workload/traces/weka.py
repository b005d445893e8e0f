"""WEKA / AgentX session reader (Claude Code traces of ``callanjfox/kv-cache-tester``).

A session file holds one JSON object (or several, one per line) with ``id, models,
block_size (64), hash_id_scope, tool_tokens, system_tokens, requests[]``. A request is
``{t, type, model, in, out, hash_ids, stop, api_time?, think_time?, ...}``; an entry with
``type: "subagent"`` is a nested sub-agent with its own ``requests[]`` whose ``t`` are relative
to the sub-agent's start. A sub-agent's own ``t`` (on the parent's clock) is when it *ended*
where it records ``duration_ms``: it starts at ``t - duration`` (clamped at the parent's 0).
All 9 sub-agents of the 119 Claude Code sessions record one and fit that reading: each then
starts after the parent call that spawned it and its calls end within its duration; read as its
start, 8 of the 9 would still be calling after the parent's next call. Without a duration ``t`` is its start.

Block keys: with ``hash_id_scope: "local"`` ids are per conversation, so the reader namespaces
them as ``(namespace << 32) + id`` with one namespace per session (sub-agents share the
parent's); with ``"global"`` ids are used unchanged.

Use :func:`iter_weka_sessions` for the structured view (sessions -> ordered requests and
sub-agents; what closed-loop replay and distribution fitting need), :func:`iter_weka_gaps`
for the gaps between consecutive calls of one agent, and :func:`iter_weka` for a flat
request stream.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from agentsim.errors import InputError
from agentsim.workload.traces.fields import (
    as_block_keys, as_count, as_str, as_time, optional_time, require,
)
from agentsim.workload.traces.jsonl import TraceOrderWarning
from agentsim.workload.traces.records import SubAgent, TraceRequest, WekaSession
from agentsim.workload.traces.textio import DuplicateKeyError, duplicate_key_error, loads_json, read_text, unique_pairs
from agentsim.input_files import require_regular_file

WEKA_BLOCK_TOKENS = 64
#: Raw local ids must stay below this so namespaced keys never collide.
NAMESPACE_BITS = 32
SESSION_SUFFIXES = (".json", ".json.gz", ".jsonl", ".jsonl.gz")


def session_files(path: str | Path) -> list[Path]:
    """The session files of ``path``: itself if a file, else its ``*.json[l][.gz]`` files sorted by name."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.name.endswith(SESSION_SUFFIXES) and not p.is_dir())
        for candidate in files:
            # A named pipe or device called like a session file is refused by name, before any
            # open (which would block on a pipe), rather than skipped into "holds no session files".
            require_regular_file(candidate, "regular session file")
        if not files:
            raise InputError("directory holds no *.json / *.json.gz session files", str(path))
        return files
    if not path.exists():
        raise InputError("trace file not found", str(path))
    return [path]


def _session_objects(path: Path) -> Iterator[tuple[int, dict]]:
    """(line, object) for each session object in a file: one whole-file object or JSON lines."""
    text = read_text(path)
    try:
        data = json.loads(text, object_pairs_hook=unique_pairs)
    except DuplicateKeyError as exc:
        raise duplicate_key_error(exc, text, path) from None
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":
            raise InputError(f"malformed JSON ({exc.msg} at column {exc.colno})", str(path), f"line {exc.lineno}") from None
        data = None
    except RecursionError:
        raise InputError("JSON nested too deeply to be a trace record", str(path), "line 1") from None
    if data is not None:
        if isinstance(data, dict):
            yield 1, data
            return
        if isinstance(data, list) and all(isinstance(item, dict) for item in data):
            for item in data:
                yield 1, item
            return
        raise InputError("expected a session JSON object (or a list of them)", str(path), "line 1")
    # JSON lines: one session per line.
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        item = loads_json(line, path, f"line {lineno}")
        if not isinstance(item, dict):
            raise InputError("expected a session JSON object", str(path), f"line {lineno}")
        yield lineno, item


class _SessionParser:
    """Builds one WekaSession; ``index`` continues the caller's reading-order counter."""

    def __init__(self, source: str, lineno: int, namespace: int, offset_s: float, index: int):
        self.source = source
        self.lineno = lineno
        self.namespace = namespace
        self.offset_s = offset_s
        self.index = index
        self.key_offset = 0
        self.limit: int | None = None
        self.block_tokens = WEKA_BLOCK_TOKENS
        self.session_id = ""
        self.inversions = 0

    def where(self, path: str) -> str:
        return f"line {self.lineno}: {path}" if path else f"line {self.lineno}"

    def parse(self, obj: dict) -> WekaSession:
        source = self.source
        where = self.where("")
        requests = require(obj, "requests", source, where)
        if not isinstance(requests, list):
            raise InputError("field 'requests' must be a list", source, where)
        self.session_id = as_str(obj.get("id", Path(source).name.split(".")[0]), "id", source, where)
        self.block_tokens = as_count(obj.get("block_size", WEKA_BLOCK_TOKENS), "block_size", source, where)
        if self.block_tokens <= 0:
            raise InputError("field 'block_size' must be positive", source, where)
        scope = as_str(obj.get("hash_id_scope", "local"), "hash_id_scope", source, where)
        if scope not in ("local", "global"):
            raise InputError(f"field 'hash_id_scope' must be 'local' or 'global', got {scope!r}", source, where)
        if scope == "local":
            self.key_offset = self.namespace << NAMESPACE_BITS
            self.limit = 1 << NAMESPACE_BITS
        session = WekaSession(
            session_id=self.session_id, source=source, namespace=self.namespace, offset_s=self.offset_s,
            block_tokens=self.block_tokens, hash_id_scope=scope,
            tool_tokens=self._opt_count(obj, "tool_tokens", where),
            system_tokens=self._opt_count(obj, "system_tokens", where),
            models=self._models(obj, where))
        session.items = self._items(requests, "requests", "main", 0, self.offset_s)
        return session

    def _opt_count(self, obj: dict, name: str, where: str) -> int | None:
        value = obj.get(name)
        return None if value is None else as_count(value, name, self.source, where)

    def _models(self, obj: dict, where: str) -> list[str]:
        models = obj.get("models") or []
        if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
            raise InputError("field 'models' must be a list of strings", self.source, where)
        return list(models)

    def _items(self, entries: list, path: str, agent_id: str, depth: int, start_s: float) -> list:
        source = self.source
        items: list = []
        parent_agent = None if agent_id == "main" else agent_id.rsplit("/", 1)[0] if "/" in agent_id else "main"
        call_number = 0
        last_t = float("-inf")
        for i, entry in enumerate(entries):
            entry_path = f"{path}[{i}]"
            where = self.where(entry_path)
            if not isinstance(entry, dict):
                raise InputError("expected a request object", source, where)
            t = as_time(require(entry, "t", source, where), "t", source, where)
            if t < last_t:
                self.inversions += 1
            last_t = max(last_t, t)
            if entry.get("type") == "subagent":
                sub_entries = require(entry, "requests", source, where)
                if not isinstance(sub_entries, list):
                    raise InputError("field 'requests' must be a list", source, where)
                raw_id = as_str(entry.get("agent_id", f"agent_{i:03d}"), "agent_id", source, where)
                sub_id = raw_id if agent_id == "main" else f"{agent_id}/{raw_id}"
                duration_ms = entry.get("duration_ms")
                duration_s = None if duration_ms is None else as_time(duration_ms, "duration_ms", source, where) / 1000.0
                # t is the sub-agent's end when it has a duration (see the module docstring).
                begin = t if duration_s is None else max(0.0, t - duration_s)
                sub = SubAgent(
                    agent_id=sub_id, parent_agent_id=agent_id, depth=depth + 1, start_s=start_s - self.offset_s + begin,
                    subagent_type=entry.get("subagent_type"),
                    duration_s=duration_s,
                    status=entry.get("status"),
                    tool_tokens=self._opt_count(entry, "tool_tokens", where),
                    system_tokens=self._opt_count(entry, "system_tokens", where),
                    models=self._models(entry, where))
                sub.items = self._items(sub_entries, f"{entry_path}.requests", sub_id, depth + 1, start_s + begin)
                items.append(sub)
                continue
            input_tokens = as_count(require(entry, "in", source, where), "in", source, where)
            output_tokens = as_count(require(entry, "out", source, where), "out", source, where)
            keys = as_block_keys(require(entry, "hash_ids", source, where), "hash_ids", source, where,
                                 input_tokens, self.block_tokens, offset=self.key_offset, limit=self.limit)
            stop = entry.get("stop")
            if stop is not None and not isinstance(stop, str):
                raise InputError(f"field 'stop' must be a string, got {stop!r}", source, where)
            kind = entry.get("type")
            model = entry.get("model")
            items.append(TraceRequest(
                index=self.index, timestamp_s=start_s + t, session_id=self.session_id,
                input_tokens=input_tokens, output_tokens=output_tokens, block_keys=keys,
                block_tokens=self.block_tokens, agent_id=agent_id, parent_agent_id=parent_agent, depth=depth,
                turn=call_number, think_time_s=optional_time(entry, "think_time", source, where),
                api_time_s=optional_time(entry, "api_time", source, where), stop=stop,
                model=model if isinstance(model, str) else None, kind=kind if isinstance(kind, str) else None,
                source=source, line=self.lineno))
            self.index += 1
            call_number += 1
        return items


def iter_weka_sessions(path: str | Path, *, session_offset_s: float = 0.0, namespace_start: int = 1,
                       start_index: int = 0) -> Iterator[WekaSession]:
    """Stream the sessions of a WEKA file or directory (files sorted by name), one at a time.

    Args:
        path: a session file (``.json`` / ``.json.gz``, one object or JSON lines) or a directory.
        session_offset_s: the k-th session (0-based, reading order) starts at
            ``k * session_offset_s`` on the replay clock (0: all start together).
        namespace_start: namespace of the first session (block keys ``(ns << 32) + id``).
        start_index: first value of the reading-order ``index``.

    Each session is parsed whole (a session is the unit of the format), converted to compact
    records, and its parsed JSON dropped before the next file is read.
    """
    namespace = namespace_start
    index = start_index
    k = 0
    for file in session_files(path):
        for lineno, obj in _session_objects(file):
            parser = _SessionParser(str(file), lineno, namespace, k * session_offset_s, index)
            session = parser.parse(obj)
            if parser.inversions:
                warnings.warn(TraceOrderWarning(
                    f"{file}: session {session.session_id!r} has {parser.inversions} decreasing 't' value(s); "
                    "its requests are sorted by time, keeping file order for ties"), stacklevel=2)
            index = parser.index
            namespace += 1
            k += 1
            yield session


def iter_weka(path: str | Path, *, session_offset_s: float = 0.0, start_index: int = 0) -> Iterator[TraceRequest]:
    """Flat request stream: each session's requests (sub-agents included) sorted by time.

    Sessions follow each other in file order; merge across sessions by sorting on
    ``(timestamp_s, index)`` (as :func:`agentsim.workload.traces.load_requests` does).
    """
    for session in iter_weka_sessions(path, session_offset_s=session_offset_s, start_index=start_index):
        yield from session.all_requests()


@dataclass(slots=True)
class Gap:
    """The pause before a call, after the previous call of the same agent.

    ``kind``: ``"tool"`` if the previous call stopped with ``tool_use`` (tool execution),
    ``"human"`` if it stopped with ``end_turn`` (the user's turn), ``"other"`` otherwise
    (``""`` stop: interrupted or streaming). ``gap_s`` is the recorded ``think_time`` when
    present, else ``t_next - t_prev - api_time_prev`` (clipped at 0) when ``api_time`` is
    known, else ``None``. ``appended_tokens = in_next - in_prev`` (can be negative after a
    context compaction).
    """

    kind: str
    gap_s: float | None
    prev: TraceRequest
    next: TraceRequest
    appended_tokens: int


def _gap_kind(stop: str | None) -> str:
    if stop == "tool_use":
        return "tool"
    if stop == "end_turn":
        return "human"
    return "other"


def agent_call_sequences(session: WekaSession) -> Iterator[tuple[str, list[TraceRequest]]]:
    """(agent_id, its calls in order) for the main agent and then every sub-agent."""
    yield "main", session.requests()
    for agent in session.subagents():
        yield agent.agent_id, agent.requests()


def iter_weka_gaps(session: WekaSession) -> Iterator[Gap]:
    """Gaps between consecutive calls of each agent of ``session`` (main first, then sub-agents)."""
    for _agent_id, calls in agent_call_sequences(session):
        for prev, nxt in zip(calls, calls[1:]):
            gap_s = nxt.think_time_s
            if gap_s is None and prev.api_time_s is not None:
                gap_s = max(0.0, nxt.timestamp_s - prev.timestamp_s - prev.api_time_s)
            yield Gap(kind=_gap_kind(prev.stop), gap_s=gap_s, prev=prev, next=nxt,
                      appended_tokens=nxt.input_tokens - prev.input_tokens)
