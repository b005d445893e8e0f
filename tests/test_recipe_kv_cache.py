"""check-timing gives an InferenceX row's engine the KV-cache type its recipe launched it with."""

from __future__ import annotations

import pytest

from agentsim.engine.loading import scenario_from_dict
from agentsim.experiments.benchmark_rows import row_scenario
from agentsim.experiments.recipe_kv_cache import recipe_kv_cache
from agentsim.experiments.timing_check import _with_engine_kv


def _source(date: str) -> str:
    return f"db-dump/2026-04-27; config_id=1; silicon_concurrency=64; measured={date}T00:00:00.000Z"


LLAMA_FP8_B200 = {
    "id": "llama70b_b200_vllm_fp8_1k8k_c64", "backend": "vllm", "model_path": "meta-llama/Llama-3.1-70B",
    "system": "b200_sxm", "precision": "fp8", "mode": "agg", "isl": 1024, "osl": 8192, "batch_size": 64,
    "tp_size": 1, "pp_size": 1, "attention_dp_size": 1, "moe_tp_size": 1, "moe_ep_size": 1,
    "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8", "silicon_ttft_ms": 381.9, "silicon_tpot_ms": 24.7,
    "silicon_data_source": _source("2025-10-29")}


def test_recipes_that_set_fp8_kv_are_found_by_family_system_precision_and_date():
    assert recipe_kv_cache(LLAMA_FP8_B200) == "fp8"
    assert recipe_kv_cache({**LLAMA_FP8_B200, "backend": "trtllm"}) == "fp8"
    minimax = {**LLAMA_FP8_B200, "model_path": "MiniMaxAI/MiniMax-M2.5"}
    # MiniMax-M2.5 FP8 on B200: the recipe set it from 2026-04-03 (InferenceX #947), not before.
    assert recipe_kv_cache({**minimax, "silicon_data_source": _source("2026-03-20")}) is None
    assert recipe_kv_cache({**minimax, "silicon_data_source": _source("2026-04-03")}) == "fp8"
    assert recipe_kv_cache({**minimax, "system": "h200_sxm", "silicon_data_source": _source("2026-04-10")}) is None
    glm = {**LLAMA_FP8_B200, "model_path": "zhipuai/GLM-5", "backend": "sglang"}
    assert recipe_kv_cache(glm) == "fp8" and recipe_kv_cache({**glm, "system": "h200_sxm"}) is None
    assert recipe_kv_cache({**glm, "model_path": "Qwen/Qwen3.5-397B-A17B", "precision": "bf16"}) is None


def test_an_eval_harness_row_has_the_kv_cache_aiconfigurators_generator_wrote():
    """aiconfigurator's eval harness did not run InferenceX's recipes: its generator launched the
    engines with the KV-cache type of the searched configuration, FP8 beside a quantised one."""
    aic = "source_file=/x/aic-auto-gap-analysis/data/h100_sxm/trtllm/1.0.0rc3/Qwen_Qwen3-32B.csv"
    qwen = {**LLAMA_FP8_B200, "model_path": "Qwen/Qwen3-32B", "system": "h100_sxm", "silicon_data_source": aic}
    for backend in ("trtllm", "vllm", "sglang"):
        assert recipe_kv_cache({**qwen, "backend": backend}) == "fp8"
    assert recipe_kv_cache({**qwen, "precision": "fp4", "gemm_quant_mode": "nvfp4"}) == "fp8"
    # A BF16 configuration keeps a BF16 cache, whatever InferenceX's recipe for the family says.
    assert recipe_kv_cache({**qwen, "model_path": "meta-llama/Llama-3.1-70B", "precision": "bf16"}) is None
    assert recipe_kv_cache({**qwen, "precision": "mxfp4"}) is None     # its MXFP4 preset keeps BF16
    # The eval row's KV pool holds twice the tokens it would in BF16 (the emulation reads it).
    row = {**qwen, "backend": "trtllm", "tp_size": 1, "batch_size": 64, "isl": 4096, "osl": 256}
    data = _with_engine_kv({**row_scenario(row), "serving": {**row_scenario(row)["serving"],
                                                            "precision": {"weights": "fp8", "kv_cache": "fp8"}}})
    plain = _with_engine_kv(row_scenario(row))
    assert data["hardware"]["kv_capacity_bytes"] / data["model"]["kv_bytes_per_token"] == pytest.approx(
        2 * plain["hardware"]["kv_capacity_bytes"] / scenario_from_dict(plain, source="test").model.kv_bytes_per_token,
        rel=0.02)


def test_an_fp8_kv_cache_holds_twice_the_tokens_in_the_bytes_the_engine_gives_them():
    """Llama-3.1-70B FP8 on one B200: 590K tokens wanted by 64 clients of 1k + 8k; a BF16 cache
    holds about 293K of them, the recipe's FP8 one twice that."""
    bf16 = row_scenario(LLAMA_FP8_B200)
    fp8 = {**bf16, "serving": {**bf16["serving"], "precision": {**bf16["serving"]["precision"], "kv_cache": "fp8"}}}
    tokens = {}
    for name, data in (("bf16", bf16), ("fp8", fp8)):
        data = _with_engine_kv(data)
        scenario = scenario_from_dict(data, source="test")
        tokens[name] = scenario.kv_capacity_bytes_per_instance() / scenario.model.kv_bytes_per_token
        if name == "fp8":
            assert scenario.model.kv_bytes_per_token == pytest.approx(80 * 8 * 128 * 2 * 1)  # one byte a value
            # The weights and the cache fit the GPU as the engine lays them out.
            assert scenario.kv_capacity_bytes_per_instance() + scenario.weights_bytes() <= scenario.hardware.hbm_bytes_per_gpu
    assert 2.5e5 < tokens["bf16"] < 3.5e5
    assert tokens["fp8"] == pytest.approx(2 * tokens["bf16"], rel=0.02)


def test_the_profiles_counted_in_bf16_are_the_ones_whose_sources_say_two_bytes_a_value():
    from agentsim.experiments.recipe_kv_cache import BF16_KV_PROFILES, kv_bytes_at
    from agentsim.hardware.profiles import load_catalogue

    for name, fields in load_catalogue("models").items():
        source = str(fields.get("sources", {}).get("kv_bytes_per_token", ""))
        counted = source.split("(")[0]          # the derivation, before the alternative in brackets
        assert ("2 B BF16" in counted or "2 x 2 B" in counted) == (name in BF16_KV_PROFILES), (name, source)
    assert kv_bytes_at("llama31_70b", 327680, "fp8") == 163840
    assert kv_bytes_at("llama31_70b", 327680, None) == 327680
    assert kv_bytes_at("deepseek_v3", 35136, "fp8") == 35136     # counted in FP8 already
