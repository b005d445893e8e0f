"""The KV capacity an engine derives from device memory (agentsim.hardware.timing.memory)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agentsim.hardware.timing.deployment import Deployment
from agentsim.hardware.timing.memory import engine_kv_capacity_tokens, package_kv_estimate

aic = pytest.importorskip("aiconfigurator_core")


def _deployment(backend: str) -> Deployment:
    return Deployment(model="Qwen/Qwen3-32B", system="h200_sxm", backend=backend, backend_version=None, tp=2, pp=1,
                      attention_dp=1, moe_tp=1, moe_ep=1, gemm_quant="fp8", moe_quant=None, kv_quant=None,
                      fmha_quant=None, max_num_tokens=16384, max_num_seqs=64, max_context_tokens=4096)


def _package_estimate(d: Deployment) -> dict:
    estimate = package_kv_estimate(d)
    assert estimate is not None
    return estimate


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
