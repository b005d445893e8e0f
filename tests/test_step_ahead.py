"""Scheduling one step ahead (vLLM async scheduling, SGLang's overlap schedule, TensorRT-LLM's
overlap scheduler): a request arriving during a step joins the step after next."""

from __future__ import annotations

import math

import pytest
import simpy

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.radix import RadixCache
from agentsim.cluster.serving.instance import ServingInstance
from agentsim.cluster.serving.step_ahead import StepAhead
from agentsim.config.serving import ServingConfig
from agentsim.engine.loading import load_scenario
from tests.conftest import ROOT
from tests.test_serving import B, request

STEP_S = 0.010      # every decode step
PREFILL_S = 0.030   # every iteration with a prefill chunk (whatever else is in it)


class ConstantSteps:
    """Steps of fixed length, so that the expected times are exact."""

    kv_bytes_per_token = 1000.0

    def iteration_s(self, chunks, n_decode, decode_context_tokens):
        return PREFILL_S if chunks else STEP_S

    def decode_stretch_s(self, n_decode, context_tokens, steps):
        return steps * STEP_S

    def decode_steps_within(self, n_decode, context_tokens, elapsed_s):
        return int(math.floor(elapsed_s / STEP_S + 1e-9))

    def prefill_s(self, new_tokens, context_tokens):
        return PREFILL_S


def _run(schedule_ahead: bool, second_at_s: float):
    """One request decoding 100 tokens from t=0; a second arrives at ``second_at_s``."""
    env = simpy.Environment()
    inst = ServingInstance(env, 0, RadixCache(100_000, EVICTION_POLICIES.get("lru")()), ConstantSteps(), B, 64, 8192,
                           on_finish=lambda r: r.done.succeed(), schedule_ahead=schedule_ahead)
    first = request(env, 0, 4 * B, 100)
    inst.submit(first)
    second = request(env, 1, 4 * B, 4, keys_base=10**7)

    def later():
        yield env.timeout(second_at_s)
        second.arrival_s = env.now
        inst.submit(second)

    env.process(later())
    env.run()
    return first, second


def test_an_arrival_during_a_decode_step_joins_the_step_after_next():
    # The first request's prefill ends at 30 ms, then decode steps of 10 ms: the second arrives
    # 4 ms into the step 60-70 ms.
    _, waits_for_step = _run(False, 0.064)
    _, one_ahead = _run(True, 0.064)
    # Without: it joins after the step in progress (70 ms) and its prefill iteration ends at 100 ms.
    assert waits_for_step.first_token_s == pytest.approx(0.070 + PREFILL_S)
    # One step ahead: the step 70-80 ms was formed at 60 ms without it, so it joins at 80 ms.
    assert one_ahead.first_token_s == pytest.approx(0.080 + PREFILL_S)


def test_an_arrival_during_a_prefill_iteration_waits_one_more_step():
    # Arrives during the first request's prefill (0-30 ms): the decode step 30-40 ms was formed
    # at 0 ms, so it joins at 40 ms instead of 30 ms.
    _, waits = _run(False, 0.010)
    _, ahead = _run(True, 0.010)
    assert waits.first_token_s == pytest.approx(0.030 + PREFILL_S)
    assert ahead.first_token_s == pytest.approx(0.040 + PREFILL_S)


def test_an_idle_engine_schedules_an_arrival_at_once():
    env = simpy.Environment()
    inst = ServingInstance(env, 0, RadixCache(100_000, EVICTION_POLICIES.get("lru")()), ConstantSteps(), B, 64, 8192,
                           on_finish=lambda r: r.done.succeed(), schedule_ahead=True)
    req = request(env, 0, 4 * B, 3)
    inst.submit(req)
    env.run()
    assert req.first_token_s == pytest.approx(PREFILL_S)
    assert req.finish_s == pytest.approx(PREFILL_S + 2 * STEP_S)


def test_release_keeps_arrivals_of_the_step_in_progress():
    ahead = StepAhead()
    ahead.last_step_start_s = 1.0
    ahead.arrive("a", 0.5)
    ahead.arrive("b", 1.5)
    assert len(ahead) == 2
    assert ahead.release(idle=False) == ["a"]     # "b" came after the step formed at 1.0
    assert ahead.release(idle=False) == []
    assert ahead.release(idle=True) == ["b"]      # nothing runs: scheduled at once


def test_it_is_every_engines_default_and_can_be_turned_off():
    assert all(ServingConfig(engine=e).schedules_ahead() for e in ("vllm", "sglang", "trtllm"))
    assert not ServingConfig(schedule_ahead=False).schedules_ahead()
    from agentsim.engine.simulation import Simulation
    scenario = load_scenario(ROOT / "scenarios" / "coding-agents.yaml", ["serving.schedule_ahead=false", "duration_s=1s"])
    assert all(inst.ahead is None for inst in Simulation(scenario).instances)
    scenario = load_scenario(ROOT / "scenarios" / "coding-agents.yaml", ["duration_s=1s"])
    assert all(inst.ahead is not None for inst in Simulation(scenario).instances)
