"""TensorRT-LLM's batch waiting: context requests held while others decode, to batch prompts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agentsim.cluster.serving.batch_wait import BatchWait
from agentsim.cluster.serving.recv_interval import RecvInterval, receive_gate
from agentsim.engine.loading import scenario_from_dict
from agentsim.engine.simulation import run_scenario
from agentsim.errors import InputError
from agentsim.experiments.benchmark_recipes import recipe_serving
from agentsim.experiments.benchmark_rows import read_rows
from tests.test_check_timing import SAMPLE


def _prompt(tokens: int) -> SimpleNamespace:
    return SimpleNamespace(prompt_tokens=tokens)


def test_held_for_the_timeout_counted_from_the_step_after_the_arrival():
    wait = BatchWait(20, 0.9, 16384)
    wait.unreceived.append(_prompt(1024))
    assert len(wait.take(0)) == 1 and not wait.unreceived   # nothing decodes: no wait
    wait.unreceived.append(_prompt(1024))
    # It arrived during step 4 of a stretch of 4 decoding requests (3 done): held for steps 5-24.
    assert wait.steps_until_receive(3, 4) == 24
    wait.on_decode_steps(24)
    assert wait.held == 20
    assert len(wait.take(4)) == 1 and wait.held == 0


def test_held_iterations_add_up_over_stretches_and_prefill_iterations():
    wait = BatchWait(5, 0.9, 16384)
    wait.unreceived.append(_prompt(1000))
    assert wait.take(8) == []                       # held from the next iteration on
    wait.on_prefill_iteration()                     # another request's prefill chunk ran: 1 held
    assert wait.steps_until_receive(0, 8) == 4      # 4 more
    wait.on_decode_steps(2)
    assert wait.take(8) == [] and wait.held == 3
    assert wait.steps_until_receive(0, 8) == 2
    wait.on_decode_steps(2)
    assert len(wait.take(8)) == 1
    with pytest.raises(ValueError):
        BatchWait(0, 0.5, 8192)
    with pytest.raises(ValueError):
        BatchWait(10, 0.0, 8192)


def test_enough_prompt_tokens_release_at_once():
    wait = BatchWait(40, 0.8, 8192)                 # releases at 6,554 scheduled tokens
    for _ in range(6):
        wait.unreceived.append(_prompt(1000))
    assert wait.take(64) == []                      # 6,000 + 64 decoding
    wait.unreceived.append(_prompt(1000))
    assert wait.steps_until_receive(0, 64) == 1
    assert len(wait.take(64)) == 7                  # 7,000 + 64
    assert wait.held == 0 and not wait.unreceived


def _trtllm_scenario(**serving) -> dict:
    """Four clients of 1k/1k on one H200 pair (TensorRT-LLM), lengths drawn so they drift apart."""
    return {
        "name": "batch-wait", "seed": 3, "duration_s": 60.0,
        "hardware": {"profile": "h200_sxm", "gpus_per_instance": 2, "instances": 1},
        "model": {"profile": "llama31_70b"},
        "cache": {"block_tokens": 16, "eviction": "lru"},
        "serving": {"engine": "trtllm", "max_num_seqs": 4, "max_num_batched_tokens": 16384,
                    "parallelism": {"tp": 2}, "router": "round_robin", **serving},
        "workload": {"global_system_prompt_tokens": 0, "agent_classes": {"client": {
            "arrival": {"kind": "population", "concurrent": 4, "ramp_s": 0, "restart_delay_s": 0},
            "tools_prefix_tokens": 0, "calls_per_session": 1, "tool_gap_s": 0, "human_turn_probability": 0,
            "appended_tokens": 0, "max_context_tokens": 2100,
            "initial_context_tokens": {"dist": "uniform", "low": 819.5, "high": 1024.5, "round": True,
                                       "min": 820, "max": 1024},
            "output_tokens": {"dist": "uniform", "low": 819.5, "high": 1024.5, "round": True,
                              "min": 820, "max": 1024}}}},
        "run": {"recompute_split": False},
    }


def _requests(data: dict):
    records = run_scenario(scenario_from_dict(data, source="test")).tables["requests"]
    return records[~records["rejected"]].sort_values("request_id").reset_index(drop=True)


def test_a_prompt_arriving_while_others_decode_waits_the_timeout():
    plain = _requests(_trtllm_scenario())
    held = _requests(_trtllm_scenario(batch_wait_timeout_iters=20, batch_wait_max_tokens_ratio=0.9))
    first, first_plain = held[held["arrival_s"] == 0], plain[plain["arrival_s"] == 0]
    # The first burst meets an idle engine: not held.
    assert len(first) == 4 and (first["ttft_s"].to_numpy() == first_plain["ttft_s"].to_numpy()).all()
    later, later_plain = held[held["arrival_s"] > 0], plain[plain["arrival_s"] > 0]
    assert len(later) >= 4 and len(later_plain) >= 4
    # Four 1k prompts never reach 0.9 x 16,384 tokens: each later one waits 20 decode steps.
    step_s = later["tpot_s"].median()
    extra_s = later["queue_wait_s"].mean() - later_plain["queue_wait_s"].mean()
    assert 15 * step_s < extra_s < 25 * step_s


def test_batch_waiting_is_a_trtllm_option_set_in_full():
    data = _trtllm_scenario(batch_wait_timeout_iters=20)
    with pytest.raises(InputError, match="batch_wait_max_tokens_ratio"):
        scenario_from_dict(data, source="test")
    data = _trtllm_scenario(batch_wait_timeout_iters=20, batch_wait_max_tokens_ratio=0.9)
    data["serving"]["engine"] = "vllm"
    with pytest.raises(InputError, match="batch_wait_timeout_iters"):
        scenario_from_dict(data, source="test")


def test_the_gate_is_chosen_without_attention_dp_on_prefilling_instances():
    scenario = scenario_from_dict(_trtllm_scenario(batch_wait_timeout_iters=20, batch_wait_max_tokens_ratio=0.9),
                                  source="test")
    assert isinstance(receive_gate(scenario.serving), BatchWait)
    assert receive_gate(scenario.serving, prefills=False) is None   # a decode worker schedules no prompts
    assert receive_gate(scenario_from_dict(_trtllm_scenario(), source="test").serving) is None
    assert not isinstance(receive_gate(scenario.serving), RecvInterval)


def test_the_recipes_that_set_it():
    rows = read_rows(SAMPLE)
    llama = rows[rows["id"].str.contains("llama_3_1_70b_b200_sxm_trtllm_fp4_agg_1024x1024_c64_tp2")].iloc[0].to_dict()
    assert recipe_serving(llama, 64, 2)["batch_wait_timeout_iters"] == 20
    assert "batch_wait_timeout_iters" not in recipe_serving(llama, 64, 8)          # TP 8 recipes leave it off
    assert "batch_wait_timeout_iters" not in recipe_serving({**llama, "osl": 8192}, 64, 2)
    deepseek = {**llama, "model_path": "deepseek-ai/DeepSeek-R1-0528", "precision": "fp8",
                "silicon_data_source": "x; measured=2026-02-05T00:00:00Z"}
    assert recipe_serving(deepseek, 64, 8)["batch_wait_max_tokens_ratio"] == 0.8
    assert "batch_wait_timeout_iters" not in recipe_serving(deepseek, 32, 8)       # below 64 clients
    assert "batch_wait_timeout_iters" not in recipe_serving(
        {**deepseek, "silicon_data_source": "x; measured=2025-12-15T00:00:00Z"}, 64, 8)   # before the recipe had it
