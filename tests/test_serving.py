"""Serving instance: timing against the roofline, batching behaviour, same-time event order."""

import math

import pytest
import simpy

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.radix import RadixCache
from agentsim.cluster.costmodel import RooflineCostModel
from agentsim.cluster.serving.instance import ServingInstance
from agentsim.cluster.request import LLMRequest

COST = RooflineCostModel(active_params=37e9, total_params=671e9, bytes_per_param=1.0, attn_coeff=2.5e6,
                         kv_bytes_per_token=35136, flops_per_s=4 * 5e15 * 0.35, bytes_per_s=4 * 8e12 * 0.7)
B = 64


def make_instance(env, capacity_blocks=100_000, max_batch=64, chunk=8192):
    finished = []
    cache = RadixCache(capacity_blocks, EVICTION_POLICIES.get("lru")())
    inst = ServingInstance(env, 0, cache, COST, B, max_batch, chunk, on_finish=lambda r: (finished.append(r), r.done.succeed()))
    return inst, finished


def request(env, rid, prompt_tokens, output_tokens, keys_base=0, shared=0):
    keys = list(range(1, shared + 1)) + [keys_base + i for i in range(prompt_tokens // B - shared)]
    total = keys + [keys_base + 10**6 + i for i in range((prompt_tokens + output_tokens) // B - len(keys))]
    return LLMRequest(request_id=rid, session_id=rid, agent_class="t", depth=0, call_index=0, arrival_s=env.now,
                      prompt_tokens=prompt_tokens, output_tokens=output_tokens, prompt_blocks=len(keys),
                      total_keys=total, done=env.event())


def test_cold_prefill_matches_roofline():
    env = simpy.Environment()
    inst, finished = make_instance(env, chunk=1_000_000)
    req = request(env, 0, 100_000, 1)
    inst.submit(req)
    env.run()
    expected = COST.prefill_flops(100_000, 0) / COST.flops_per_s
    assert req.first_token_s == pytest.approx(expected, rel=1e-9)
    # The hardware reference's worked example: 3.24e16 FLOPs for a 100K cold prompt of DeepSeek-V3.
    assert COST.prefill_flops(100_000, 0) == pytest.approx(3.24e16, rel=0.01)


def test_cached_prefix_skips_prefill_compute():
    env = simpy.Environment()
    inst, finished = make_instance(env)
    first = request(env, 0, 50_000, 10, keys_base=10**7, shared=700)
    inst.submit(first)
    env.run()
    second = request(env, 1, 50_048, 10, keys_base=2 * 10**7, shared=700)
    start = env.now
    inst.submit(second)
    env.run()
    assert second.hit_tokens == 700 * B
    cold = COST.prefill_flops(50_048, 0) / COST.flops_per_s
    assert second.first_token_s - start < 0.5 * cold


def test_decode_stretch_matches_per_step_sum():
    env = simpy.Environment()
    inst, _ = make_instance(env)
    reqs = [request(env, i, 1000, 50 + 10 * i, keys_base=(i + 1) * 10**7) for i in range(3)]
    for r in reqs:
        inst.submit(r)
    env.run()
    # Recompute by explicit iteration: one prefill iteration (all three chunks), then decode steps.
    t = COST.iteration_s([(1000, 0)] * len(reqs), 0, 0)
    contexts = [1001, 1001, 1001]
    remaining = [r.output_tokens - 1 for r in reqs]
    finish = [math.nan] * 3
    while any(x > 0 for x in remaining):
        active = [i for i in range(3) if remaining[i] > 0]
        ctx = sum(contexts[i] for i in active)
        t += COST.decode_stretch_s(len(active), ctx, 1)
        for i in active:
            remaining[i] -= 1
            contexts[i] += 1
            if remaining[i] == 0:
                finish[i] = t
    for r, f in zip(reqs, finish):
        assert r.finish_s == pytest.approx(f, rel=1e-9)


def test_arrival_during_decode_joins_at_a_step_boundary():
    env = simpy.Environment()
    inst, _ = make_instance(env)
    long = request(env, 0, 1000, 400, keys_base=10**7)
    inst.submit(long)

    def late():
        yield env.timeout(0.5)
        late_req = request(env, 1, 1000, 5, keys_base=2 * 10**7)
        inst.submit(late_req)
        yield late_req.done
        assert late_req.admitted_s >= 0.5
        # Admitted at most one decode step after its arrival.
        assert late_req.admitted_s - 0.5 < COST.decode_stretch_s(1, 2000, 1) + 1e-9

    proc = env.process(late())
    env.run()
    assert proc.ok and long.finish_s > 0


def test_same_time_arrivals_are_served_in_submission_order():
    """Explicit same-time event order: requests submitted at the same instant are admitted FCFS,
    prefill chunks are handed out in that order, and a prefix being computed by an earlier
    request is not a hit for a simultaneous one (blocks are committed when a request finishes)."""
    env = simpy.Environment()
    inst, finished = make_instance(env, chunk=3000, max_batch=2)
    reqs = [request(env, i, 2048, 4, keys_base=10**7 * (i + 1), shared=16) for i in range(3)]
    for r in reqs:
        inst.submit(r)
    env.run()
    assert [r.request_id for r in finished] == [0, 1, 2]
    assert reqs[0].admitted_s == reqs[1].admitted_s == 0.0       # both fit in the batch of 2
    assert reqs[2].admitted_s >= reqs[0].finish_s                  # third waits for a slot
    assert reqs[0].first_token_s < reqs[1].first_token_s           # FCFS chunk budget
    assert reqs[0].hit_tokens == 0 and reqs[1].hit_tokens == 0     # nothing committed yet
    assert reqs[2].hit_tokens == 16 * B                            # committed by then


def test_request_larger_than_the_cache_is_rejected_not_hung():
    env = simpy.Environment()
    inst, finished = make_instance(env, capacity_blocks=10)
    big = request(env, 0, 64 * 20, 4, keys_base=10**7)
    small = request(env, 1, 64 * 2, 4, keys_base=2 * 10**7)
    inst.submit(big)
    inst.submit(small)
    env.run()
    assert big.rejected and not small.rejected
    assert [r.request_id for r in finished] == [0, 1]


def test_decode_steps_within_inverts_stretch():
    for n, ctx in [(1, 1000), (7, 50_000), (64, 3_000_000)]:
        for steps in [0, 1, 2, 10, 333]:
            t = COST.decode_stretch_s(n, ctx, steps)
            assert COST.decode_steps_within(n, ctx, t) == steps
            if steps:
                assert COST.decode_steps_within(n, ctx, t - 1e-9) == steps - 1


def test_step_timer_adapters_equal_the_flops_form():
    """The chunk-list interface sums the chunks' FLOPs in order: the same float as before."""
    chunks = [(1000, 0), (517, 12_345), (3, 99_000)]
    flops = 0.0
    for n, ctx in chunks:
        flops += COST.prefill_flops(n, ctx)
    assert COST.iteration_s(chunks, 7, 40_000) == COST.flops_iteration_s(flops, 3, 7, 40_000)
    assert COST.iteration_s([], 7, 40_000) == COST.flops_iteration_s(0.0, 0, 7, 40_000)
    assert COST.prefill_s(4096, 8192) == COST.prefill_flops(4096, 8192) / COST.flops_per_s
    assert COST.iteration_s(chunks, 0, 0) > COST.iteration_s(chunks[:1], 0, 0)
