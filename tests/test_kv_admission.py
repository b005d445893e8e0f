"""Engine-style KV admission (cluster/serving/kv_admission.py, kv_growth.py): on-demand blocks,
preemption by recompute or swap, SGLang's new-token ratio, TensorRT-LLM's no-evict guarantee."""

import simpy

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.radix import RadixCache
from agentsim.cluster.costmodel import RooflineCostModel
from agentsim.cluster.request import LLMRequest
from agentsim.cluster.serving.instance import ServingInstance
from agentsim.cluster.serving.kv_admission import KV_ADMISSION

COST = RooflineCostModel(active_params=37e9, total_params=671e9, bytes_per_param=1.0, attn_coeff=2.5e6,
                         kv_bytes_per_token=35136, flops_per_s=4 * 5e15 * 0.35, bytes_per_s=4 * 8e12 * 0.7)
B = 64


def make_instance(env, capacity_blocks, rule="vllm", max_batch=64, chunk=8192, cache=None, **extra):
    finished = []
    if cache is None:
        cache = RadixCache(capacity_blocks, EVICTION_POLICIES.get("lru")())
    inst = ServingInstance(env, 0, cache, COST, B, max_batch, chunk, check_invariants=True,
                           on_finish=lambda r: (finished.append(r), r.done.succeed()),
                           kv_rule=KV_ADMISSION.get(rule)(None, B), **extra)
    return inst, finished


def request(env, rid, prompt_tokens, output_tokens, prefix_of=None):
    """A request with private keys, or sharing the prompt blocks of ``prefix_of`` first."""
    base = (rid + 1) * 10**7
    shared = list(prefix_of.prompt_keys) if prefix_of is not None else []
    keys = shared + [base + i for i in range(prompt_tokens // B - len(shared))]
    total = keys + [base + 10**6 + i for i in range((prompt_tokens + output_tokens) // B - len(keys))]
    return LLMRequest(request_id=rid, session_id=rid, agent_class="t", depth=0, call_index=0, arrival_s=env.now,
                      prompt_tokens=prompt_tokens, output_tokens=output_tokens, prompt_keys=keys,
                      total_keys=total, done=env.event())


def submit_at(env, inst, t_s, req):
    def go():
        yield env.timeout(t_s)
        req.arrival_s = env.now
        inst.submit(req)
    env.process(go())


def test_request_preempted_mid_prefill_resumes_its_whole_prompt():
    # A decodes while B prefills slowly (8-token chunk budget); A's growth runs out of blocks
    # and preempts B, the newest, before B's prefill is done. B must then prefill the rest of
    # its prompt, not resume as if the tokens it had computed were its whole prompt (which
    # left it committing far more blocks than it held at completion).
    env = simpy.Environment()
    inst, finished = make_instance(env, capacity_blocks=42, chunk=8)
    a = request(env, 0, 10 * B, 32 * B)
    b = request(env, 1, 30 * B, 10)
    inst.submit(a)
    submit_at(env, inst, 0.05, b)
    env.run()
    assert sorted(r.request_id for r in finished) == [0, 1] and not a.rejected and not b.rejected
    assert a.preemptions == 0 and b.preemptions >= 1
    # B was preempted before its first token, part way through its prompt.
    assert b.resume_output_left == b.output_tokens
    assert 0 < b.resume_computed_tokens < b.prompt_tokens
    assert b.resume_tokens == b.prompt_tokens
    assert b.hit_tokens + b.prefilled_tokens == b.prompt_tokens
    assert b.first_token_s > b.admitted_s
    assert inst.kv_stats["preemptions"] == inst.kv_stats["recompute_preemptions"] == b.preemptions
    inst.cache.check_invariants()
    assert inst.cache.reserved_blocks == 0


def test_trtllm_counts_the_cached_prefix_it_pins_and_never_preempts():
    # X leaves 20 cached, unpinned blocks. A (10 prompt + 20 output blocks) runs; B's prompt
    # is X's 20 blocks plus 2, with 10 blocks of output. Its own new blocks fit beside A's debt,
    # but pinning the prefix takes 20 evictable blocks away: admitting B then would leave A
    # short, so B must wait.
    def run(rule):
        env = simpy.Environment()
        inst, finished = make_instance(env, capacity_blocks=50, rule=rule)
        x = request(env, 0, 20 * B, 1)
        a = request(env, 1, 10 * B, 20 * B)
        b = request(env, 2, 22 * B, 10 * B, prefix_of=x)
        inst.submit(x)
        submit_at(env, inst, 1.0, a)
        submit_at(env, inst, 1.1, b)
        env.run()
        assert len(finished) == 3 and not any(r.rejected for r in finished)
        return inst, a, b

    inst, a, b = run("trtllm")
    assert inst.kv_stats["preemptions"] == 0
    assert b.hit_tokens == 20 * B
    assert b.admitted_s >= a.finish_s        # held back until A no longer needs the blocks
    assert b.queue_kv_s > 0
    # The vllm rule admits B at once and pays with a preemption of it.
    inst, a, b = run("vllm")
    assert b.admitted_s < a.finish_s and inst.kv_stats["preemptions"] >= 1
