"""Sealed record chunks spilled to a temporary file during a run (agentsim.metrics.chunk_spill)."""

from __future__ import annotations

import random
import tracemalloc
from array import array
from dataclasses import fields

import numpy as np
import pandas as pd
import pytest

from agentsim.metrics.chunk_spill import ChunkSpill, SpilledChunk, chunk_nbytes, loaded
from agentsim.metrics.compact_columns import expand, nbytes, seal
from agentsim.metrics.records import RecordBuffer, RequestRecord, TierHitRecord


def _chunks():
    """One sealed chunk of every kind seal makes."""
    return [
        seal(array("q", [7] * 50), "q"),                                  # same
        seal(array("q", range(-100, 100)), "q"),                          # narrow
        seal(array("q", [0, 2**62]), "q"),                                # raw int
        seal(array("d", [0.5, float("nan"), -0.0]), "d"),                 # raw float
        seal(array("d", [float("nan")] * 4), "d"),                        # same (NaN bits)
        seal(array("b", [1, 0, 1]), "b"),
        seal(["hbm"] * 9, None),                                          # same label
        seal(["a", "b", "a", "c"], None),                                 # codes
        seal([f"l{i}" for i in range(300)], None),                        # raw labels
    ]


def _same_values(a, b) -> bool:
    a, b = expand(a), expand(b)
    if isinstance(a, list):
        return a == b
    return a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def test_a_spilled_chunk_loads_back_bit_for_bit():
    spill = ChunkSpill()
    assert spill.spilled_bytes == 0
    chunks = _chunks()
    handles = [spill.put(chunk) for chunk in chunks]
    assert all(type(h) is SpilledChunk for h in handles)
    assert spill.spilled_bytes == sum(h.size for h in handles) > 0
    # Read back in another order than written: each handle knows where its chunk is.
    for handle, chunk in reversed(list(zip(handles, chunks))):
        assert _same_values(handle.load(), chunk) and _same_values(loaded(handle), chunk)
        assert chunk_nbytes(handle) == nbytes(chunk)
    assert loaded(chunks[0]) is chunks[0] and chunk_nbytes(chunks[1]) == nbytes(chunks[1])
    spill.close()
    assert spill.spilled_bytes == 0
    with pytest.raises(ValueError, match="closed"):
        handles[0].load()
    again = spill.put(chunks[1])             # a closed spill starts a new file
    assert _same_values(again.load(), chunks[1])
    spill.close()


def test_a_spill_that_cannot_write_keeps_chunks_in_memory(monkeypatch):
    def no_temporary_files(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("agentsim.metrics.chunk_spill.tempfile.TemporaryFile", no_temporary_files)
    spill = ChunkSpill()
    chunk = _chunks()[1]
    with pytest.warns(RuntimeWarning, match="No space left"):
        assert spill.put(chunk) is chunk
    assert not spill.enabled and spill.put(chunk) is chunk and spill.spilled_bytes == 0


def test_on_the_command_line_a_spill_that_cannot_write_is_one_warning_line(monkeypatch, capsys):
    import warnings

    from agentsim import cli

    def no_temporary_files(*args, **kwargs):
        raise OSError(28, "No space left on device")

    def a_command(args):   # stands in for a run: its records seal chunks that cannot be spilled
        buffer = RecordBuffer(RequestRecord)
        for record in _records(200):
            buffer.append(record)
        assert buffer.spilled_bytes() == 0 and len(buffer) == 200
        warnings.warn("from a library", DeprecationWarning)   # not ours: Python's format stays

    monkeypatch.setattr("agentsim.metrics.records.CHUNK_ROWS", 64)
    monkeypatch.setattr("agentsim.metrics.chunk_spill.tempfile.TemporaryFile", no_temporary_files)
    monkeypatch.setattr(cli, "_main", a_command)
    shown_before = warnings.showwarning
    with pytest.warns(DeprecationWarning, match="from a library"):   # passed on to the handler before
        cli.main([])
    assert capsys.readouterr().err.splitlines() == [
        "warning: cannot write the run's records to a temporary file ([Errno 28] No space left on device); "
        "keeping them in memory"]
    assert warnings.showwarning is shown_before      # the handler is the command line's alone


def _records(n: int, seed: int = 5) -> list[RequestRecord]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        t = i * 0.01
        out.append(RequestRecord(
            request_id=i, session_id=i // 50, agent_class=rng.choice(["coding", "chat"]), depth=rng.randrange(2),
            call_index=i % 50, instance=rng.randrange(18), arrival_s=t, gap_before_s=rng.uniform(0, 30),
            gap_kind="tool", prompt_tokens=rng.randrange(1000, 100_000), output_tokens=rng.randrange(10, 2000),
            hit_tokens=rng.randrange(1000), recomputed_tokens=rng.randrange(1000), queue_wait_s=rng.random(),
            ttft_s=rng.random(), tpot_s=rng.random() / 100, e2e_s=rng.random() * 10, finish_s=t + 5,
            slo_met=rng.random() < 0.9, rejected=False))
    return out


def test_a_spilling_buffer_gives_the_same_tables_as_one_in_memory(monkeypatch):
    monkeypatch.setattr("agentsim.metrics.records.CHUNK_ROWS", 64)
    records = _records(64 * 9 + 5)
    spilling, kept = RecordBuffer(RequestRecord), RecordBuffer(RequestRecord, spill=False)
    for record in records:
        spilling.append(record)
        kept.append(record)
    sealed = spilling._sealed[spilling.names[0]]
    assert len(sealed) == 9 and all(type(chunk) is SpilledChunk for chunk in sealed)
    assert not any(type(chunk) is SpilledChunk for chunk in kept._sealed[kept.names[0]])
    assert spilling.spilled_bytes() > 0 and kept.spilled_bytes() == 0
    assert spilling.nbytes() == kept.nbytes()
    pd.testing.assert_frame_equal(spilling.frame(), kept.frame(), check_exact=True)
    for name in ("arrival_s", "agent_class", "slo_met"):
        got, want = spilling.column(name), kept.column(name)
        assert (got == want) if isinstance(got, list) else np.array_equal(got, want)
    consumed = dict(spilling.iter_columns(consume=True))
    pd.testing.assert_frame_equal(pd.DataFrame(consumed, columns=spilling.names), kept.frame(), check_exact=True)
    assert len(spilling) == 0 and spilling.spilled_bytes() == 0       # the file went with the rows


def test_a_short_run_never_makes_a_file():
    buffer = RecordBuffer(TierHitRecord)
    for i in range(100):
        buffer.append(TierHitRecord(i, "hbm", 64))
    assert buffer.spilled_bytes() == 0 and buffer._spill._file is None


def test_spilled_records_leave_the_heap():
    """What the feature is for: the sealed chunks of a long run are not in the process's heap.
    The traced memory of 24 chunks of request records, spilled, is a small fraction of the same
    records kept in memory (the open chunk and the handles remain)."""
    records = _records(8192 * 3, seed=2)
    traced = {}
    for spill in (False, True):
        tracemalloc.start()
        buffer = RecordBuffer(RequestRecord, spill=spill)
        for _ in range(8):
            for record in records:
                buffer.append(record)
        traced[spill] = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert len(buffer) == 8 * len(records)
        del buffer
    assert traced[True] < 0.25 * traced[False], traced
    assert len(fields(RequestRecord)) > 20     # the records are the wide ones a run writes
