"""The prefill-capacity check of disaggregated benchmark rows (``agentsim.experiments.prefill_capacity``)."""

from __future__ import annotations

import pytest

from agentsim.config.disaggregation import pool_scenario
from agentsim.engine.loading import scenario_from_dict
from agentsim.experiments.benchmark_rows import read_rows, row_scenario
from agentsim.experiments.prefill_capacity import (mean_lengths, prefill_capacity_per_gpu, prefill_gpus,
                                                   sustained_prompt_rate_per_gpu)
from agentsim.experiments.timing_check import RowResult, emulate_row, summarize
from agentsim.hardware.timing.select import build_timer
from tests.test_check_timing import SAMPLE


def _disaggregated_row() -> dict:
    frame = read_rows(SAMPLE)
    return frame[(frame["mode"] == "disagg") & frame["prefill_num_workers"].notna()].iloc[0].to_dict()


def _scenario(row: dict, budget: int | None = None):
    data = row_scenario(row)
    if budget is not None:
        prefill = data["serving"]["disaggregation"]["prefill"]
        data["serving"]["disaggregation"]["prefill"] = {**prefill, "max_num_batched_tokens": budget}
    return scenario_from_dict(data, source="test")


def test_the_sustained_rate_is_littles_law_over_a_clients_cycle():
    # 100 clients, cycle = 1 s to the first token + 100 more tokens x 10 ms = 2 s: 50 requests a
    # second of 1,000 prompt tokens over 10 prefill GPUs.
    assert sustained_prompt_rate_per_gpu(100, 1000.0, 101.0, 1000.0, 10.0, 10) == pytest.approx(5000.0)
    # One output token: the cycle is the TTFT alone.
    assert sustained_prompt_rate_per_gpu(4, 500.0, 1.0, 250.0, 99.0, 2) == pytest.approx(4 / 0.25 * 500 / 2)
    assert sustained_prompt_rate_per_gpu(4, 500.0, 10.0, 0.0, 0.0, 2) is None
    assert sustained_prompt_rate_per_gpu(4, 500.0, 10.0, 100.0, 1.0, 0) is None


def test_capacity_is_a_full_step_of_whole_prompts_on_every_rank():
    row = _disaggregated_row()
    scenario = _scenario(row)
    pool = pool_scenario(scenario, "prefill")
    timer, _ = build_timer(pool)
    ranks, budget, gpus = pool.serving.parallelism.attention_dp, pool.serving.batch_tokens(), pool.hardware.gpus_per_instance
    prompt = budget // 3 + 1          # two whole prompts fit a rank's budget, a third does not
    expected = 2 * ranks * prompt / timer.iteration_s([(prompt, 0)] * (2 * ranks), 0, 0.0) / gpus
    assert prefill_capacity_per_gpu(scenario, prompt) == pytest.approx(expected)
    # A prompt longer than the budget runs in budget-sized chunks, each after the ones before.
    long_prompt = budget + budget // 2
    chunked_s = (timer.iteration_s([(budget, 0)] * ranks, 0, 0.0)
                 + timer.iteration_s([(budget // 2, budget)] * ranks, 0, 0.0))
    assert prefill_capacity_per_gpu(scenario, long_prompt) == pytest.approx(ranks * long_prompt / chunked_s / gpus)
    # Packing more prompts into a step amortises its fixed costs: a larger budget computes faster.
    assert prefill_capacity_per_gpu(_scenario(row, budget=4 * budget), prompt) > prefill_capacity_per_gpu(scenario, prompt)


def test_an_aggregated_scenario_has_no_prefill_pool():
    frame = read_rows(SAMPLE)
    row = frame[frame["mode"] == "agg"].iloc[0].to_dict()
    scenario = scenario_from_dict(row_scenario(row), source="test")
    assert prefill_capacity_per_gpu(scenario, 1000.0) is None
    assert prefill_gpus(scenario) == 0


def test_a_disaggregated_row_reports_its_measured_prefill_load():
    row = _disaggregated_row()
    scenario = _scenario(row)
    prompt, output = mean_lengths(scenario)
    result = emulate_row(row)
    assert result.skipped is None
    assert result.prefill_capacity_per_gpu == pytest.approx(prefill_capacity_per_gpu(scenario, prompt))
    clients = scenario.workload.agent_classes["client"].arrival.concurrent
    rate = sustained_prompt_rate_per_gpu(clients, prompt, output, float(row["silicon_ttft_ms"]),
                                         float(row["silicon_tpot_ms"]), prefill_gpus(scenario))
    assert result.measured_prompt_rate_per_gpu == pytest.approx(rate)
    assert result.measured_prefill_load == pytest.approx(rate / result.prefill_capacity_per_gpu)
    assert result.as_json()["measured_prefill_load"] == pytest.approx(result.measured_prefill_load)


def test_the_summary_counts_rows_over_the_prefill_capacity():
    def row(i: int, capacity: float | None, rate: float | None) -> RowResult:
        return RowResult(id=str(i), system="gb300", backend="trtllm", mode="disagg", measured_ttft_ms=100.0,
                         measured_tpot_ms=10.0, predicted_ttft_ms=100.0, predicted_tpot_ms=10.0,
                         prefill_capacity_per_gpu=capacity, measured_prompt_rate_per_gpu=rate)

    results = [row(0, 1000.0, 1500.0), row(1, 1000.0, 999.0), row(2, 1000.0, 1000.5), row(3, None, None)]
    summary = summarize(results)
    assert summary["disaggregated"]["prefill_over_capacity"] == 2
    assert summary["groups"][0]["prefill_over_capacity"] == 2
    assert summary["aggregated"]["prefill_over_capacity"] is None
