"""Fuzzing every trace reader: any input gives requests or an InputError, never another exception.

Inputs: random bytes (plain and gzip-framed), random JSON lines built from each format's field
names with values of every JSON type, random WEKA session objects (nested sub-agents), and
truncations of the real fixture excerpts (plain and gzip) at random offsets."""

from __future__ import annotations

import gzip
import json
import os
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentsim.errors import InputError
from agentsim.workload.traces import (
    detect_format, iter_bailian, iter_mooncake, iter_weka, iter_weka_gaps, iter_weka_sessions, load_requests,
)
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "traces"
FUZZ = settings(max_examples=int(os.environ.get("AGENTSIM_FUZZ_EXAMPLES", "80")), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _read_all(path: Path, reader: str):
    """Drive one reader to the end (requests and, for WEKA, gaps); returns how many requests."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # decreasing timestamps warn; that is a result, not an error
        if reader == "mooncake":
            return sum(1 for _ in iter_mooncake(path))
        if reader == "bailian":
            return sum(1 for _ in iter_bailian(path))
        if reader == "weka":
            count = 0
            for session in iter_weka_sessions(path):
                count += len(session.all_requests())
                list(iter_weka_gaps(session))
            return count
        if reader == "weka-flat":
            return sum(1 for _ in iter_weka(path))
        if reader == "auto":
            detect_format(path)
            return len(load_requests(path, "auto", block_tokens=None))
        raise AssertionError(reader)


READERS = ["mooncake", "bailian", "weka", "weka-flat", "auto"]


def _check(path: Path, reader: str) -> None:
    try:
        count = _read_all(path, reader)
    except InputError as error:
        assert str(path) in error.render(), error.render()
        assert "\n" not in error.render()
        return
    assert count >= 0


@pytest.mark.parametrize("reader", READERS)
@given(data=st.binary(max_size=600), gz=st.booleans())
@FUZZ
def test_random_bytes(tmp_path, reader, data, gz):
    path = tmp_path / ("t.jsonl.gz" if gz else "t.jsonl")
    path.write_bytes(gzip.compress(data) if gz else data)
    _check(path, reader)


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                         st.text(max_size=6), st.sampled_from([0, 1, 16, 64, 512, -1, 2**32, 2**63]))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                               st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                           max_leaves=12)
FIELDS = ["timestamp", "input_length", "output_length", "hash_ids", "chat_id", "parent_chat_id", "type", "turn",
          "t", "in", "out", "stop", "api_time", "think_time", "model", "requests", "id", "block_size",
          "hash_id_scope", "agent_id", "duration_ms", "models", "tool_tokens", "system_tokens"]
hash_lists = st.lists(st.integers(-5, 2**40), max_size=6)


def _record(fields):
    return st.fixed_dictionaries({}, optional={name: st.one_of(json_values, hash_lists, st.integers(0, 5000))
                                               for name in fields})


records = _record(FIELDS)


def _dumps(obj) -> str:
    return json.dumps(obj, allow_nan=True)


@pytest.mark.parametrize("reader", READERS)
@given(lines=st.lists(st.one_of(records, json_values), min_size=0, max_size=6), junk=st.booleans())
@FUZZ
def test_random_json_lines(tmp_path, reader, lines, junk):
    text = "\n".join(_dumps(line) for line in lines) + ("\n{\"timestamp\": 1," if junk else "\n")
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    _check(path, reader)


weka_requests = st.recursive(
    _record(["t", "in", "out", "hash_ids", "stop", "api_time", "think_time", "model", "type"]),
    lambda inner: st.fixed_dictionaries({"type": st.just("subagent"), "t": st.integers(0, 100),
                                         "requests": st.lists(inner, max_size=3)},
                                        optional={"agent_id": json_values, "duration_ms": json_values}),
    max_leaves=8)
weka_sessions = st.fixed_dictionaries(
    {"requests": st.one_of(st.lists(weka_requests, max_size=5), json_values)},
    optional={"id": json_values, "block_size": st.one_of(st.sampled_from([0, 16, 64, -64]), json_values),
              "hash_id_scope": st.sampled_from(["local", "global", "other", 3]), "models": json_values,
              "tool_tokens": json_values, "system_tokens": json_values})


@pytest.mark.parametrize("reader", ["weka", "weka-flat", "auto"])
@given(sessions=st.lists(weka_sessions, min_size=1, max_size=3), layout=st.sampled_from(["object", "list", "lines"]),
       gz=st.booleans())
@FUZZ
def test_random_weka_sessions(tmp_path, reader, sessions, layout, gz):
    if layout == "object":
        text = _dumps(sessions[0])
    elif layout == "list":
        text = _dumps(sessions)
    else:
        text = "\n".join(_dumps(s) for s in sessions)
    path = tmp_path / ("s.json.gz" if gz else "s.json")
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    _check(path, reader)


FIXTURE_FILES = {
    "mooncake": FIXTURES / "mooncake_head40.jsonl",
    "bailian": FIXTURES / "bailian_sample.jsonl",
    "weka": FIXTURES / "weka_trace_0014_excerpt.json.gz",
}


@pytest.mark.parametrize("fmt", sorted(FIXTURE_FILES))
@given(fraction=st.floats(0, 1), gz=st.booleans(), flip=st.one_of(st.none(), st.integers(0, 10**6)))
@FUZZ
def test_truncated_and_damaged_fixtures(tmp_path, fmt, fraction, gz, flip):
    raw = FIXTURE_FILES[fmt].read_bytes()
    text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    data = gzip.compress(text) if gz else text
    data = bytearray(data[: int(len(data) * fraction)])
    if flip is not None and data:
        data[flip % len(data)] ^= 0xFF  # one corrupted byte
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(bytes(data))
    for reader in (fmt if fmt != "weka" else "weka", "auto"):
        _check(path, reader)


def test_fixtures_read_whole():
    """The undamaged fixtures read without error (the fuzz cases above start from them)."""
    assert _read_all(FIXTURE_FILES["mooncake"], "mooncake") == 40
    assert _read_all(FIXTURE_FILES["bailian"], "bailian") > 0
    assert _read_all(FIXTURE_FILES["weka"], "weka") > 0
