"""Multi-token prediction on the decode steps (``serving.speculative_decoding``), timed by
aiconfigurator-core's rule (agentsim.hardware.timing.speculative)."""

from __future__ import annotations

import pytest

from agentsim.engine.loading import scenario_from_dict
from agentsim.engine.simulation import run_scenario
from agentsim.errors import InputError
from agentsim.hardware.timing import linear_decode
from agentsim.hardware.timing.select import build_timer
from agentsim.hardware.timing.speculative import SpeculativeDecodeTimer, accepted_per_iteration


class LinearTimer:
    """A decode step of ``fixed + per_seq x n + per_token x K`` seconds (n sequences, summed context K)."""

    kv_bytes_per_token = 100.0
    source = "test"

    def __init__(self, fixed=0.010, per_seq=0.0001, per_token=1e-8):
        self.fixed, self.per_seq, self.per_token = fixed, per_seq, per_token

    def iteration_s(self, chunks, n_decode, ctx):
        return self.fixed + self.per_seq * n_decode + self.per_token * ctx + sum(1e-5 * new for new, _ in chunks)

    def decode_stretch_s(self, n, ctx, steps):
        a = self.iteration_s((), n, ctx)
        return linear_decode.stretch_s(a, self.per_token * n, steps)

    def decode_steps_within(self, n, ctx, elapsed):
        return linear_decode.steps_within(self.iteration_s((), n, ctx), self.per_token * n, elapsed)

    def prefill_s(self, new, ctx):
        return 1e-5 * new


def test_accepted_tokens_follow_aiconfigurators_expectation():
    rates = (0.85, 0.3, 0.0, 0.0, 0.0)
    assert accepted_per_iteration(1, rates) == pytest.approx(0.85)
    assert accepted_per_iteration(2, rates) == pytest.approx(0.85 + 0.85 * 0.3)
    assert accepted_per_iteration(3, rates) == pytest.approx(0.85 + 0.85 * 0.3)   # position 3 never accepted
    assert accepted_per_iteration(2, (0.5, 1.0)) == pytest.approx(1.0)


def test_a_decode_step_is_a_verify_iteration_of_width_nextn_plus_one_per_emitted_token():
    base = LinearTimer()
    timer = SpeculativeDecodeTimer(base, draft_tokens=1, accept_rates=(0.85, 0.3), layers=61)
    n, ctx = 32, 32 * 9000
    iteration = base.iteration_s((), 2 * n, ctx) * (61 + 1) / 61      # 2 tokens verified per sequence
    assert timer.iteration_s((), n, ctx) == pytest.approx(iteration / 1.85)
    assert timer.decode_stretch_s(n, ctx, 1) == pytest.approx(iteration / 1.85)
    # 1,000 output tokens take 1000 / 1.85 iterations (the context growth included).
    stretch = timer.decode_stretch_s(n, ctx, 1000)
    assert stretch == pytest.approx(base.decode_stretch_s(2 * n, ctx, 1) * 62 / 61 / 1.85 * 1000, rel=0.05)
    assert stretch < base.decode_stretch_s(n, ctx, 1000)             # MTP is faster per token here
    # The inverse agrees with the stretch.
    steps = timer.decode_steps_within(n, ctx, stretch * 0.5)
    assert timer.decode_stretch_s(n, ctx, steps) <= stretch * 0.5 < timer.decode_stretch_s(n, ctx, steps + 1)
    # Prefill is the base's; attributes fall through.
    assert timer.prefill_s(1000, 0) == base.prefill_s(1000, 0) and timer.source == "test"
    # With no draft accepted MTP costs more per token than plain decoding.
    never = SpeculativeDecodeTimer(base, draft_tokens=2, accept_rates=(0.0,), layers=61)
    assert never.decode_stretch_s(n, ctx, 100) > base.decode_stretch_s(n, ctx, 100)


def _scenario(speculative=None):
    serving = {"engine": "trtllm", "timing": "roofline", "max_num_seqs": 8}
    if speculative is not None:
        serving["speculative_decoding"] = speculative
    return {"name": "mtp", "seed": 1, "duration_s": 30.0,
            "hardware": {"profile": "gb300_nvl72", "gpus_per_instance": 8, "instances": 1},
            "model": {"profile": "deepseek_v3"}, "serving": serving,
            "workload": {"global_system_prompt_tokens": 0, "agent_classes": {"client": {
                "arrival": {"kind": "population", "concurrent": 8, "ramp_s": 0}, "tools_prefix_tokens": 0,
                "initial_context_tokens": 1024, "calls_per_session": 1, "tool_gap_s": 0,
                "human_turn_probability": 0, "appended_tokens": 0, "output_tokens": 256,
                "max_context_tokens": 2048}}},
            "run": {"belady_headroom": False, "check_invariants": True}}


def test_a_run_with_mtp_decodes_faster_per_token_and_keeps_its_invariants():
    plain = run_scenario(scenario_from_dict(_scenario())).tables["requests"]
    mtp = run_scenario(scenario_from_dict(_scenario({"draft_tokens": 3}))).tables["requests"]
    assert len(mtp) > 0 and (mtp["output_tokens"] == 256).all()
    ratio = mtp["tpot_s"].median() / plain["tpot_s"].median()
    # The run's TPOT moves as the step timers say: 8 sequences verifying 4 tokens each, 2.1 emitted.
    with_mtp, _ = build_timer(scenario_from_dict(_scenario({"draft_tokens": 3})))
    without, _ = build_timer(scenario_from_dict(_scenario()))
    expected = with_mtp.decode_stretch_s(8, 8 * 1100, 255) / without.decode_stretch_s(8, 8 * 1100, 255)
    assert isinstance(with_mtp, SpeculativeDecodeTimer) and expected < 1
    assert ratio == pytest.approx(expected, rel=0.05)
    again = run_scenario(scenario_from_dict(_scenario({"draft_tokens": 3}))).tables["requests"]
    assert again["tpot_s"].tolist() == mtp["tpot_s"].tolist()


@pytest.mark.parametrize("spec, where", [({"draft_tokens": 0}, "draft_tokens"),
                                         ({"draft_tokens": 2, "accept_rates": [0.9, 1.5]}, "accept_rates")])
def test_bad_speculative_settings_name_their_path(spec, where):
    with pytest.raises(InputError) as info:
        scenario_from_dict(_scenario(spec))
    assert "speculative_decoding" in info.value.render() and where in info.value.render()
