"""``serving.long_prefill_token_threshold``: a short prompt behind a long cold prefill gets part of
every iteration's budget instead of waiting for the long one to finish (vLLM's partial prefills)."""

import simpy

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.radix import RadixCache
from agentsim.cluster.serving.instance import ServingInstance
from agentsim.engine.loading import load_scenario
from tests.conftest import ROOT
from tests.test_serving import B, COST, request


def first_tokens(threshold: int | None) -> tuple[float, float]:
    env = simpy.Environment()
    cache = RadixCache(100_000, EVICTION_POLICIES.get("lru")())
    inst = ServingInstance(env, 0, cache, COST, B, 64, 8192, on_finish=lambda r: r.done.succeed(),
                           long_prefill_tokens=threshold)
    long, short = request(env, 0, 64_000, 2, keys_base=10**7), request(env, 1, 2048, 2, keys_base=2 * 10**7)
    inst.submit(long)
    inst.submit(short)
    env.run()
    return long.first_token_s, short.first_token_s


def test_short_prompt_no_longer_waits_for_the_long_prefill():
    long_fcfs, short_fcfs = first_tokens(None)
    long_shared, short_shared = first_tokens(2048)
    # First come first served: the short prompt gets no tokens until the long one has had all 64k.
    assert short_fcfs > long_fcfs
    # Capped at 2048 tokens each: both share the first iteration, the short one is done after it.
    assert short_shared < 0.1 * short_fcfs
    assert short_shared < long_shared
    # The long prefill is delayed only by the short one's tokens, not slowed beyond that.
    assert long_shared < 1.1 * long_fcfs


def test_a_lone_prefill_keeps_the_whole_budget():
    def alone(threshold):
        env = simpy.Environment()
        inst = ServingInstance(env, 0, RadixCache(100_000, EVICTION_POLICIES.get("lru")()), COST, B, 64, 8192,
                               on_finish=lambda r: r.done.succeed(), long_prefill_tokens=threshold)
        req = request(env, 0, 64_000, 2)
        inst.submit(req)
        env.run()
        return req.first_token_s, inst.iterations
    assert alone(2048) == alone(None)


def test_threshold_reaches_the_instances_from_the_scenario():
    from agentsim.engine.simulation import Simulation
    scenario = load_scenario(ROOT / "scenarios" / "coding-agents.yaml",
                             ["serving.long_prefill_token_threshold=1024", "duration_s=1s"])
    assert {inst.long_prefill_tokens for inst in Simulation(scenario).instances} == {1024}
