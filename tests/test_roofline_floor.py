"""The roofline fallback's kernel floor per layer and the MoE expert GEMMs' lower efficiency
(both read off aiconfigurator-core's measured kernel databases; agentsim.hardware.timing.roofline)."""

import dataclasses

import pytest

from agentsim.engine.loading import scenario_from_dict
from agentsim.hardware.timing.roofline import KERNEL_FLOOR_S_PER_LAYER, MOE_GEMM_EFFICIENCY, RooflineTimer
from agentsim.hardware.timing.select import roofline_timer

DENSE = RooflineTimer(active_params=8e9, total_params=8e9, bytes_per_param=1.0, attn_coeff=1e6,
                      decode_attn_coeff=1e6, kv_bytes_per_token=131072, flops_per_s=1e15, bytes_per_s=4e12,
                      chunk_tokens=8192, layers=32, hidden_size=4096)


def test_a_small_decode_step_costs_at_least_the_kernel_floor_of_every_layer():
    floored = dataclasses.replace(DENSE, layer_floor_s=KERNEL_FLOOR_S_PER_LAYER)
    step, bare = floored.iteration_s((), 1, 1024), DENSE.iteration_s((), 1, 1024)
    assert step == pytest.approx(bare + 32 * KERNEL_FLOOR_S_PER_LAYER)
    # Per step, not per token: a big prefill pays it once.
    assert floored.iteration_s(((8192, 0),), 0, 0.0) - DENSE.iteration_s(((8192, 0),), 0, 0.0) == pytest.approx(
        32 * KERNEL_FLOOR_S_PER_LAYER)


def test_expert_gemms_run_at_a_share_of_the_mfu():
    # 256 experts, 8 per token: of 37B active parameters, the routed experts' share is
    # (671 - 37) / (1 - 8/256) * 8/256 = 20.5B; the other 16.5B are dense.
    moe = dataclasses.replace(DENSE, active_params=37e9, total_params=671e9, routed_experts=256, experts_per_token=8)
    slow = dataclasses.replace(moe, moe_efficiency=0.5)
    routed = (671e9 - 37e9) / (1 - 8 / 256) * 8 / 256
    tokens = 16384  # compute-bound
    extra_s = slow.iteration_s(((tokens, 0),), 0, 0.0) - moe.iteration_s(((tokens, 0),), 0, 0.0)
    assert extra_s == pytest.approx(2 * tokens * routed / 1e15, rel=1e-6)  # twice the routed FLOPs' time
    # A dense model is unaffected.
    assert dataclasses.replace(DENSE, moe_efficiency=0.5).iteration_s(((tokens, 0),), 0, 0.0) == \
        DENSE.iteration_s(((tokens, 0),), 0, 0.0)


def test_the_fallback_uses_both():
    data = {"name": "r", "duration_s": 1, "hardware": {"profile": "h200_sxm", "gpus_per_instance": 8},
            "model": {"profile": "deepseek_v3"}, "serving": {"timing": "roofline"},
            "workload": {"agent_classes": {"c": {"arrival": {"kind": "population", "concurrent": 1},
                                                 "tools_prefix_tokens": 0, "initial_context_tokens": 1024,
                                                 "calls_per_session": 1, "output_tokens": 16}}}}
    timer = roofline_timer(scenario_from_dict(data))
    assert timer.layer_floor_s == KERNEL_FLOOR_S_PER_LAYER and timer.moe_efficiency == MOE_GEMM_EFFICIENCY
    assert timer.iteration_s((), 1, 1024) > timer.layers * KERNEL_FLOOR_S_PER_LAYER
