"""How check-timing emulates the benchmark client behind a measured row."""

from __future__ import annotations

import numpy as np
import pandas as pd

from agentsim.engine.loading import scenario_from_dict
from agentsim.engine.simulation import run_scenario
from agentsim.experiments.benchmark_clients import (FIXED_LENGTHS, INFERENCEX, MEASURED_REQUESTS_PER_CLIENT,
                                                    client_protocol, length_spec)
from agentsim.experiments.benchmark_rows import read_rows, row_scenario
from agentsim.experiments.timing_check import _measured_requests, _with_client_lengths, _with_engine_kv
from tests.test_check_timing import SAMPLE


def test_the_source_column_names_the_client():
    eval_row = {"silicon_data_source": "source_file=/Users/x/aic-auto-gap-analysis/data/h200_sxm/vllm/0.12.0/a.csv"}
    assert client_protocol(eval_row) is FIXED_LENGTHS
    sweep_row = {"silicon_data_source": "db-dump/2026-04-27; config_id=732; silicon_concurrency=8"}
    assert client_protocol(sweep_row) is INFERENCEX and INFERENCEX.length_low_fraction == 0.8
    assert client_protocol({}) is INFERENCEX


def test_lengths_are_the_integers_benchmark_serving_draws():
    assert length_spec(1024, FIXED_LENGTHS) == 1024
    spec = length_spec(1000, INFERENCEX)
    from pydantic import TypeAdapter

    from agentsim.config.distributions import DistributionSpec
    from agentsim.workload.distributions import build

    sampler = build(TypeAdapter(DistributionSpec).validate_python(spec))
    values = sampler.sample(np.random.default_rng(0), 20000)
    assert values.min() == 800 and values.max() == 1000 and np.all(values == np.round(values))
    # np.random.randint(800, 1001): every integer equally likely, the end points included.
    counts = pd.Series(values).value_counts()
    assert len(counts) == 201 and counts.max() < 3 * counts.min()
    assert abs(values.mean() - 900) < 2


def test_the_measured_requests_are_the_first_ten_per_client_burst_included():
    clients = 4
    finished = pd.DataFrame({"request_id": range(60), "arrival_s": np.arange(60) // clients * 1.0,
                             "ttft_s": np.where(np.arange(60) < clients, 1.0, 0.1)})
    wanted = MEASURED_REQUESTS_PER_CLIENT * clients
    measured = _measured_requests(finished, clients, INFERENCEX)
    assert len(measured) == wanted and measured["request_id"].tolist() == list(range(wanted))
    assert np.isclose(measured["ttft_s"].mean(), (clients * 1.0 + (wanted - clients) * 0.1) / wanted)  # burst counts
    # Until one more round has finished, an early request may still be running: not yet.
    assert _measured_requests(finished.iloc[: wanted + clients - 1], clients, INFERENCEX) is None
    assert len(_measured_requests(finished.iloc[:10], clients, INFERENCEX, partial=True)) == 10


def test_client_lengths_reach_the_simulated_requests():
    frame = read_rows(SAMPLE)
    row = frame[(frame["mode"] == "agg") & (frame["isl"] <= 2048)].iloc[0].to_dict()
    isl, osl = int(row["isl"]), int(row["osl"])
    data = _with_engine_kv(_with_client_lengths(row_scenario(row), INFERENCEX, isl, osl))
    data["duration_s"] = 60.0  # 4 clients of 1024 + 1024 tokens: about 10 s a round
    requests = run_scenario(scenario_from_dict(data, source="test")).tables["requests"]
    done = requests[~requests["rejected"]]
    assert len(done) >= 12
    assert done["prompt_tokens"].between(int(0.8 * isl), isl).all() and done["prompt_tokens"].nunique() > 1
    assert done["output_tokens"].between(int(0.8 * osl), osl).all() and done["output_tokens"].nunique() > 1


def test_sglang_recipes_set_the_scheduling_flags_the_benchmark_ran_with():
    from agentsim.experiments.benchmark_recipes import recipe_serving

    sweep = "source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency=8; image=lmsysorg/sglang:v0.5.9-cu130"
    row = {"backend": "sglang", "model_path": "nvidia/DeepSeek-R1-0528-NVFP4-v2", "system": "b200_sxm",
           "precision": "fp4", "silicon_data_source": sweep}
    assert recipe_serving(row, 8, 8) == {"scheduler_recv_interval": 10, "max_num_batched_tokens": 16384}
    assert recipe_serving(row, 16, 8) == {"scheduler_recv_interval": 30, "max_num_batched_tokens": 16384}
    fp8_tp4 = {**row, "model_path": "deepseek-ai/DeepSeek-R1", "precision": "fp8"}
    assert recipe_serving(fp8_tp4, 32, 4)["scheduler_recv_interval"] == 10
    assert recipe_serving({**row, "system": "h200_sxm", "precision": "fp8"}, 32, 8) == {"max_num_batched_tokens": 32768}
    assert recipe_serving({**row, "backend": "vllm"}, 8, 8) == {}
    assert recipe_serving({**row, "silicon_data_source": "source_file=/x/aic-auto-gap-analysis/y.csv"}, 8, 8) == {}
    assert recipe_serving({**row, "model_path": "someone/Other-7B"}, 8, 8) == {}


def test_tensorrt_llm_recipes_set_the_step_token_budget_they_launched_with():
    from agentsim.experiments.benchmark_recipes import recipe_serving

    def source(date):
        return f"source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=8; measured={date}T00:00:00.000Z"
    row = {"backend": "trtllm", "model_path": "deepseek-ai/DeepSeek-R1", "system": "b200_sxm", "precision": "fp4",
           "isl": 1024, "silicon_data_source": source("2025-11-02")}
    # One whole prompt beside every decoding request: (8 + 1024 + 64) rounded up to 64.
    assert recipe_serving(row, 8, 8) == {"max_num_batched_tokens": 1152}
    assert recipe_serving({**row, "isl": 8192}, 32, 8) == {"max_num_batched_tokens": 8320}
    # From 2026-01-21 the recipe floors it at 8192.
    assert recipe_serving({**row, "silicon_data_source": source("2026-02-05")}, 8, 8) == {"max_num_batched_tokens": 8192}
    assert recipe_serving({**row, "model_path": "openai/gpt-oss-120b"}, 8, 8) == {"max_num_batched_tokens": 20000}
    assert recipe_serving({**row, "model_path": "meta-llama/Llama-3.1-70B"}, 8, 8) == {"max_num_batched_tokens": 16384}
    assert recipe_serving({**row, "model_path": "Qwen/Qwen3-32B"}, 8, 8) == {}
    assert recipe_serving({**row, "silicon_data_source": "source_file=/x/aic-auto-gap-analysis/y.csv"}, 8, 8) == {}


def test_eval_rows_get_the_step_budget_aiconfigurators_generator_wrote():
    from agentsim.experiments.aic_generator import generator_serving

    source = "source_file=/Users/x/aic-auto-gap-analysis/data/h100_sxm/trtllm/1.0.0rc3/Qwen_Qwen3-32B.csv; "
    row = {"backend": "trtllm", "backend_version": "1.0.0rc3", "mode": "agg", "isl": 1024, "batch_size": 32.0,
           "silicon_data_source": source}
    # max_batch_size + isl + 1500: room for one prompt beside every decoding request.
    assert generator_serving(row) == {"max_num_batched_tokens": 32 + 1024 + 1500}
    assert generator_serving({**row, "batch_size": 4.0, "isl": 512}) == {"max_num_batched_tokens": 4 + 512 + 1500}
    # vLLM: the same rule, passed to the engine from January 2026, when its 0.12.0 rows ran.
    assert generator_serving({**row, "backend": "vllm", "backend_version": "0.12.0"}) == {"max_num_batched_tokens": 32 + 1024 + 1500}
    assert generator_serving({**row, "backend": "vllm", "backend_version": "0.11.2"}) == {}   # before the flag
    assert generator_serving({**row, "backend": "vllm", "backend_version": float("nan")}) == {}   # undated
    assert generator_serving({**row, "backend": "sglang", "backend_version": "0.5.8.post1"}) == {}
    assert generator_serving({**row, "mode": "disagg"}) == {}
    assert generator_serving({**row, "silicon_data_source": "db-dump/2026-04-27; config_id=1"}) == {}


def test_check_timing_launches_an_eval_row_with_the_generators_budget(monkeypatch):
    """The emulated deployment has the budget: a round of 1k prompts is prefilled a few per step
    (no longer 8 per 8,192-token step), so the clients spread out and the mean TTFT falls."""
    import agentsim.experiments.timing_check as timing_check

    source = ("source_file=/Users/x/aic-auto-gap-analysis/data/h100_sxm/trtllm/1.0.0rc3/"
              "meta-llama_Llama-3.1-8B-Instruct.csv; silicon_concurrency=32")
    row = {"id": "eval-row", "silicon_data_source": source, "backend": "trtllm", "backend_version": "1.0.0rc3",
           "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm", "precision": "bf16", "mode": "agg",
           "isl": 1024, "osl": 128, "gemm_quant_mode": "", "moe_quant_mode": "", "batch_size": 32.0, "tp_size": 1.0,
           "pp_size": 1.0, "attention_dp_size": float("nan"), "moe_tp_size": float("nan"), "moe_ep_size": float("nan"),
           "silicon_ttft_ms": 300.0, "silicon_tpot_ms": 10.0}
    budgets = []
    run = timing_check.run_scenario

    def recording(scenario, stop=None):
        budgets.append(scenario.serving.instance_batch_tokens())
        return run(scenario, stop=stop)

    monkeypatch.setattr(timing_check, "run_scenario", recording)
    launched = timing_check.emulate_row(row)
    assert launched.skipped is None and set(budgets) == {32 + 1024 + 1500}
    monkeypatch.setattr(timing_check, "generator_serving", lambda row: {})
    default = timing_check.emulate_row(row)
    assert launched.predicted_ttft_ms < 0.8 * default.predicted_ttft_ms


def test_prefix_caching_is_off_where_the_benchmarks_launched_servers_without_it(monkeypatch):
    from agentsim.experiments import timing_check
    from agentsim.experiments.benchmark_recipes import server_prefix_caching

    sweep = {"backend": "vllm", "silicon_data_source": "source_file=2026-04-06.csv; model=DeepSeek-R1"}
    assert not server_prefix_caching(sweep)                    # InferenceX recipes: off
    assert not server_prefix_caching({**sweep, "backend": "sglang"})
    harness = {"silicon_data_source": "source_file=/x/aic-auto-gap-analysis/y.csv"}
    assert not server_prefix_caching({**harness, "backend": "trtllm"})   # generator: enable_block_reuse false
    assert server_prefix_caching({**harness, "backend": "vllm"})         # engine default: on
    assert server_prefix_caching({**harness, "backend": "sglang"})
    # The emulated scenario of a sampled row runs so (and without the recompute split).
    seen = []

    def recording(scenario, *args, **kwargs):
        seen.append(scenario)
        return run_scenario(scenario, *args, **kwargs)

    monkeypatch.setattr(timing_check, "run_scenario", recording)
    rows = read_rows(SAMPLE)
    for row in (r for r in rows.to_dict("records") if str(r["mode"]).strip() == "agg"):
        seen.clear()
        result = timing_check.emulate_row(row, ["run.check_invariants=true"])
        if result.skipped is None:
            break
    assert result.predicted_ttft_ms > 0 and seen
    expected = "admit_all" if server_prefix_caching(row) else "no_prefix_cache"
    assert {s.cache.admission.name for s in seen} == {expected}
    assert not any(s.run.recompute_split for s in seen)
