"""Trace readers: Mooncake JSONL, WEKA/AgentX JSON sessions, Bailian/Qwen JSONL.

Every reader streams its input (gzip or plain, detected from the magic bytes) and yields one
:class:`TraceRequest` per LLM call with compact ``array('q')`` block keys, namespaced so that
different conversations never share a key by accident. Bad input raises
:class:`agentsim.errors.InputError` naming the file and line.

Entry points:

* :func:`detect_format(path) <detect_format>` -> ``"mooncake" | "weka" | "bailian"`` (from content).
* :func:`iter_requests(path, fmt) <iter_requests>`: requests in reading order (streamed).
* :func:`load_requests(path, fmt, block_tokens=None) <load_requests>`: all requests sorted by
  ``(timestamp_s, index)`` (stable: file order for ties), optionally re-blocked.
* :func:`iter_weka_sessions(path) <iter_weka_sessions>`: WEKA sessions as structured objects
  (:class:`WekaSession`: ``items`` = the main agent's ordered :class:`TraceRequest` and
  :class:`SubAgent` entries, recursively). Fitting example::

      for session in iter_weka_sessions("../shared/data/weka-claude-code"):
          calls = session.requests()                 # main-agent calls in order
          for gap in iter_weka_gaps(session):        # main agent, then each sub-agent
              gap.kind, gap.gap_s                    # "tool" | "human" | "other", seconds
              gap.appended_tokens                    # in_next - in_prev
          [r.api_time_s for r in calls]; [r.output_tokens for r in calls]
          len(session.subagents())                   # sub-agent fan-out

* :class:`Reblocker`: coarser blocks (e.g. 64 -> 512 tokens) for cross-trace comparisons.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterator

from agentsim.errors import InputError, did_you_mean
from agentsim.workload.traces.jsonl import (
    BAILIAN_BLOCK_TOKENS, MOONCAKE_BLOCK_TOKENS, TraceOrderWarning, iter_bailian, iter_mooncake,
)
from agentsim.workload.traces.reblock import Reblocker
from agentsim.workload.traces.records import SubAgent, TraceRequest, WekaSession
from agentsim.workload.traces.textio import peek_text
from agentsim.workload.traces.weka import (
    WEKA_BLOCK_TOKENS, Gap, agent_call_sequences, iter_weka, iter_weka_gaps, iter_weka_sessions, session_files,
)

FORMATS = ("mooncake", "weka", "bailian")


def detect_format(path: str | Path) -> str:
    """The trace format of ``path`` (a file, or a directory of WEKA session files), from content.

    Looks at the first record: a ``requests`` list means WEKA, a ``chat_id`` Bailian,
    ``timestamp`` + ``hash_ids`` Mooncake. Raises InputError if none matches.
    """
    path = Path(path)
    file = session_files(path)[0] if path.is_dir() else path
    if not file.exists():
        raise InputError("trace file not found", str(file))
    text = peek_text(file).lstrip()
    if not text.startswith(("{", "[")):
        raise InputError(f"unknown trace format: content is not JSON; known formats: {', '.join(FORMATS)}", str(file))
    first_line = text.split("\n", 1)[0]
    keys: set[str] = set()
    try:
        obj = json.loads(first_line)
        if isinstance(obj, list) and obj and isinstance(obj[0], dict):
            obj = obj[0]
        if isinstance(obj, dict):
            keys = set(obj)
    except (json.JSONDecodeError, RecursionError):
        # A long single-line or pretty-printed object: look for top-level key names instead.
        keys = set(re.findall(r'"([A-Za-z_]+)"\s*:', text[:8192]))
    if "requests" in keys or "hash_id_scope" in keys:
        return "weka"
    if "chat_id" in keys:
        return "bailian"
    if "hash_ids" in keys and "timestamp" in keys:
        return "mooncake"
    raise InputError(
        f"unknown trace format (first record has keys {sorted(keys)[:8]}); known formats: {', '.join(FORMATS)}; "
        "pass --format", str(file), "line 1")


def native_block_tokens(fmt: str) -> int:
    """Block size of a format's ``hash_ids`` (WEKA files may override it with ``block_size``)."""
    return {"mooncake": MOONCAKE_BLOCK_TOKENS, "weka": WEKA_BLOCK_TOKENS, "bailian": BAILIAN_BLOCK_TOKENS}[fmt]


def resolve_format(path: str | Path, fmt: str = "auto") -> str:
    if fmt == "auto":
        return detect_format(path)
    if fmt not in FORMATS:
        raise InputError(f"unknown trace format {fmt!r}{did_you_mean(fmt, FORMATS)}; known: auto, {', '.join(FORMATS)}", "--format")
    return fmt


def iter_requests(path: str | Path, fmt: str = "auto", *, session_offset_s: float = 0.0) -> Iterator[TraceRequest]:
    """Requests of a trace in reading order (WEKA: session by session, each sorted by time)."""
    fmt = resolve_format(path, fmt)
    if fmt == "mooncake":
        return iter_mooncake(path)
    if fmt == "bailian":
        return iter_bailian(path)
    return iter_weka(path, session_offset_s=session_offset_s)


def load_requests(path: str | Path, fmt: str = "auto", *, block_tokens: int | None = None,
                  session_offset_s: float = 0.0) -> list[TraceRequest]:
    """All requests sorted by ``(timestamp_s, index)``: timestamp order, file order for ties.

    ``block_tokens`` re-blocks to a coarser block size (a multiple of the trace's). The sort is
    stable; readers warn (:class:`TraceOrderWarning`) when a file's timestamps decrease.
    """
    requests = list(iter_requests(path, fmt, session_offset_s=session_offset_s))
    if not requests:
        raise InputError("empty trace (no requests)", str(path))
    if any(requests[i].timestamp_s > requests[i + 1].timestamp_s for i in range(len(requests) - 1)):
        requests.sort(key=lambda r: (r.timestamp_s, r.index))
    if block_tokens is not None:
        reblocker = Reblocker(requests[0].block_tokens, block_tokens)
        requests = [reblocker.apply(r) for r in requests]
    return requests


__all__ = [
    "FORMATS", "Gap", "Reblocker", "SubAgent", "TraceOrderWarning", "TraceRequest", "WekaSession",
    "agent_call_sequences", "detect_format", "iter_bailian", "iter_mooncake", "iter_requests", "iter_weka",
    "iter_weka_gaps", "iter_weka_sessions", "load_requests", "native_block_tokens", "resolve_format",
]
