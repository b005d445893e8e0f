"""Measured step timing: tables from aiconfigurator-core, their disk cache, the nearest-precision
substitution and the roofline fallback."""

from __future__ import annotations

import numpy as np
import pytest

from agentsim.engine.loading import scenario_from_dict
from agentsim.hardware.timing import select
from agentsim.hardware.timing.deployment import Deployment
from agentsim.hardware.timing.precision_fallback import nearest_precision
from agentsim.hardware.timing.tables import (_count_ops, _implausible, _non_decreasing_in_batch, build_tables,
                                             compile_engine, load_or_build)
from agentsim.hardware.timing.tabulated import TabulatedTimer

LLAMA_8B = Deployment(model="meta-llama/Meta-Llama-3.1-8B", system="h200_sxm", backend="vllm", tp=1,
                      max_num_tokens=2048, max_num_seqs=64, max_context_tokens=8192)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTSIM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(select, "_BUILT", {})
    return tmp_path / "timing"


def _scenario(**model):
    return scenario_from_dict({
        "name": "t", "seed": 1, "duration_s": 10,
        "hardware": {"profile": "h200_sxm", "gpus_per_instance": 1},
        "model": {"profile": "llama31_8b", **model},
        "serving": {"engine": "vllm", "max_num_seqs": 64, "max_num_batched_tokens": 2048},
        "workload": {"agent_classes": {"c": {"arrival": {"kind": "population", "concurrent": 1},
                                             "max_context_tokens": 8192, "tools_prefix_tokens": 0}}}})


def test_tables_built_fresh_and_loaded_from_the_cache_are_identical(cache):
    fresh = load_or_build(LLAMA_8B)
    files = list(cache.glob("*.npz"))
    assert len(files) == 1
    loaded = load_or_build(LLAMA_8B)
    assert loaded == fresh  # dataclass equality: every grid value and the provenance
    assert build_tables(LLAMA_8B) == fresh  # and a rebuild gives the same numbers


def test_tabulated_decode_steps_agree_with_direct_engine_calls(cache):
    tables = load_or_build(LLAMA_8B)
    timer = TabulatedTimer(tables, kv_bytes_per_token=131072, chunk_tokens=2048)
    engine = compile_engine(LLAMA_8B)._engine
    errors = []
    for batch, context in ((3, 700), (11, 1500), (27, 3000), (50, 6000)):  # off the table's grid points
        direct_s = engine.decode_step_latency(batch, context - 1, 1, 1.0) * 1e-3
        errors.append(abs(timer.iteration_s((), batch, batch * context) / direct_s - 1.0))
    assert max(errors) < 0.01


def test_a_model_the_databases_lack_falls_back_to_the_roofline_with_the_reason(cache):
    timer, choice = select.build_timer(_scenario(name="example/Not-In-The-Databases-8B"))
    assert choice.source == "roofline" and timer.source == "roofline"
    assert "Not-In-The-Databases-8B" in choice.reason and choice.reason.startswith("measured timing unavailable")
    # The roofline still times steps: a decode step is positive and grows with the batch.
    assert 0 < timer.iteration_s((), 1, 1000) < timer.iteration_s((), 64, 64000)


def test_a_covered_model_gets_measured_timing(cache):
    timer, choice = select.build_timer(_scenario())
    assert choice.source == "measured" and "h200_sxm/vllm" in choice.reason
    assert timer.iteration_s(((1024, 0),), 0, 0.0) > timer.iteration_s((), 1, 1024)


def test_operations_of_the_same_name_are_told_apart_when_probing_for_context(cache):
    """gpt-oss has two ``context_attention`` operations (sliding-window and full layers); the
    engine merges same-named operations in the answer to a list, so the context probe asks one
    operation at a time (a list probe failed with an IndexError and fell back to the roofline)."""
    gpt_oss = Deployment(model="openai/gpt-oss-120b", system="h200_sxm", backend="vllm", tp=2, moe_tp=2, moe_ep=1,
                         gemm_quant="bfloat16", moe_quant="w4a16_mxfp4", max_num_tokens=2048, max_num_seqs=8,
                         max_context_tokens=4096)
    tables = build_tables(gpt_oss)
    engine = compile_engine(gpt_oss)._engine
    # The full-attention operation grows with the prefix and is the chunk table; the
    # sliding-window one (128 tokens) does not, so it is timed with the non-attention part.
    operations = range(_count_ops(lambda i: engine.evaluate_context_ops([i], 1, 1, 0, 1.0, None)))
    attention = [i for i in operations
                 if engine.evaluate_context_ops([i], 1, 1024, 0, 1.0, None)[0][0] == "context_attention"]
    assert len(attention) == 2
    at_4k = [engine.evaluate_context_ops([i], 1, 1024, 4096, 1.0, None)[0][1] * 1e-3 for i in attention]
    at_16k = [engine.evaluate_context_ops([i], 1, 1024, 16384, 1.0, None)[0][1] * 1e-3 for i in attention]
    full = max(range(2), key=lambda k: at_16k[k] / at_4k[k])
    assert at_16k[full] > 2 * at_4k[full] and at_16k[1 - full] < 1.05 * at_4k[1 - full]
    chunk_s = tables.chunk_attention_s[tables.news.index(1024)][tables.contexts.index(4096)]
    assert chunk_s == pytest.approx(at_4k[full], rel=1e-9)


def test_missing_fp8_attention_data_is_timed_with_bfloat16_kernels():
    deployment = Deployment(model="deepseek-ai/DeepSeek-V3", system="b200_sxm", backend="sglang", tp=8, moe_tp=8, moe_ep=1)
    message = 'perf database error: context MLA data missing for ContextKey { fmha_quant: "fp8", kv_quant: "fp8" }'
    nearer, note = nearest_precision(deployment, message)
    assert nearer.fmha_quant == "bfloat16" and "bfloat16" in note
    assert nearest_precision(nearer, message) is None  # no second substitution of the same kind
    moe = 'MoE data missing for MoeKey { quant: "fp8", distribution: "power_law_1.2", topk: 8 }'
    assert nearest_precision(deployment, moe)[0].moe_quant == "fp8_block"
    assert nearest_precision(deployment, "GEMM perf data missing for quant 'int4_wo'") is None


def test_missing_fp8_cache_attention_data_is_timed_reading_a_bfloat16_cache_only_when_fp8_was_set():
    message = ('perf database error: context attention data missing for ContextKey { fmha_quant: "bfloat16", '
               'kv_quant: "fp8", n_kv_lookup: 1, head_size: 256, window_size: 0 }')
    deployment = Deployment(model="Qwen/Qwen3.5-397B-A17B", system="h200_sxm", backend="sglang", tp=8, moe_tp=1,
                            moe_ep=8, kv_quant="fp8")
    nearer, note = nearest_precision(deployment, message)
    assert nearer.kv_quant == "bfloat16" and "bfloat16 KV cache" in note
    assert nearest_precision(nearer, message) is None
    # The model's own default type (None) is left to the database's verdict.
    from dataclasses import replace
    assert nearest_precision(replace(deployment, kv_quant=None), message) is None


def test_nvfp4_experts_missing_are_timed_as_mxfp4_experts_with_fp8_activations():
    deployment = Deployment(model="openai/gpt-oss-120b", system="b200_sxm", backend="trtllm", tp=1, moe_tp=1,
                            moe_ep=1, gemm_quant="nvfp4", moe_quant="nvfp4")
    message = ('MoE data missing for MoeKey { quant: "nvfp4", distribution: "power_law_1.2", topk: 4, '
               'num_experts: 128, hidden_size: 2880, inter_size: 2880, moe_tp_size: 1, moe_ep_size: 1 }')
    nearer, note = nearest_precision(deployment, message)
    assert nearer.moe_quant == "w4a8_mxfp4_mxfp8" and nearer.gemm_quant == "nvfp4" and "w4a8_mxfp4_mxfp8" in note
    # No further step down to the weight-only kernels (BF16 rate), and nothing for another format.
    assert nearest_precision(nearer, message.replace('"nvfp4"', '"w4a8_mxfp4_mxfp8"')) is None
    assert nearest_precision(deployment, message.replace('"nvfp4"', '"int4_wo"')) is None


@pytest.mark.parametrize("model, moe_tp, quants, note", [
    ("deepseek-ai/DeepSeek-V3", 8, ("fp8", "fp8_block"),
     "attention timed with bfloat16 kernels (the database has no FP8 attention data)"),
    ("openai/gpt-oss-120b", 1, ("nvfp4", "nvfp4"),
     "MoE timed with w4a8_mxfp4_mxfp8 kernels (the database has no nvfp4 data for this shape)"),
])
def test_the_substitution_is_used_and_said_in_the_timing_reason(cache, model, moe_tp, quants, note):
    deployment = Deployment(model=model, system="b200_sxm", backend="sglang" if moe_tp == 8 else "trtllm",
                            tp=moe_tp, moe_tp=moe_tp, moe_ep=1, gemm_quant=quants[0], moe_quant=quants[1],
                            max_num_tokens=1024, max_num_seqs=16, max_context_tokens=4096)
    tables, notes = select._build_nearest(deployment)
    assert notes == [note]
    assert np.all(np.isfinite(tables.decode_s))


def test_decode_jitter_is_smoothed_and_a_gross_drop_is_rejected():
    jitter = [[1.0, 2.0], [0.9, 2.1], [1.2, 2.2]]  # batch 2 is 10% faster than batch 1 at context 0
    smoothed, factor = _non_decreasing_in_batch(jitter)
    assert smoothed == [[1.0, 2.0], [1.0, 2.1], [1.2, 2.2]] and factor == pytest.approx(1 / 0.9)
    assert _implausible([1, 2, 4], jitter) is None
    gross = [[80e-3], [40e-3], [60e-3]]  # batch 1 twice as slow as batch 2
    assert "less than" in _implausible([1, 2, 4], gross)


def test_a_deployment_the_databases_cannot_time_is_refused_from_the_cache_without_a_rebuild(cache, monkeypatch):
    from agentsim.hardware.timing import tables as tables_module
    unknown = Deployment(model="example/Not-In-The-Databases-8B", system="h200_sxm", backend="vllm", tp=1,
                         max_num_tokens=2048, max_num_seqs=64, max_context_tokens=8192)
    with pytest.raises(tables_module.TimingDataUnavailable) as first:
        load_or_build(unknown)
    assert len(list(cache.glob("*.unavailable"))) == 1

    def no_rebuild(deployment):
        raise AssertionError("a recorded refusal was built again")

    monkeypatch.setattr(tables_module, "build_tables", no_rebuild)
    with pytest.raises(tables_module.TimingDataUnavailable) as second:
        load_or_build(unknown)
    assert str(second.value) == str(first.value) and "Not-In-The-Databases-8B" in str(first.value)
    # A refusal recorded by other build rules (another source digest) is not trusted.
    monkeypatch.setattr(tables_module, "_RULES_DIGEST", "other-rules")
    with pytest.raises(AssertionError, match="built again"):
        load_or_build(unknown)


def test_decode_stretches_remembered_per_batch_and_context_equal_fresh_computations(cache):
    """The timers keep the last (n, K) -> (a, c) pair; interleaved queries that change and repeat
    (n, K) must give exactly what the pair computed afresh gives."""
    from agentsim.hardware.timing import linear_decode
    from agentsim.hardware.timing.roofline import RooflineTimer
    tabulated = TabulatedTimer(load_or_build(LLAMA_8B), kv_bytes_per_token=131072, chunk_tokens=2048)
    roofline = RooflineTimer(active_params=8e9, total_params=8e9, bytes_per_param=1.0, attn_coeff=1e6,
                             decode_attn_coeff=1e6, kv_bytes_per_token=131072, flops_per_s=1e15, bytes_per_s=4e12,
                             chunk_tokens=8192, layers=32, hidden_size=4096)
    queries = [(3, 2100.0), (3, 2100.0), (40, 64000.0), (3, 2100.0), (40, 64003.0), (40, 64003.0), (1, 0.0)]
    for timer in (tabulated, roofline):
        stretches = set()
        for n, context in queries:
            a, c = timer._decode_linear(n, context)
            assert timer.decode_stretch_s(n, context, 7) == linear_decode.stretch_s(a, c, 7)
            elapsed_s = linear_decode.stretch_s(a, c, 5) + 1e-9
            assert timer.decode_steps_within(n, context, elapsed_s) == linear_decode.steps_within(a, c, elapsed_s) == 5
            stretches.add(timer.decode_stretch_s(n, context, 7))
        assert len(stretches) == 4  # the queries' distinct pairs time differently


def test_moe_prefills_are_timed_with_skewed_expert_routing(monkeypatch):
    """The engine is compiled with aiconfigurator's own default token-to-expert distribution
    (power law), not balanced routing, which would time MoE prefills 10-25% faster."""
    import aiconfigurator_core.sdk.engine as aic_engine
    deployment = Deployment(model="Qwen/Qwen3-235B-A22B", system="h200_sxm", backend="trtllm", tp=8, moe_tp=1,
                            moe_ep=8)
    skewed_ms = compile_engine(deployment).predict_prefill_latency(1, 8192)
    default_config = aic_engine.build_model_config

    def balanced_config(**kwargs):
        config = default_config(**kwargs)
        assert config.workload_distribution == "power_law"  # what compile_engine got
        config.workload_distribution = "balanced"
        return config

    monkeypatch.setattr(aic_engine, "build_model_config", balanced_config)
    balanced_ms = compile_engine(deployment).predict_prefill_latency(1, 8192)
    assert skewed_ms > balanced_ms * 1.1
