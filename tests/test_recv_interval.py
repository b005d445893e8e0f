"""SGLang's scheduler_recv_interval: arrivals reach the scheduler every N decode steps."""

from __future__ import annotations

import pytest

from agentsim.cluster.serving.batch_wait import BatchWait
from agentsim.cluster.serving.recv_interval import RecvInterval, adp_balance, receive_gate
from agentsim.engine.loading import scenario_from_dict
from agentsim.engine.simulation import run_scenario
from agentsim.errors import InputError
from agentsim.experiments.benchmark_clients import INFERENCEX
from agentsim.experiments.benchmark_rows import read_rows, row_scenario
from agentsim.experiments.timing_check import _with_client_lengths, _with_engine_kv
from tests.test_check_timing import SAMPLE


def test_receive_points_are_every_n_decode_steps_and_after_a_prefill():
    recv = RecvInterval(10)
    recv.unreceived.append("a")
    assert recv.take(0) == ["a"]            # an idle engine receives at once
    recv.on_prefill_iteration()
    assert recv.due and recv.steps_until_receive() == 10
    recv.on_decode_steps(4)                          # 4 steps since the receive after the prefill
    assert not recv.due and recv.counter == 4
    recv.unreceived.append("b")
    assert recv.take(1) == []               # not a receive point: it waits
    assert recv.steps_until_receive() == 6           # the stretch ends 6 steps on
    assert recv.steps_until_receive(done_steps=7) == 16  # arrived after step 7 of it: the point after
    recv.on_decode_steps(6)
    assert recv.due and recv.take(1) == ["b"] and recv.counter == 0
    with pytest.raises(ValueError):
        RecvInterval(0)


def _sglang_scenario(interval: int | None) -> dict:
    frame = read_rows(SAMPLE)
    row = frame[(frame["mode"] == "agg") & (frame["backend"] == "sglang")].iloc[0].to_dict()
    data = _with_engine_kv(_with_client_lengths(row_scenario(row), INFERENCEX, int(row["isl"]), int(row["osl"])))
    if interval is not None:
        data["serving"] = {**data["serving"], "scheduler_recv_interval": interval}
    return {**data, "duration_s": 60.0}


def _requests(data: dict):
    records = run_scenario(scenario_from_dict(data, source="test")).tables["requests"]
    return records[~records["rejected"]].sort_values("request_id").reset_index(drop=True)


def test_an_interval_of_one_is_the_engine_without_it():
    default, one = _requests(_sglang_scenario(None)), _requests(_sglang_scenario(1))
    assert len(default) > 8
    assert default[["arrival_s", "ttft_s", "finish_s"]].equals(one[["arrival_s", "ttft_s", "finish_s"]])


def test_arrivals_during_decode_wait_for_the_receive_point():
    immediate, batched = _requests(_sglang_scenario(1)), _requests(_sglang_scenario(30))
    # The first burst arrives at an idle engine: received at once either way.
    first = batched["arrival_s"] == 0
    assert first.any() and (batched.loc[first, "ttft_s"].to_numpy() == immediate.loc[first, "ttft_s"].to_numpy()).all()
    # Later requests arrive while the others decode (their lengths differ): they wait up to 30 steps.
    later, later_immediate = batched.loc[~first], immediate.loc[immediate["arrival_s"] > 0]
    assert len(later) > 4
    # About half an interval of decode steps more on average (a step is at most a TPOT, which
    # also carries the prefill pauses), and never more than one interval more.
    extra_s = later["queue_wait_s"].mean() - later_immediate["queue_wait_s"].mean()
    assert extra_s > 3 * later["tpot_s"].mean()
    assert later["queue_wait_s"].max() <= later_immediate["queue_wait_s"].max() + 31 * later["tpot_s"].max()


def test_the_interval_is_an_sglang_option():
    data = _sglang_scenario(10)
    data["serving"] = {**data["serving"], "engine": "vllm"}
    with pytest.raises(InputError, match="scheduler_recv_interval"):
        scenario_from_dict(data, source="test")


def test_with_mtp_the_gates_count_engine_iterations_not_output_tokens():
    # SGLang counts receive intervals (and TensorRT-LLM its balancing and batch-wait timeouts) in
    # engine iterations; an instance steps one output token at a time, and an MTP iteration with
    # 3 draft tokens emits 1 + 0.85 + 0.85 x 0.3 = 2.105 of them.
    data = _sglang_scenario(30)
    plain = receive_gate(scenario_from_dict(data, source="test").serving)
    data["serving"] = {**data["serving"], "speculative_decoding": {"draft_tokens": 3}}
    mtp = receive_gate(scenario_from_dict(data, source="test").serving)
    assert plain.interval_steps == 30 and mtp.interval_steps == round(30 * 2.105) == 63
    balance = adp_balance(60, 4, steps_per_iteration=2.105)
    assert balance.interval_steps == 126 and balance.prefill_steps == 2
    balance.on_prefill_iteration()
    assert balance.counter == 2          # a prefill iteration is one iteration: two token steps
    wait = BatchWait(40, 0.8, 8192, prefill_steps=2)
    wait.unreceived.append(object())
    wait._count_from = 0
    wait.on_prefill_iteration()
    assert wait.held == 2
