"""Sweeps: axes expansion, persistence, resume, failing cells, statistics, common random numbers,
and identical results from the local pool and a real Dask LocalCluster."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from agentsim.errors import InputError
from agentsim.experiments.executors import LocalExecutor
from agentsim.experiments.spec import baseline_index, expand_cells, load_sweep
from agentsim.experiments.sweep import ScenarioBuilder, run_sweep
from agentsim.results import WALL_CLOCK_KEYS

from tests.conftest import ROOT, run_cli


def write_sweep(tmp_path: Path, base: Path, body: str, name: str = "sweep.yaml") -> Path:
    path = tmp_path / name
    path.write_text(f"base: {base}\n" + body)
    return path


GRID = """
name: tiny
set: {duration_s: 2m}
seeds: 3
axes:
  grid:
    cache.eviction.name: [lru, fifo]
    hardware.kv_capacity_bytes: [0.5GB, 6GB]
baseline: {cache.eviction.name: lru}
"""


def builder_for(sweep):
    return ScenarioBuilder(sweep.base_data, str(sweep.base_path), sweep.base_lines, sweep.base_path.parent,
                           fixed=sweep.spec.set)


# --- spec and axes ---------------------------------------------------------------------------------

def test_grid_zip_random_expansion(tmp_path, small_scenario_yaml):
    path = write_sweep(tmp_path, small_scenario_yaml, """
seeds: [5, 9]
axes:
  grid:
    cache.eviction.name: [lru, fifo]
  zip:
    serving.max_batch_requests: [8, 16, 32]
    serving.prefill_chunk_tokens: [2048, 4096, 8192]
  random:
    samples: 4
    seed: 3
    params:
      hardware.kv_capacity_bytes: {loguniform: [1GB, 8GB]}
      workload.agent_classes.coding.arrival.concurrent: {randint: [2, 6]}
      cache.block_tokens: {choice: [16, 64]}
""")
    sweep = load_sweep(path)
    assert sweep.seeds() == [5, 9]
    cells = expand_cells(sweep, builder_for(sweep).to_number)
    assert len(cells) == 2 * 3 * 4
    first = cells[0].as_dict()
    assert first["cache.eviction.name"] == "lru"
    assert (first["serving.max_batch_requests"], first["serving.prefill_chunk_tokens"]) == (8, 2048)
    capacities = [c.as_dict()["hardware.kv_capacity_bytes"] for c in cells]
    assert all(1e9 <= v <= 8e9 for v in capacities)  # "1GB".."8GB" converted to bytes through the schema
    assert len(set(capacities)) == 4
    assert all(2 <= c.as_dict()["workload.agent_classes.coding.arrival.concurrent"] <= 6 for c in cells)
    # Deterministic: the same file gives the same random points.
    again = expand_cells(load_sweep(path), builder_for(sweep).to_number)
    assert [c.assignments for c in again] == [c.assignments for c in cells]


def test_seed_count_starts_at_base_seed(tmp_path, small_scenario_yaml):
    sweep = load_sweep(write_sweep(tmp_path, small_scenario_yaml, "seeds: 3\n"))
    assert sweep.seeds() == [7, 8, 9]  # the fixture scenario has seed 7
    assert len(expand_cells(sweep, builder_for(sweep).to_number)) == 1


@pytest.mark.parametrize("body, message", [
    ("axes: {grid: {cache.eviction.name: [lru]}, zips: {}}\n", "unknown key 'zips'"),
    ("axes:\n  zip:\n    serving.max_batch_requests: [8, 16]\n    serving.prefill_chunk_tokens: [2048]\n", "equal lengths"),
    ("seeds: 0\n", "seeds must be"),
    ("axes: {random: {samples: 2, params: {cache.block_tokens: {uniform: [1, 2], choice: [3]}}}}\n", "exactly one"),
])
def test_bad_sweep_files_name_file_and_line(tmp_path, small_scenario_yaml, body, message):
    path = write_sweep(tmp_path, small_scenario_yaml, body)
    with pytest.raises(InputError) as info:
        load_sweep(path)
    assert message in info.value.message
    assert str(path) in info.value.render() and "line" in info.value.render()


def test_baseline_pairs_cells_differing_only_on_baseline_axis(tmp_path, small_scenario_yaml):
    sweep = load_sweep(write_sweep(tmp_path, small_scenario_yaml, GRID))
    cells = expand_cells(sweep, builder_for(sweep).to_number)
    pairs = baseline_index(cells, sweep.spec.baseline)
    assert pairs == {2: 0, 3: 1}  # fifo@0.5GB vs lru@0.5GB, fifo@6GB vs lru@6GB


# --- running ---------------------------------------------------------------------------------------

def test_sweep_persists_runs_table_and_statistics(tmp_path, small_scenario_yaml):
    sweep = load_sweep(write_sweep(tmp_path, small_scenario_yaml, GRID))
    out = tmp_path / "out"
    seen = []
    report = run_sweep(sweep, out, LocalExecutor(workers=1), on_progress=lambda *a: seen.append(a))
    assert report.counts.ran == 12 and report.counts.failed == 0
    assert seen[-1] == (12, 12, 4, 4)
    table = pd.read_parquet(out / "results.parquet")
    assert len(table) == 4 * 3 and set(table.status) == {"ok"}
    assert sorted(table.seed.unique()) == [7, 8, 9]
    # Each run has its own directory with the run files.
    for row in table.itertuples():
        run_dir = out / "cells" / row.cell_id / f"seed-{row.seed}"
        assert {"summary.json", "requests.parquet", "scenario.resolved.yaml"} <= {p.name for p in run_dir.iterdir()}
        assert json.loads((run_dir / "summary.json").read_text())["seed"] == row.seed
    # The capacity axis matters: less HBM, lower hit ratio.
    small = table[table["hardware.kv_capacity_bytes"] == "0.5GB"].hit_ratio.mean()
    large = table[table["hardware.kv_capacity_bytes"] == "6GB"].hit_ratio.mean()
    assert small < large
    # Statistics: mean and t-interval recomputed by hand for one cell and metric.
    stats = pd.read_parquet(out / "stats.parquet")
    row = stats[(stats.cell_index == 0) & (stats.metric == "ttft_p99_s")].iloc[0]
    values = table[table.cell_index == 0].ttft_p99_s.to_numpy()
    half = scipy_stats.t.ppf(0.975, 2) * values.std(ddof=1) / math.sqrt(3)
    assert row.n == 3 and row["mean"] == pytest.approx(values.mean()) and row.ci_half_width == pytest.approx(half)
    # Paired differences: per-seed differences against the baseline cell.
    paired = pd.read_parquet(out / "paired.parquet")
    prow = paired[(paired.cell_index == 2) & (paired.metric == "hit_ratio")].iloc[0]
    diffs = (table[table.cell_index == 2].set_index("seed").hit_ratio - table[table.cell_index == 0].set_index("seed").hit_ratio)
    assert prow.baseline_index == 0 and prow.n_pairs == 3 and prow.mean_diff == pytest.approx(diffs.mean())
    assert json.loads((out / "stats.json").read_text())["stats"]


def test_rerun_skips_finished_runs(tmp_path, small_scenario_yaml):
    sweep = load_sweep(write_sweep(tmp_path, small_scenario_yaml, GRID.replace("seeds: 3", "seeds: 1")))
    out = tmp_path / "out"
    run_sweep(sweep, out, LocalExecutor(workers=1))
    summaries = sorted(out.glob("cells/*/seed-*/summary.json"))
    stamps = {p: p.stat().st_mtime_ns for p in summaries}
    # Remove one run: only that one is recomputed.
    victim = summaries[0]
    victim.unlink()
    report = run_sweep(sweep, out, LocalExecutor(workers=1))
    assert (report.counts.ran, report.counts.skipped) == (1, 3)
    for path, stamp in stamps.items():
        if path != victim:
            assert path.stat().st_mtime_ns == stamp
    assert victim.exists()


def test_misspelt_metric_is_refused_before_any_run(tmp_path, small_scenario_yaml):
    from agentsim.errors import InputError

    sweep = load_sweep(write_sweep(tmp_path, small_scenario_yaml, """
set: {duration_s: 1m}
metrics: [ttft_p99_s, hit_ratoi, no_such_thing_at_all]
axes: {grid: {hardware.kv_capacity_bytes: [1GB]}}
"""))
    with pytest.raises(InputError) as error:
        run_sweep(sweep, tmp_path / "out", LocalExecutor(workers=1))
    message = error.value.render()
    assert "metrics[1]" in message and "'hit_ratoi'" in message and "did you mean 'hit_ratio'" in message
    assert not (tmp_path / "out").exists()


def test_misspelt_nested_metric_is_reported_with_the_closest_key(tmp_path, small_scenario_yaml):
    # A name under a known key (its nested keys can depend on the cell) is judged after the runs.
    sweep = load_sweep(write_sweep(tmp_path, small_scenario_yaml, """
set: {duration_s: 1m}
metrics: [queue_wait_by_cause_s.slott, ttft_p99_s]
axes: {grid: {hardware.kv_capacity_bytes: [1GB]}}
"""))
    report = run_sweep(sweep, tmp_path / "out", LocalExecutor(workers=1))
    assert report.unknown_metrics == {"queue_wait_by_cause_s.slott": "queue_wait_by_cause_s.slot"}


def test_failing_cell_is_recorded_and_sweep_continues(tmp_path, small_scenario_yaml):
    # 2000GB of KV does not fit in 4 GPUs' HBM: that cell fails validation, the others run.
    sweep = load_sweep(write_sweep(tmp_path, small_scenario_yaml, """
set: {duration_s: 1m}
axes: {grid: {hardware.kv_capacity_bytes: [1GB, 2000GB, 4GB]}}
"""))
    report = run_sweep(sweep, tmp_path / "out", LocalExecutor(workers=1))
    table = report.table.set_index("hardware.kv_capacity_bytes")
    assert table.loc["2000GB", "status"] == "error" and "exceeds" in table.loc["2000GB", "error"]
    assert table.loc["1GB", "status"] == "ok" and table.loc["4GB", "status"] == "ok"
    assert report.counts.failed == 1
    error_files = list((tmp_path / "out").glob("cells/*/seed-*/error.json"))
    assert len(error_files) == 1 and "exceeds" in json.loads(error_files[0].read_text())["error"]


def test_all_cells_invalid_is_an_input_error(tmp_path, small_scenario_yaml):
    sweep = load_sweep(write_sweep(tmp_path, small_scenario_yaml, "axes: {grid: {cache.evicton.name: [lru]}}\n"))
    with pytest.raises(InputError, match="no cell of the sweep"):
        run_sweep(sweep, tmp_path / "out", LocalExecutor(workers=1))


def test_common_random_numbers_across_policies_and_capacities(tmp_path, small_scenario_yaml):
    """For one seed every cell sees the same sessions: same first-call prompt lengths, and the
    same arrival times for the sessions that start during the ramp (later restarts depend on
    how fast earlier sessions finished). Another seed draws a different workload."""
    sweep = load_sweep(write_sweep(tmp_path, small_scenario_yaml, GRID.replace("seeds: 3", "seeds: 2")))
    out = tmp_path / "out"
    report = run_sweep(sweep, out, LocalExecutor(workers=1))

    def first_calls(cell_id, seed):
        requests = pd.read_parquet(out / "cells" / cell_id / f"seed-{seed}" / "requests.parquet")
        first = requests[(requests.call_index == 0) & (requests.depth == 0)].sort_values("session_id")
        return first.set_index("session_id")

    cell_ids = sorted(set(report.table.cell_id))
    assert len(cell_ids) == 4
    for seed in (7, 8):
        reference = first_calls(cell_ids[0], seed)
        for cell_id in cell_ids[1:]:
            other = first_calls(cell_id, seed)
            shared = reference.index.intersection(other.index)
            assert len(shared) >= 8
            assert (reference.loc[shared, "prompt_tokens"] == other.loc[shared, "prompt_tokens"]).all()
            ramp = reference.arrival_s < 10.0
            assert ramp.sum() >= 8
            np.testing.assert_array_equal(reference[ramp].arrival_s, other.loc[reference[ramp].index, "arrival_s"])
    a, b = first_calls(cell_ids[0], 7), first_calls(cell_ids[0], 8)
    assert not np.array_equal(a.prompt_tokens.to_numpy()[:8], b.prompt_tokens.to_numpy()[:8])


def _comparable(table: pd.DataFrame) -> pd.DataFrame:
    drop = [c for c in table.columns if c in WALL_CLOCK_KEYS]
    return table.drop(columns=drop).sort_values(["cell_index", "seed"]).reset_index(drop=True)


def test_local_pool_matches_serial(tmp_path, small_scenario_yaml):
    sweep = load_sweep(write_sweep(tmp_path, small_scenario_yaml, GRID.replace("seeds: 3", "seeds: 1")))
    serial = run_sweep(sweep, tmp_path / "serial", LocalExecutor(workers=1))
    pooled = run_sweep(sweep, tmp_path / "pooled", LocalExecutor(workers=2))
    pd.testing.assert_frame_equal(_comparable(serial.table), _comparable(pooled.table))


@pytest.mark.slow
def test_dask_local_cluster_gives_identical_results(tmp_path, small_scenario_yaml):
    from agentsim.experiments.executors import DaskExecutor

    sweep = load_sweep(write_sweep(tmp_path, small_scenario_yaml, GRID.replace("seeds: 3", "seeds: 2")))
    local = run_sweep(sweep, tmp_path / "local", LocalExecutor(workers=1))
    executor = DaskExecutor("local", workers=2)
    try:
        # Scheduler and workers live in their own processes.
        info = executor.client.scheduler_info()
        worker_pids = set(executor.client.run(os.getpid).values())
        assert len(info["workers"]) == 2 and os.getpid() not in worker_pids
        distributed = run_sweep(sweep, tmp_path / "dask", executor)
    finally:
        executor.close()
    pd.testing.assert_frame_equal(_comparable(local.table), _comparable(distributed.table))
    for row in local.table.itertuples():
        a = pd.read_parquet(tmp_path / "local" / "cells" / row.cell_id / f"seed-{row.seed}" / "requests.parquet")
        b = pd.read_parquet(tmp_path / "dask" / "cells" / row.cell_id / f"seed-{row.seed}" / "requests.parquet")
        pd.testing.assert_frame_equal(a, b)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_sweep_resumes_without_losing_or_recomputing(tmp_path, small_scenario_yaml, sig):
    # Enough cells that the sweep is still running when we kill it.
    path = write_sweep(tmp_path, small_scenario_yaml, """
name: killme
set: {duration_s: 10m}
seeds: 2
axes:
  grid:
    hardware.kv_capacity_bytes: [0.5GB, 1GB, 2GB, 3GB, 4GB, 5GB, 6GB, 7GB, 8GB, 9GB, 10GB, 11GB]
""")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "agentsim.cli", "sweep", str(path), "--out", str(out), "--workers", "1", "-q"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and len(list(out.glob("cells/*/seed-*/summary.json"))) < 3:
        time.sleep(0.05)
    os.killpg(process.pid, sig)
    process.wait(timeout=30)
    finished = {p: p.stat().st_mtime_ns for p in out.glob("cells/*/seed-*/summary.json")}
    assert 3 <= len(finished) < 24, "the sweep should have been killed part-way"
    result = run_cli("sweep", str(path), "--out", str(out), "--workers", "1", "-q")
    assert result.returncode == 0, result.stderr
    assert f"{24 - len(finished)} run, {len(finished)} already done, 0 failed" in " ".join(result.stdout.split())
    for summary, stamp in finished.items():
        assert summary.stat().st_mtime_ns == stamp  # not recomputed
    table = pd.read_parquet(out / "results.parquet")
    assert len(table) == 24 and set(table.status) == {"ok"}


# --- command line ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_cli_sweep_runs_resumes_and_prints_statistics(tmp_path, small_scenario_yaml):
    path = write_sweep(tmp_path, small_scenario_yaml, GRID.replace("seeds: 3", "seeds: 2"))
    out = tmp_path / "out"
    first = run_cli("sweep", str(path), "--out", str(out), "--workers", "2")
    assert first.returncode == 0, first.stderr
    text = " ".join(first.stdout.split())
    assert "4 cells x 2 seeds" in text and "8 run, 0 already done, 0 failed" in text
    assert "mean ± 95% CI" in text and "paired differences" in text
    assert "- lru" in text and "0.5GB" in text     # columns headed by their values, not #2 - #0
    again = run_cli("sweep", str(path), "--out", str(out), "-q")
    assert "0 run, 8 already done" in " ".join(again.stdout.split())


def test_cli_bad_sweep_file_exits_2(tmp_path, small_scenario_yaml):
    path = write_sweep(tmp_path, small_scenario_yaml, "axes: {grdi: {}}\n")
    result = run_cli("sweep", str(path), "--out", str(tmp_path / "o"))
    assert result.returncode == 2 and "unknown key 'grdi'" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("sweep_file", sorted((ROOT / "sweeps").glob("*.yaml")), ids=lambda p: p.name)
def test_example_sweep_files_expand(sweep_file):
    sweep = load_sweep(sweep_file)
    cells = expand_cells(sweep, builder_for(sweep).to_number)
    assert cells
    builder = builder_for(sweep)
    for cell in cells:
        builder.resolved(cell.assignments, sweep.seeds()[0])  # every example cell is a valid scenario
