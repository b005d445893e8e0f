"""KV-cache capacity of a deployment, derived as the serving engine derives it.

vLLM and SGLang give the KV cache a fraction of *total* device memory minus weights,
activations and runtime buffers; TensorRT-LLM a fraction of the memory still *free* after
loading. aiconfigurator-core models each engine's memory use (weights per rank, activation
workspace for ``max_num_tokens``, NCCL and runtime overhead) from the device's real capacity;
this module asks it for the KV budget.

SGLang's ``mem_fraction_static`` is the share of total memory for the *static* pools, weights and
KV cache; the activations of a forward pass and the CUDA graphs live in the rest
(``ModelRunner.profile_max_num_token``: ``rest_memory = available_gpu_memory - total_gpu_memory *
(1 - mem_fraction_static)``, the memory available after loading the weights). aiconfigurator-core's
``of_total`` estimate takes the activation workspace out of that share as vLLM's
``gpu_memory_utilization`` requires (vLLM profiles the activation peak inside its share), which
for SGLang under-counts the pool by the whole workspace (GLM-5 FP8 on eight B200s with a
32,768-token step: 46 GB of KV instead of 65, 763K tokens instead of 1.08M); for SGLang the
workspace is given back.
"""

from __future__ import annotations

import logging

from agentsim.hardware.timing.deployment import Deployment

#: Engine default memory fractions: vLLM ``gpu_memory_utilization`` 0.9 of total; SGLang
#: ``mem_fraction_static`` about 0.88 of total on 80-290 GB devices; TRT-LLM
#: ``free_gpu_memory_fraction`` 0.9 of free memory.
MEMORY_FRACTION = {"vllm": ("of_total", 0.9), "sglang": ("of_total", 0.88), "trtllm": ("of_free", 0.9)}


def package_kv_estimate(deployment: Deployment) -> dict | None:
    """aiconfigurator-core's memory estimate of ``deployment`` at its engine's default fraction
    (``estimate_kv_cache``: KV tokens and bytes, the memory breakdown), or None when the package
    cannot model the deployment."""
    try:
        logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
        from aiconfigurator_core.sdk.engine import _literal_backend_version
        from aiconfigurator_core.sdk.memory import estimate_kv_cache

        kind, fraction = MEMORY_FRACTION[deployment.backend]
        version = _literal_backend_version(deployment.system, deployment.backend, deployment.backend_version, None, None)
        d = deployment
        return estimate_kv_cache(
            d.model, d.system, d.backend, version, max_num_tokens=d.max_num_tokens, max_batch_size=d.max_num_seqs,
            memory_fraction_kind=kind, memory_fraction_value=fraction, tp_size=d.tp, pp_size=d.pp,
            attention_dp_size=d.attention_dp, moe_tp_size=d.moe_tp, moe_ep_size=d.moe_ep,
            gemm_quant_mode=d.gemm_quant, moe_quant_mode=d.moe_quant, kvcache_quant_mode=d.kv_quant,
            fmha_quant_mode=d.fmha_quant)
    except Exception:  # unknown model/system/version in the package: the caller falls back
        return None


def engine_kv_capacity_tokens(deployment: Deployment) -> int | None:
    """KV tokens one instance holds (None when the package cannot model this deployment)."""
    estimate = package_kv_estimate(deployment)
    if estimate is None:
        return None
    tokens = int(estimate.get("total_kv_size_tokens") or 0)
    if deployment.backend == "sglang" and tokens > 0:
        # The activation workspace is outside SGLang's static share (module docstring).
        per_token = float(estimate.get("kv_size_per_token_bytes") or 0)
        workspace = float((estimate.get("memory_breakdown") or {}).get("activations_bytes") or 0)
        if per_token > 0:
            tokens += int(workspace // per_token)
    # Attention-DP ranks each hold their own sequences' KV.
    return tokens * deployment.attention_dp if tokens > 0 else None
