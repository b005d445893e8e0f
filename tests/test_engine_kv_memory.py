"""The KV capacity an engine derives from device memory (agentsim.hardware.timing.memory)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agentsim.hardware.timing.deployment import Deployment
from agentsim.hardware.timing.memory import MEMORY_FRACTION, engine_kv_capacity_tokens

aic = pytest.importorskip("aiconfigurator_core")


def _deployment(backend: str) -> Deployment:
    return Deployment(model="Qwen/Qwen3-32B", system="h200_sxm", backend=backend, backend_version=None, tp=2, pp=1,
                      attention_dp=1, moe_tp=1, moe_ep=1, gemm_quant="fp8", moe_quant=None, kv_quant=None,
                      fmha_quant=None, max_num_tokens=16384, max_num_seqs=64, max_context_tokens=4096)


def _package_estimate(d: Deployment) -> dict:
    from aiconfigurator_core.sdk.engine import _literal_backend_version
    from aiconfigurator_core.sdk.memory import estimate_kv_cache

    kind, fraction = MEMORY_FRACTION[d.backend]
    version = _literal_backend_version(d.system, d.backend, d.backend_version, None, None)
    return estimate_kv_cache(d.model, d.system, d.backend, version, max_num_tokens=d.max_num_tokens,
                             max_batch_size=d.max_num_seqs, memory_fraction_kind=kind, memory_fraction_value=fraction,
                             tp_size=d.tp, pp_size=d.pp, attention_dp_size=d.attention_dp, moe_tp_size=d.moe_tp,
                             moe_ep_size=d.moe_ep, gemm_quant_mode=d.gemm_quant, moe_quant_mode=d.moe_quant,
                             kvcache_quant_mode=d.kv_quant, fmha_quant_mode=d.fmha_quant)


def test_sglang_keeps_the_activation_workspace_outside_its_static_share():
    d = _deployment("sglang")
    estimate = _package_estimate(d)
    workspace = estimate["memory_breakdown"]["activations_bytes"]
    per_token = estimate["kv_size_per_token_bytes"]
    assert workspace > 1e9     # a 16K-token step's workspace on H200: gigabytes, not a rounding error
    # SGLang: weights + KV within mem_fraction_static, the workspace in the rest.
    assert engine_kv_capacity_tokens(d) == estimate["total_kv_size_tokens"] + int(workspace // per_token)
    # A larger step budget needs a larger workspace, which SGLang's KV pool does not pay for.
    bigger = replace(d, max_num_tokens=32768)
    assert engine_kv_capacity_tokens(bigger) == engine_kv_capacity_tokens(d)


@pytest.mark.parametrize("backend", ["vllm", "trtllm"])
def test_vllm_and_trtllm_pay_the_workspace_from_their_share(backend):
    d = _deployment(backend)
    estimate = _package_estimate(d)
    assert engine_kv_capacity_tokens(d) == estimate["total_kv_size_tokens"]
    assert engine_kv_capacity_tokens(replace(d, max_num_tokens=32768)) < engine_kv_capacity_tokens(d)
