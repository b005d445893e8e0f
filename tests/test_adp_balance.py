"""TensorRT-LLM's attention-DP balancing (serving.adp_balance_timeout_iters): context requests wait
until every attention-DP rank has one, at most ``timeout_iters`` iterations, and go at once while a
rank has no generation request (agentsim.cluster.serving.recv_interval)."""

from __future__ import annotations

import pytest

from agentsim.cluster.serving.recv_interval import adp_balance, receive_gate
from agentsim.engine.loading import scenario_from_dict
from agentsim.engine.simulation import run_scenario
from agentsim.errors import InputError
from agentsim.experiments.benchmark_recipes import recipe_serving


def test_the_gate_counts_every_iteration_and_releases_when_each_rank_has_a_request():
    gate = adp_balance(60, 4)
    gate.unreceived.append("a")
    assert gate.take(2) == ["a"]                 # fewer running than ranks: a rank has no decode work
    gate.on_prefill_iteration()                   # a prefill iteration counts one, no receive point
    assert gate.counter == 1 and not gate.due
    gate.unreceived.extend(["b", "c"])
    assert gate.take(8) == []                     # 8 running, 2 waiting for 4 ranks: they wait
    assert gate.steps_until_receive(0, 8) == 59   # ...until the counter reaches 60
    assert gate.steps_until_receive(0, 3) == 1    # a rank without decode work takes them next step
    gate.unreceived.append("d")
    assert gate.take(8) == [] and gate.steps_until_receive(5, 8) == 59 - 5 + 5
    gate.unreceived.append("e")
    assert gate.steps_until_receive(5, 8) == 6    # the fourth arrived: after the step in progress
    assert gate.take(8) == ["b", "c", "d", "e"] and gate.counter == 0
    gate.unreceived.append("f")
    gate.on_decode_steps(59)
    assert not gate.due and gate.take(8) == []
    gate.on_decode_steps(1)
    assert gate.due and gate.take(8) == ["f"]     # the timeout


def _trtllm(timeout: int | None, dp: int = 4) -> dict:
    serving = {"engine": "trtllm", "timing": "roofline", "parallelism": {"tp": 1, "attention_dp": dp},
               "max_batch_requests": 64}
    if timeout is not None:
        serving["adp_balance_timeout_iters"] = timeout
    return {"name": "adp", "seed": 3, "duration_s": 40,
            "hardware": {"profile": "h200_sxm", "gpus_per_instance": 4, "kv_capacity_bytes": "100GB"},
            "model": {"profile": "llama31_8b"}, "serving": serving,
            "workload": {"agent_classes": {"c": {
                "arrival": {"kind": "population", "concurrent": 16}, "tools_prefix_tokens": 0,
                "initial_context_tokens": {"dist": "uniform", "low": 800, "high": 1024, "round": True},
                "calls_per_session": 1000, "tool_gap_s": 0,
                "appended_tokens": {"dist": "uniform", "low": 800, "high": 1024, "round": True},
                "output_tokens": {"dist": "uniform", "low": 200, "high": 256, "round": True}}}}}


def _later_waits(data: dict):
    records = run_scenario(scenario_from_dict(data, source="test")).tables["requests"]
    records = records[~records["rejected"] & (records["arrival_s"] > 0)]
    return records["queue_wait_s"], records["tpot_s"]


def test_balancing_holds_context_requests_for_at_most_the_timeout():
    plain_wait, _ = _later_waits(_trtllm(None))
    balanced_wait, tpot = _later_waits(_trtllm(60))
    assert len(balanced_wait) > 50
    # Arrivals one at a time wait for three more (or the timeout): tens of steps on average.
    assert balanced_wait.mean() > plain_wait.mean() + 5 * tpot.mean()
    # Never much more than the timeout's 60 iterations (a step is at most about a TPOT).
    assert balanced_wait.max() <= plain_wait.max() + 61 * tpot.max()


def test_one_rank_or_a_decode_worker_has_no_gate():
    data = _trtllm(60, dp=1)
    data["serving"]["parallelism"]["tp"] = 4
    one_rank = scenario_from_dict(data, source="test")
    assert receive_gate(one_rank.serving) is None
    four = scenario_from_dict(_trtllm(60), source="test")
    assert receive_gate(four.serving) is not None and receive_gate(four.serving, prefills=False) is None


def test_it_is_a_tensorrt_llm_option():
    data = _trtllm(60)
    data["serving"]["engine"] = "vllm"
    with pytest.raises(InputError, match="adp_balance_timeout_iters"):
        scenario_from_dict(data, source="test")


def test_the_recipes_with_attention_dp_set_it():
    row = {"backend": "trtllm", "model_path": "deepseek-ai/DeepSeek-R1-0528", "isl": 1024,
           "silicon_data_source": "source_file=2026-04-06.csv; measured=2026-04-06T00:00:00.000Z"}
    assert recipe_serving(row, 64, 1, attention_dp=8)["adp_balance_timeout_iters"] == 60
    assert "adp_balance_timeout_iters" not in recipe_serving(row, 64, 8)
    assert recipe_serving({**row, "model_path": "openai/gpt-oss-120b"}, 64, 1, 2)["adp_balance_timeout_iters"] == 50
    assert "adp_balance_timeout_iters" not in recipe_serving({**row, "model_path": "meta-llama/Llama-3.1-70B"}, 64, 1, 2)
