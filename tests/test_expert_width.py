"""Step tables at an expert-parallel width the databases lack, interpolated between the measured
powers of two either side (agentsim.hardware.timing.expert_width)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from agentsim.hardware.timing import select
from agentsim.hardware.timing.deployment import Deployment
from agentsim.hardware.timing.expert_width import interpolate, missing_expert_width, neighbour_widths
from agentsim.hardware.timing.tables import StepTables, TimingDataUnavailable, load_or_build
from agentsim.hardware.timing.tabulated import TabulatedTimer

DEP24 = Deployment(model="deepseek-ai/DeepSeek-R1", system="gb300", backend="sglang", tp=1, attention_dp=24, moe_tp=1,
                   moe_ep=24, gemm_quant="nvfp4", moe_quant="nvfp4", max_num_tokens=2048, max_num_seqs=64,
                   max_context_tokens=4096)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTSIM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(select, "_BUILT", {})
    return tmp_path / "timing"


def test_the_missing_width_is_read_from_the_package_message():
    message = ('perf database error: MoE data missing for MoeKey { quant: "nvfp4", distribution: "power_law_1.01", '
               'topk: 8, num_experts: 256, hidden_size: 7168, inter_size: 2048, moe_tp_size: 1, moe_ep_size: 24 }')
    assert missing_expert_width(message) == 24
    assert missing_expert_width('context MLA data missing for ContextKey { fmha_quant: "fp8" }') is None


def test_neighbours_are_the_powers_of_two_around_the_width_with_the_carrying_ranks_scaled():
    lower, upper, weight = neighbour_widths(DEP24)
    assert (lower.attention_dp, lower.moe_ep, upper.attention_dp, upper.moe_ep) == (16, 16, 32, 32)
    assert (lower.tp, upper.tp) == (1, 1) and weight == pytest.approx(0.5)
    tep20 = Deployment(model="m", system="gb200", backend="trtllm", tp=20, moe_tp=1, moe_ep=20)
    lower, upper, weight = neighbour_widths(tep20)
    assert (lower.tp, upper.tp, lower.moe_ep, upper.moe_ep) == (16, 32, 16, 32)
    assert weight == pytest.approx(0.75)  # 20 is a quarter of the way from 16 to 32
    # Two tensor ranks per attention-DP rank: the DP ranks carry the width (dp 12 -> 8 / 16).
    mixed = Deployment(model="m", system="gb200", backend="sglang", tp=2, attention_dp=12, moe_tp=1, moe_ep=24)
    lower, upper, _ = neighbour_widths(mixed)
    assert (lower.tp, lower.attention_dp, upper.attention_dp) == (2, 8, 16)
    assert neighbour_widths(Deployment(model="m", system="s", backend="b", tp=1, attention_dp=32, moe_tp=1, moe_ep=32)) is None
    assert neighbour_widths(Deployment(model="m", system="s", backend="b", tp=8, moe_tp=8, moe_ep=1)) is None
    # An expert split that does not cover the ranks is not guessed at.
    assert neighbour_widths(Deployment(model="m", system="s", backend="b", tp=1, attention_dp=24, moe_tp=2,
                                       moe_ep=24)) is None


def _tables(scale: float, tokens=(1, 2)) -> StepTables:
    return StepTables(list(tokens), [1, 2], [0, 1], [1, 2], [scale, 2 * scale], [[scale, scale], [scale, scale]],
                      [[scale, 0.0], [scale, scale]], [[scale, 3 * scale], [scale, scale]], f"db x{scale}")


def test_interpolation_mixes_every_entry_and_refuses_different_grids():
    mixed = interpolate(_tables(1.0), _tables(3.0), 0.25, "note")
    assert mixed.non_attention_s == [2.5, 5.0] and mixed.decode_s == [[2.5, 7.5], [2.5, 2.5]]
    assert mixed.decode_attention_s[0] == [2.5, 0.0] and mixed.provenance == "db x1.0; note"
    with pytest.raises(ValueError, match="different grids"):
        interpolate(_tables(1.0), _tables(3.0, tokens=(1, 4)), 0.5, "note")


def test_a_24_way_decode_pool_is_timed_between_the_16_and_32_way_data(cache):
    with pytest.raises(TimingDataUnavailable, match="moe_ep_size: 24"):  # the databases' own gap
        load_or_build(replace(DEP24, fmha_quant="bfloat16"))
    tables, notes = select._build_nearest(DEP24)
    assert "24-way expert parallelism interpolated between the measured 16- and 32-way" in notes[-1]
    assert "24-way" in tables.provenance
    lower, upper, _ = neighbour_widths(DEP24)
    timers = [TabulatedTimer(t, 1.0, 2048, attention_dp=dp) for t, dp in
              ((select._build_nearest(lower)[0], 16), (tables, 24), (select._build_nearest(upper)[0], 32))]
    for batch_per_rank, context in ((8, 1000), (48, 3000)):
        steps = [timer.iteration_s((), batch_per_rank * dp, batch_per_rank * dp * context)
                 for timer, dp in zip(timers, (16, 24, 32))]
        assert steps[1] == pytest.approx((steps[0] + steps[2]) / 2)
        assert steps[0] < steps[1] < steps[2]  # the databases' steps grow with the width
    assert np.all(np.isfinite(tables.chunk_attention_s))


def test_a_refusal_after_a_substitution_names_the_error_that_stopped_it(cache, monkeypatch):
    """The first error (FP8 attention) was substituted away; what is reported is the failure that
    ended the search (MoE data at a measured power-of-two width, so nothing to interpolate), with
    the substitution tried."""
    messages = iter(['context MLA data missing for ContextKey { fmha_quant: "fp8", kv_quant: "fp8" }',
                     'MoE data missing for MoeKey { quant: "int4_wo", topk: 8, moe_tp_size: 1, moe_ep_size: 32 }'])

    def refuse(deployment):
        raise TimingDataUnavailable(next(messages))

    monkeypatch.setattr(select, "load_or_build", refuse)
    with pytest.raises(TimingDataUnavailable) as refused:
        select._build_nearest(replace(DEP24, attention_dp=32, moe_ep=32))
    assert str(refused.value).startswith("MoE data missing") and "moe_ep_size: 32" in str(refused.value)
    assert "(after: attention timed with bfloat16 kernels" in str(refused.value)
