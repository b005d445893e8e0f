"""The per-deployment prefill host time (agentsim.experiments.host_calibration): the median over a
deployment's benchmark rows of at most 4 clients of (measured - predicted TTFT without host time)
per layer, 0 where the kernels alone are slower; rows of more clients are left to test it."""

from __future__ import annotations

import pandas as pd
import pytest

from agentsim.experiments.benchmark_rows import read_rows
from agentsim.experiments.host_calibration import COLUMNS, MAX_CLIENTS, calibrate, calibration_rows, row_gap
from agentsim.experiments.timing_check import emulate_row
from tests.conftest import ROOT

SAMPLE = ROOT / "tests" / "fixtures" / "serving-benchmarks" / "measured_sample.csv"
# MiniMax-M2.5 with vLLM on B300, 4 clients of 1,024 + 1,024 tokens (InferenceX).
ROW_ID = "minimaxm2_5_b300_vllm_fp4_agg_1024x1024_c4_cfg724"


@pytest.fixture(scope="module")
def row() -> dict:
    frame = read_rows(SAMPLE)
    return frame[frame["id"] == ROW_ID].iloc[0].to_dict()


@pytest.fixture(scope="module")
def kernels_ms(row) -> float:
    """The row's predicted TTFT with no host time."""
    return emulate_row(row, ["serving.prefill_host_s_per_layer=0"]).predicted_ttft_ms


def test_only_aggregated_rows_of_few_clients_calibrate():
    frame = read_rows(SAMPLE)
    used = calibration_rows(frame)
    assert len(used) >= 1 and (used["batch_size"] <= MAX_CLIENTS).all()
    assert (used["mode"].str.strip() == "agg").all()
    assert len(used) < len(frame)


def test_a_rows_gap_is_measured_minus_the_kernels_time(row, kernels_ms):
    gap = row_gap(row)
    assert gap["engine"] == "vllm" and gap["model"] == "MiniMaxAI/MiniMax-M2.5" and gap["system"] == "b300_sxm"
    assert gap["layers"] == 62
    assert gap["gap_ms"] == pytest.approx(float(row["silicon_ttft_ms"]) - kernels_ms)


def test_a_deployments_figure_is_the_median_per_layer_clipped_at_zero(row, kernels_ms):
    # Three runs of the same deployment measuring 40, 100 and 400 ms above the kernels' time, and
    # one of another deployment measuring less than the kernels (a negative gap counts as 0).
    rows = []
    for i, extra_ms in enumerate((40.0, 100.0, 400.0)):
        rows.append({**row, "id": f"r{i}", "silicon_ttft_ms": kernels_ms + extra_ms})
    rows.append({**row, "id": "fast", "system": "b200_sxm", "silicon_ttft_ms": kernels_ms / 2})
    rows.append({**row, "id": "busy", "batch_size": 64.0, "silicon_ttft_ms": kernels_ms + 9000})  # not used
    table = calibrate(pd.DataFrame(rows))
    assert list(table.columns) == COLUMNS
    mine = table[table["system"] == "b300_sxm"].iloc[0]
    assert mine["rows"] == 3 and mine["host_ms_per_layer"] == pytest.approx(100.0 / 62, abs=1e-3)
    other = table[table["system"] == "b200_sxm"].iloc[0]
    assert other["rows"] == 1 and other["host_ms_per_layer"] == 0.0


def test_rows_that_are_no_valid_deployment_are_left_out(row):
    assert row_gap({**row, "model_path": "someone/Unknown-7B"}) is None
    assert calibrate(pd.DataFrame([{**row, "model_path": "someone/Unknown-7B"}])).empty


def _script(*args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, str(ROOT / "scripts" / "calibrate_prefill_host.py"), *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)


def test_the_script_writes_the_table_and_refuses_bad_input_without_writing(tmp_path, kernels_ms):
    out = tmp_path / "table.csv"
    done = _script(SAMPLE, "--out", out, "--workers", "1")
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(out)
    assert list(table.columns) == COLUMNS and 1 <= len(table) <= len(calibration_rows(read_rows(SAMPLE)))
    assert (table["host_ms_per_layer"] >= 0).all()
    # A file that is not a measured-runs table: one message naming it, exit 2, nothing written.
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    out.write_text("kept")
    refused = _script(bad, "--out", out)
    assert refused.returncode == 2 and str(bad) in refused.stderr and "missing column" in refused.stderr
    assert "Traceback" not in refused.stderr and out.read_text() == "kept"
    # A table with no row of at most 4 clients leaves the output as it was.
    busy = tmp_path / "busy.csv"
    frame = read_rows(SAMPLE)
    frame[frame["batch_size"] > MAX_CLIENTS].to_csv(busy, index=False)
    empty = _script(busy, "--out", out)
    assert empty.returncode == 2 and "left as it was" in empty.stderr and out.read_text() == "kept"
