"""Trace readers: Mooncake, WEKA/AgentX sessions, Bailian; detection, re-blocking, bad input."""

from __future__ import annotations

import gzip
import json
import shutil
import warnings
from pathlib import Path

import pytest

from agentsim.errors import InputError
from agentsim.workload.traces import (
    Reblocker, SubAgent, TraceOrderWarning, TraceRequest, detect_format, iter_bailian, iter_mooncake,
    iter_requests, iter_weka_gaps, iter_weka_sessions, load_requests,
)

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
MOONCAKE = FIXTURES / "mooncake_head40.jsonl"
WEKA = FIXTURES / "weka_trace_0014_excerpt.json.gz"
BAILIAN = FIXTURES / "bailian_sample.jsonl"


def _gzip_copy(src: Path, dst: Path) -> Path:
    with open(src, "rb") as f_in, gzip.open(dst, "wb") as f_out:
        shutil.copyfileobj(f_in, f_out)
    return dst


def _mooncake_line(**over) -> str:
    record = {"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]}
    record.update(over)
    return json.dumps(record)


# --- Mooncake ------------------------------------------------------------------------------
def test_mooncake_fields_units_and_order():
    requests = list(iter_mooncake(MOONCAKE))
    assert len(requests) == 40
    first = requests[0]
    assert isinstance(first, TraceRequest)
    assert first.input_tokens == 6758 and first.output_tokens == 500
    assert list(first.block_keys) == list(range(14)) and first.block_tokens == 512
    assert first.line == 1 and requests[-1].line == 40
    assert [r.index for r in requests] == list(range(40))
    raw = [json.loads(line) for line in MOONCAKE.read_text().splitlines()]
    assert [r.timestamp_s for r in requests] == [rec["timestamp"] / 1000.0 for rec in raw]


def test_gzip_and_plain_give_identical_records(tmp_path):
    plain = list(iter_mooncake(MOONCAKE))
    gz = list(iter_mooncake(_gzip_copy(MOONCAKE, tmp_path / "t.jsonl.gz")))
    # Same content; only the source name differs.
    assert [(r.timestamp_s, r.input_tokens, list(r.block_keys)) for r in plain] == \
           [(r.timestamp_s, r.input_tokens, list(r.block_keys)) for r in gz]


def test_format_detection_from_content_not_name(tmp_path):
    odd = tmp_path / "trace.data"
    odd.write_bytes(gzip.compress(MOONCAKE.read_bytes()))
    assert detect_format(odd) == "mooncake"
    assert detect_format(WEKA) == "weka"
    assert detect_format(BAILIAN) == "bailian"
    directory = tmp_path / "sessions"
    directory.mkdir()
    shutil.copy(WEKA, directory / "a.json.gz")
    assert detect_format(directory) == "weka"
    # A pretty-printed WEKA session (first line alone is not valid JSON).
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(json.loads(gzip.decompress(WEKA.read_bytes())), indent=2))
    assert detect_format(pretty) == "weka"
    assert len(load_requests(pretty)) == len(load_requests(WEKA))


def test_unknown_format_is_an_input_error(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"foo": 1}\n')
    with pytest.raises(InputError, match="unknown trace format"):
        detect_format(path)
    with pytest.raises(InputError, match="unknown trace format 'mooncak'.*did you mean 'mooncake'"):
        load_requests(MOONCAKE, "mooncak")


# --- Bailian -------------------------------------------------------------------------------
def test_bailian_sessions_follow_parent_chain():
    requests = list(iter_bailian(BAILIAN))
    by_id = {r.request_id: r for r in requests}
    assert by_id[4].session_id == "1" and by_id[4].parent_request_id == 3 and by_id[4].turn == 3
    assert by_id[5].session_id == "2" and by_id[6].session_id == "6"
    assert by_id[1].parent_request_id is None
    assert by_id[2].kind == "search" and by_id[2].block_tokens == 16
    assert by_id[3].timestamp_s == 4.25


# --- WEKA ----------------------------------------------------------------------------------
def test_weka_session_structure_subagent_times_and_namespacing():
    (session,) = list(iter_weka_sessions(WEKA))
    raw = json.loads(gzip.decompress(WEKA.read_bytes()))
    assert session.session_id == "trace_0014" and session.block_tokens == 64
    assert session.namespace == 1
    assert len(session.requests()) == 7
    (sub,) = session.subagents()
    assert isinstance(sub, SubAgent) and sub.agent_id == "agent_001" and sub.subagent_type == "Explore"
    raw_sub = raw["requests"][6]
    # A sub-agent's t is its end when it records a duration (test_weka_subagent_time.py).
    start = raw_sub["t"] - raw_sub["duration_ms"] / 1000
    assert sub.start_s == pytest.approx(start)
    assert sub.duration_s == pytest.approx(raw_sub["duration_ms"] / 1000)
    sub_calls = sub.requests()
    assert [r.timestamp_s for r in sub_calls] == pytest.approx([start + r["t"] for r in raw_sub["requests"]])
    assert all(r.agent_id == "agent_001" and r.parent_agent_id == "main" and r.depth == 1 for r in sub_calls)
    first = session.requests()[0]
    raw_first = raw["requests"][0]
    assert first.think_time_s == raw_first["think_time"] and first.api_time_s == raw_first["api_time"]
    assert first.stop == raw_first["stop"] and first.input_tokens == raw_first["in"]
    # Local ids are namespaced per session: (namespace << 32) + id.
    assert list(first.block_keys[:3]) == [(1 << 32) + i for i in raw_first["hash_ids"][:3]]
    # Items keep the recorded order: the sub-agent sits between the 6th and 7th call.
    assert isinstance(session.items[6], SubAgent)
    flat = session.all_requests()
    assert len(flat) == 9
    assert all(a.timestamp_s <= b.timestamp_s for a, b in zip(flat, flat[1:]))


def test_weka_sessions_in_a_directory_never_share_keys(tmp_path):
    shutil.copy(WEKA, tmp_path / "a.json.gz")
    shutil.copy(WEKA, tmp_path / "b.json.gz")
    sessions = list(iter_weka_sessions(tmp_path, session_offset_s=100.0))
    assert [s.namespace for s in sessions] == [1, 2]
    keys = [{k for r in s.all_requests() for k in r.block_keys} for s in sessions]
    assert keys[0] and not keys[0] & keys[1]
    assert sessions[1].requests()[0].timestamp_s == pytest.approx(sessions[0].requests()[0].timestamp_s + 100.0)
    indexes = [r.index for s in sessions for r in s.all_requests()]
    assert sorted(indexes) == list(range(18))


def test_weka_global_scope_keeps_ids(tmp_path):
    raw = json.loads(gzip.decompress(WEKA.read_bytes()))
    raw["hash_id_scope"] = "global"
    path = tmp_path / "g.json"
    path.write_text(json.dumps(raw))
    first = next(iter_weka_sessions(path)).requests()[0]
    assert list(first.block_keys[:3]) == raw["requests"][0]["hash_ids"][:3]


def test_weka_gaps_kinds_values_and_appended_tokens():
    (session,) = list(iter_weka_sessions(WEKA))
    gaps = list(iter_weka_gaps(session))
    calls = session.requests()
    main_gaps = gaps[:len(calls) - 1]
    assert len(gaps) == (len(calls) - 1) + (len(session.subagents()[0].requests()) - 1)
    for gap, prev, nxt in zip(main_gaps, calls, calls[1:]):
        assert gap.kind == {"tool_use": "tool", "end_turn": "human"}.get(prev.stop, "other")
        assert gap.gap_s == nxt.think_time_s
        assert gap.appended_tokens == nxt.input_tokens - prev.input_tokens


def test_weka_gap_derived_when_think_time_missing(tmp_path):
    raw = json.loads(gzip.decompress(WEKA.read_bytes()))
    del raw["requests"][1]["think_time"]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(raw))
    (session,) = list(iter_weka_sessions(path))
    gap = next(iter_weka_gaps(session))
    prev = raw["requests"][0]
    assert gap.gap_s == pytest.approx(raw["requests"][1]["t"] - prev["t"] - prev["api_time"])


def test_weka_jsonl_of_sessions(tmp_path):
    raw = json.loads(gzip.decompress(WEKA.read_bytes()))
    path = tmp_path / "many.jsonl"
    path.write_text(json.dumps(raw) + "\n" + json.dumps({**raw, "id": "other"}) + "\n")
    sessions = list(iter_weka_sessions(path))
    assert [s.session_id for s in sessions] == ["trace_0014", "other"]


# --- ordering ------------------------------------------------------------------------------
def test_non_monotone_timestamps_sorted_stably_with_warning(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([
        _mooncake_line(timestamp=2000, hash_ids=[1]),
        _mooncake_line(timestamp=1000, hash_ids=[2]),
        _mooncake_line(timestamp=2000, hash_ids=[3]),
        _mooncake_line(timestamp=1000, hash_ids=[4]),
    ]) + "\n")
    with pytest.warns(TraceOrderWarning, match="line 2"):
        requests = load_requests(path)
    assert [r.block_keys[0] for r in requests] == [2, 4, 1, 3]


def test_monotone_trace_gives_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_requests(MOONCAKE)


# --- re-blocking ---------------------------------------------------------------------------
def test_reblock_groups_blocks_and_keeps_partial_tail():
    reblocker = Reblocker(64, 256)
    request = TraceRequest(index=0, timestamp_s=0.0, session_id="s", input_tokens=64 * 10, output_tokens=1,
                           block_keys=__import__("array").array("q", range(10, 20)), block_tokens=64)
    coarse = reblocker.apply(request)
    assert coarse.block_tokens == 256 and len(coarse.block_keys) == 3  # ceil(10 / 4)
    assert list(coarse.block_keys) == [13, 17, 19]
    exact = Reblocker(64, 256, exact=True).apply(request)
    assert list(exact.block_keys) == [1, 2, 3]


def test_reblock_fast_and_exact_agree_on_sharing():
    requests = load_requests(WEKA)
    fast, exact = Reblocker(64, 512), Reblocker(64, 512, exact=True)
    a = [fast.apply(r) for r in requests]
    b = [exact.apply(r) for r in requests]
    # Same equality structure: position-wise key equality between any two requests matches.
    for x in range(len(requests)):
        for y in range(len(requests)):
            ka, kb = a[x].block_keys, a[y].block_keys
            ea, eb = b[x].block_keys, b[y].block_keys
            assert [p == q for p, q in zip(ka, kb)] == [p == q for p, q in zip(ea, eb)]


def test_reblock_rejects_non_multiple():
    with pytest.raises(InputError, match="not a positive multiple"):
        load_requests(MOONCAKE, block_tokens=700)


# --- bad input -----------------------------------------------------------------------------
@pytest.mark.parametrize("line, message", [
    ('{"timestamp": 0, "input_length": 10', "malformed JSON"),
    ('[1, 2]', "expected a JSON object"),
    ('{"timestamp": 0, "output_length": 1, "hash_ids": []}', "missing field 'input_length'"),
    (_mooncake_line(input_length="12"), "'input_length' must be a non-negative integer"),
    (_mooncake_line(input_length=True), "'input_length' must be a non-negative integer"),
    (_mooncake_line(output_length=-3), "'output_length' is negative"),
    (_mooncake_line(timestamp="now"), "'timestamp' must be a number"),
    (_mooncake_line(hash_ids="abc"), "'hash_ids' must be a list"),
    (_mooncake_line(hash_ids=[1, "x"]), "'hash_ids' must hold non-negative integers"),
    (_mooncake_line(hash_ids=[1, -2]), "'hash_ids' must hold non-negative integers"),
    (_mooncake_line(input_length=600, hash_ids=[1, 2, 3]), "has 3 blocks but 600 input tokens allow at most 2"),
])
def test_bad_mooncake_line_names_file_and_line(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(_mooncake_line() + "\n\n" + line + "\n")
    with pytest.raises(InputError) as info:
        list(iter_mooncake(path))
    text = info.value.render()
    assert message in text
    assert str(path) in text and "line 3" in text


def test_empty_file(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n  \n")
    with pytest.raises(InputError, match="empty trace"):
        list(iter_mooncake(path))
    with pytest.raises(InputError, match="empty trace"):
        detect_format(path)


def test_truncated_gzip(tmp_path):
    data = gzip.compress(MOONCAKE.read_bytes() * 20)
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="truncated gzip") as info:
        list(iter_mooncake(path))
    assert str(path) in info.value.render()


def test_binary_garbage(tmp_path):
    path = tmp_path / "garbage.jsonl"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(InputError, match="not a text trace"):
        detect_format(path)
    with pytest.raises(InputError, match="not a text trace"):
        list(iter_mooncake(path))


def test_missing_file():
    with pytest.raises(InputError, match="not found"):
        list(iter_requests("/nonexistent/trace.jsonl", "mooncake"))


def test_bad_weka_request_names_path(tmp_path):
    raw = json.loads(gzip.decompress(WEKA.read_bytes()))
    raw["requests"][6]["requests"][1]["in"] = -5
    path = tmp_path / "s.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(InputError) as info:
        list(iter_weka_sessions(path))
    text = info.value.render()
    assert "requests[6].requests[1]" in text and "'in' is negative" in text and str(path) in text


def test_bad_weka_json_names_line(tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{\n "id": "x",\n "requests": [\n {"t": 0,, }\n]}\n')
    with pytest.raises(InputError, match="line 4"):
        list(iter_weka_sessions(path))


def test_bad_bailian_chat_id(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_text(BAILIAN.read_text() + '{"chat_id": "x", "timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": []}\n')
    with pytest.raises(InputError, match="line 7.*'chat_id' must be an integer"):
        list(iter_bailian(path))


def test_weka_local_id_out_of_namespace_range(tmp_path):
    raw = json.loads(gzip.decompress(WEKA.read_bytes()))
    raw["requests"][0]["hash_ids"][0] = 1 << 40
    path = tmp_path / "s.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(InputError, match="below 4294967296"):
        list(iter_weka_sessions(path))
