"""write_parquet: a table written a row group at a time reads back as to_parquet's does."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from agentsim.parquet_out import write_parquet


def _frame(rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    labels = [None if i % 5 == 0 else f"agent-{i % 3}" for i in range(rows)]
    return pd.DataFrame({
        "request_id": np.arange(rows, dtype=np.int64),
        "ttft_s": rng.random(rows),
        "rejected": rng.random(rows) < 0.3,
        "agent_class": labels,                    # strings with missing values
        "tier": [None] * rows,                    # a column that is never set
        "pool": pd.Categorical(["prefill", "decode"] * (rows // 2) + ["decode"] * (rows % 2)),
        "decode_queue_s": np.where(rng.random(rows) < 0.5, np.nan, 1.0),
    })


@pytest.mark.parametrize("rows", [0, 5, 7, 23])
def test_row_groups_read_back_as_to_parquet_writes(tmp_path, rows):
    frame = _frame(rows)
    frame.to_parquet(tmp_path / "whole.parquet", index=False, engine="pyarrow")
    write_parquet(frame, tmp_path / "groups.parquet", row_group_rows=7)
    expected = pd.read_parquet(tmp_path / "whole.parquet")
    got = pd.read_parquet(tmp_path / "groups.parquet")
    pd.testing.assert_frame_equal(got, expected)
    if rows:   # (an empty categorical reads back as object from to_parquet's file too)
        pd.testing.assert_frame_equal(got, frame)
    # More rows than a group: one row group per 7 rows (else the whole frame in one).
    groups = pq.ParquetFile(tmp_path / "groups.parquet").num_row_groups
    assert groups == (-(-rows // 7) if rows > 7 else 1)


def test_writes_to_a_file_object():
    frame = _frame(30)
    buffer = io.BytesIO()
    write_parquet(frame, buffer, row_group_rows=8)
    assert pq.ParquetFile(io.BytesIO(buffer.getvalue())).num_row_groups == 4
    pd.testing.assert_frame_equal(pd.read_parquet(io.BytesIO(buffer.getvalue())), frame)


def test_a_group_must_hold_a_row(tmp_path):
    with pytest.raises(ValueError, match="at least 1"):
        write_parquet(_frame(3), tmp_path / "x.parquet", row_group_rows=0)
