"""Columnar record buffers give exactly the tables a list of records gave."""

from __future__ import annotations

import random
from dataclasses import fields

import numpy as np
import pytest

from agentsim.metrics.records import (EvictionSample, LinkSample, OccupancySample, RecordBuffer, RequestRecord,
                                      record_frame)


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
