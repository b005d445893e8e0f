"""The request table built column by column equals the frame-join-sort pipeline it replaces."""

from __future__ import annotations

import random
from dataclasses import fields

import numpy as np
import pandas as pd
import pytest

from agentsim.metrics.compact_columns import CHUNK_ROWS
from agentsim.metrics.records import RecordBuffer, RequestRecord, TierHitRecord, with_tier_hit_columns
from agentsim.metrics.request_table import request_table

TIERS = ("hbm", "dram", "disk", "remote")


def _old_pipeline(requests: RecordBuffer, tier_hits: RecordBuffer) -> pd.DataFrame:
    frame = with_tier_hit_columns(requests.frame(), tier_hits.frame(), TIERS)
    return frame.sort_values("request_id", kind="stable").reset_index(drop=True)


def _buffers(n: int, ids: list[int], seed: int = 0) -> tuple[RecordBuffer, RecordBuffer]:
    rng = random.Random(seed)
    requests, tier_hits = RecordBuffer(RequestRecord), RecordBuffer(TierHitRecord)
    for row, request_id in enumerate(ids[:n]):
        values = []
        for f in fields(RequestRecord):
            if f.name == "request_id":
                values.append(request_id)
            elif f.type == "int":
                values.append(rng.randint(0, 10**6))
            elif f.type == "float":
                values.append(float("nan") if row % 11 == 0 else rng.uniform(0, 1e4))
            elif f.type == "bool":
                values.append(rng.random() < 0.5)
            else:
                values.append(rng.choice(["coding", "chat", None, "rejected"]))
        requests.append(RequestRecord(*values))
        # No rows for some requests, several rows of one tier for others, a tier ("dram") that
        # never appears, and rows of request ids with no request record.
        for tier in rng.sample(["hbm", "disk", "hbm", "remote", "gpu_extra"], rng.randint(0, 3)):
            tier_hits.append(TierHitRecord(request_id, tier, rng.randint(1, 10**5)))
        if row % 97 == 0:
            tier_hits.append(TierHitRecord(10**9 + row, "hbm", 5))
    return requests, tier_hits


@pytest.mark.parametrize("order", ["shuffled", "increasing", "duplicates"])
@pytest.mark.parametrize("n", [0, 1, 57, CHUNK_ROWS + 123])   # the last spans a sealed chunk
def test_the_table_equals_the_frame_join_and_sort(order, n):
    ids = list(range(n))
    if order == "shuffled":
        random.Random(1).shuffle(ids)
    elif order == "duplicates":
        ids = [i // 2 for i in ids]
        random.Random(2).shuffle(ids)
    requests, tier_hits = _buffers(n, ids)
    expected, got = _old_pipeline(requests, tier_hits), request_table(requests, tier_hits, TIERS)
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert list(got.columns) == list(expected.columns)
    if n > 1:
        # The tier sums are really there (a table of zeros would pass a weaker check).
        assert got["hit_tokens_hbm"].sum() > 0 and got["hit_tokens_dram"].sum() == 0
        assert got["request_id"].is_monotonic_increasing


def test_the_table_does_not_alias_the_buffers():
    requests, tier_hits = _buffers(40, list(range(40)))
    table = request_table(requests, tier_hits, TIERS)
    before = table.copy()
    for record_type_buffer in (requests, tier_hits):
        for arr in record_type_buffer._arrays.values():
            for i in range(len(arr)):
                arr[i] = 0
    pd.testing.assert_frame_equal(table, before, check_exact=True)
    assert np.all(table["request_id"].to_numpy() == np.arange(40))


@pytest.mark.parametrize("order", ["shuffled", "increasing"])
@pytest.mark.parametrize("n", [0, 57, 2 * CHUNK_ROWS + 5])    # the last has two sealed chunks
def test_a_consuming_build_gives_the_same_table_and_empties_both_buffers(order, n):
    ids = list(range(n))
    if order == "shuffled":
        random.Random(3).shuffle(ids)
    expected = request_table(*_buffers(n, ids), TIERS)
    requests, tier_hits = _buffers(n, ids)
    got = request_table(requests, tier_hits, TIERS, consume=True)
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert len(requests) == 0 and len(tier_hits) == 0
    assert requests.nbytes() == 0 and tier_hits.nbytes() == 0
    # What is left is the empty table of the record type, not a half-drained one.
    assert requests.frame().empty and list(requests.frame().columns) == requests.names


def test_consuming_columns_drops_each_fields_chunks_as_the_next_is_asked_for():
    requests, _ = _buffers(CHUNK_ROWS + 9, list(range(CHUNK_ROWS + 9)))
    columns = requests.iter_columns(consume=True)
    first_name, _values = next(columns)
    assert requests._sealed[first_name] != []           # still held while the caller has it
    second_name, _values = next(columns)
    assert requests._sealed[first_name] == [] and requests._sealed[second_name] != []
    assert len(list(columns)) == len(requests.names) - 2
    assert len(requests) == 0
