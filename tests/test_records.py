"""Columnar record buffers give exactly the tables a list of records gave."""

from __future__ import annotations

import random
from dataclasses import fields

import numpy as np
import pytest

from agentsim.metrics.records import (EvictionSample, LinkSample, OccupancySample, RecordBuffer, RequestRecord,
                                      TierHitRecord, record_frame)


def _value(kind: str, rng: random.Random, row: int):
    if kind == "int":
        return rng.randint(-5, 10**12)
    if kind == "float":
        return float("nan") if row % 7 == 0 else rng.uniform(-1e6, 1e6)
    if kind == "bool":
        return rng.random() < 0.5
    return rng.choice(["hbm", "dram", "disk", "tool", "first"])


def _records(record_type, n: int, seed: int = 0) -> list:
    rng = random.Random(seed)
    return [record_type(*(_value(f.type, rng, row) for f in fields(record_type))) for row in range(n)]


@pytest.mark.parametrize("record_type", [RequestRecord, OccupancySample, EvictionSample, LinkSample],
                         ids=lambda t: t.__name__)
@pytest.mark.parametrize("n", [0, 1, 300])
def test_a_buffer_frames_exactly_what_the_records_frame(record_type, n):
    records = _records(record_type, n)
    buffer = RecordBuffer(record_type)
    for record in records:
        buffer.append(record)
    assert len(buffer) == n
    expected, got = record_frame(records, record_type), buffer.frame()
    assert list(got.columns) == [f.name for f in fields(record_type)]
    assert got.dtypes.to_dict() == expected.dtypes.to_dict()
    assert got.equals(expected)


def test_numbers_are_stored_as_raw_buffers_and_frames_do_not_alias_them():
    buffer = RecordBuffer(OccupancySample)
    buffer.append(OccupancySample(1.5, 2, "hbm", 10, 20, 3, 4, 5))
    # No Python object per numeric value: eight bytes each in an array buffer.
    assert buffer._arrays["d"].typecode == "d" and buffer._arrays["q"].typecode == "q"
    assert len(buffer._arrays["q"]) == 6 and len(buffer._arrays["d"]) == 1   # one row of each
    frame = buffer.frame()
    buffer.append(OccupancySample(2.5, 3, "dram", 11, 21, 0, 0, 0))
    assert len(frame) == 1 and frame["time_s"].tolist() == [1.5]
    assert buffer.frame()["instance"].to_numpy().dtype == np.int64


def test_clear_empties_a_buffer():
    buffer = RecordBuffer(EvictionSample)
    for record in _records(EvictionSample, 5):
        buffer.append(record)
    buffer.clear()
    assert len(buffer) == 0 and buffer.frame().empty


def _exactly_equal(got, expected) -> None:
    assert list(got.columns) == list(expected.columns)
    assert got.dtypes.to_dict() == expected.dtypes.to_dict()
    for name in expected.columns:
        a, b = got[name].to_numpy(), expected[name].to_numpy()
        if a.dtype == np.float64:
            assert (a.view(np.int64) == b.view(np.int64)).all(), name    # bit for bit: -0.0, NaN
        else:
            assert a.tolist() == b.tolist(), name


def _chunky_value(kind: str, rng: random.Random, row: int, column: int):
    """Chunks of every form: constant (ints, -0.0, NaN, labels), narrow and wide ints, varying
    floats, few and many distinct labels."""
    style = (column + row // 64) % 5
    if kind == "int":
        return (7, rng.randint(-100, 100), rng.randint(-40_000, 40_000), rng.randint(-2**40, 2**62), -1)[style]
    if kind == "float":
        return (-0.0, float("nan"), rng.uniform(-1, 1), 0.0, rng.choice((1.5, -0.0)))[style]
    if kind == "bool":
        return (True, rng.random() < 0.5, False, False, True)[style]
    return ("hbm", rng.choice(["a", "b"]), f"label{rng.randrange(1000)}", "", rng.choice(["x", "yy"]))[style]


@pytest.mark.parametrize("record_type", [RequestRecord, TierHitRecord, LinkSample], ids=lambda t: t.__name__)
def test_sealed_chunks_frame_exactly_what_the_records_frame(monkeypatch, record_type):
    monkeypatch.setattr("agentsim.metrics.records.CHUNK_ROWS", 64)
    rng = random.Random(3)
    records = [record_type(*(_chunky_value(f.type, rng, row, column) for column, f in enumerate(fields(record_type))))
               for row in range(64 * 11 + 17)]
    buffer = RecordBuffer(record_type)
    for record in records:
        buffer.append(record)
    assert len(buffer) == len(records) and len(buffer._sealed[buffer.names[0]]) == 11
    _exactly_equal(buffer.frame(), record_frame(records, record_type))
    buffer.append(records[0])              # frames do not alias the buffer; it keeps growing
    assert len(buffer.frame()) == len(records) + 1


def test_a_long_runs_request_records_take_a_few_bytes_a_value():
    """Typical request rows (ids, token counts, times; the fields of unused features constant)
    sealed into chunks: well under the 8 bytes a value of the raw columns."""
    rng = random.Random(1)
    buffer = RecordBuffer(RequestRecord)
    rows = 3 * 8192
    for i in range(rows):
        t = i * 0.01
        buffer.append(RequestRecord(
            request_id=i, session_id=i // 50, agent_class="coding", depth=rng.randrange(2), call_index=i % 50,
            instance=rng.randrange(18), arrival_s=t, gap_before_s=rng.uniform(0, 30), gap_kind="tool",
            prompt_tokens=rng.randrange(1000, 100_000), output_tokens=rng.randrange(10, 2000),
            hit_tokens=rng.randrange(1000), recomputed_tokens=rng.randrange(1000), queue_wait_s=rng.random(),
            ttft_s=rng.random(), tpot_s=rng.random() / 100, e2e_s=rng.random() * 10, finish_s=t + 5,
            slo_met=True, rejected=False))
    raw_bytes = rows * 8 * len(buffer._codes)
    assert buffer.nbytes() < 0.45 * raw_bytes
    assert buffer.frame()["request_id"].tolist() == list(range(rows))


def test_a_simulation_lists_every_record_buffer_it_appends_to(small_scenario_yaml):
    """``Simulation.record_buffers`` is what a streaming consumer clears (the soak test does):
    a buffer added to the simulation or its time series without being listed there would read as
    growth of the live state."""
    from agentsim.engine.loading import load_scenario
    from agentsim.engine.simulation import Simulation

    sim = Simulation(load_scenario(small_scenario_yaml, []))
    held = [value for owner in (sim, sim.timeseries) for value in vars(owner).values()
            if isinstance(value, RecordBuffer)]
    assert len(held) == 5
    assert {id(buffer) for buffer in held} == {id(buffer) for buffer in sim.record_buffers()}
