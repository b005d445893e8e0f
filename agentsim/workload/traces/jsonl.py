"""Readers for the two JSON-lines formats: Mooncake and Bailian/Qwen.

Both stream the file one line at a time and yield :class:`TraceRequest` in file order; the
caller (:func:`agentsim.workload.traces.load_requests`) sorts by timestamp. A decreasing
timestamp triggers one :class:`TraceOrderWarning` at the end of the file.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Iterator

from agentsim.workload.traces.fields import as_block_keys, as_count, as_time, require
from agentsim.workload.traces.records import TraceRequest
from agentsim.workload.traces.textio import iter_lines, parse_json_line

MOONCAKE_BLOCK_TOKENS = 512
BAILIAN_BLOCK_TOKENS = 16


class TraceOrderWarning(UserWarning):
    """Timestamps in a trace decrease somewhere; requests are replayed sorted (stably)."""


def _warn_unsorted(source: str, inversions: int, first_line: int) -> None:
    warnings.warn(
        TraceOrderWarning(
            f"{source}: timestamps decrease {inversions} time(s) (first at line {first_line}); "
            "requests are sorted by timestamp, keeping file order for ties"),
        stacklevel=3)


def iter_mooncake(path: str | Path, *, block_tokens: int = MOONCAKE_BLOCK_TOKENS,
                  start_index: int = 0) -> Iterator[TraceRequest]:
    """Mooncake JSONL: ``{"timestamp": ms, "input_length", "output_length", "hash_ids"}``.

    ``hash_ids`` are global prefix-block ids of ``block_tokens`` (512) tokens; they are used as
    keys unchanged. The trace has no sessions: ``session_id`` is ``""``.
    """
    source = str(path)
    index = start_index
    last_ts = float("-inf")
    inversions, first_inversion = 0, 0
    for lineno, line in iter_lines(path):
        record = parse_json_line(source, lineno, line)
        where = f"line {lineno}"
        timestamp_s = as_time(require(record, "timestamp", source, where), "timestamp", source, where) / 1000.0
        input_tokens = as_count(require(record, "input_length", source, where), "input_length", source, where)
        output_tokens = as_count(require(record, "output_length", source, where), "output_length", source, where)
        keys = as_block_keys(require(record, "hash_ids", source, where), "hash_ids", source, where,
                             input_tokens, block_tokens)
        if timestamp_s < last_ts:
            inversions += 1
            first_inversion = first_inversion or lineno
        last_ts = max(last_ts, timestamp_s)
        yield TraceRequest(index=index, timestamp_s=timestamp_s, session_id="", input_tokens=input_tokens,
                           output_tokens=output_tokens, block_keys=keys, block_tokens=block_tokens,
                           source=source, line=lineno)
        index += 1
    if inversions:
        _warn_unsorted(source, inversions, first_inversion)


def _optional_int(record: dict, name: str, source: str, where: str) -> int | None:
    value = record.get(name)
    if value is None:
        return None
    if type(value) is not int:
        from agentsim.errors import InputError
        raise InputError(f"field {name!r} must be an integer, got {value!r}", source, where)
    return value


def iter_bailian(path: str | Path, *, block_tokens: int = BAILIAN_BLOCK_TOKENS,
                 start_index: int = 0) -> Iterator[TraceRequest]:
    """Bailian/Qwen JSONL: ``chat_id, parent_chat_id, timestamp (s), type, turn, input_length,
    output_length, hash_ids`` (16-token blocks, global ids, used unchanged).

    A request whose ``parent_chat_id`` is absent, null or negative starts a conversation;
    ``session_id`` is the root ``chat_id`` of the chain (text). A parent that has not appeared
    earlier in the file starts its own session named after that parent id.
    """
    from agentsim.errors import InputError

    source = str(path)
    index = start_index
    root_of: dict[int, int] = {}
    last_ts = float("-inf")
    inversions, first_inversion = 0, 0
    for lineno, line in iter_lines(path):
        record = parse_json_line(source, lineno, line)
        where = f"line {lineno}"
        chat_id = require(record, "chat_id", source, where)
        if type(chat_id) is not int:
            raise InputError(f"field 'chat_id' must be an integer, got {chat_id!r}", source, where)
        parent = _optional_int(record, "parent_chat_id", source, where)
        if parent is not None and parent < 0:
            parent = None
        timestamp_s = as_time(require(record, "timestamp", source, where), "timestamp", source, where)
        input_tokens = as_count(require(record, "input_length", source, where), "input_length", source, where)
        output_tokens = as_count(require(record, "output_length", source, where), "output_length", source, where)
        keys = as_block_keys(require(record, "hash_ids", source, where), "hash_ids", source, where,
                             input_tokens, block_tokens)
        turn = _optional_int(record, "turn", source, where)
        kind = record.get("type")
        if kind is not None and not isinstance(kind, str):
            raise InputError(f"field 'type' must be a string, got {kind!r}", source, where)
        root = chat_id if parent is None else root_of.get(parent, parent)
        root_of[chat_id] = root
        if timestamp_s < last_ts:
            inversions += 1
            first_inversion = first_inversion or lineno
        last_ts = max(last_ts, timestamp_s)
        yield TraceRequest(index=index, timestamp_s=timestamp_s, session_id=str(root), input_tokens=input_tokens,
                           output_tokens=output_tokens, block_keys=keys, block_tokens=block_tokens,
                           request_id=chat_id, parent_request_id=parent, turn=turn, kind=kind,
                           source=source, line=lineno)
        index += 1
    if inversions:
        _warn_unsorted(source, inversions, first_inversion)
