"""Engine-style KV admission (cluster/serving/kv_admission.py, kv_growth.py): on-demand blocks,
preemption by recompute or swap, SGLang's new-token ratio, TensorRT-LLM's no-evict guarantee."""

import pytest
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
                      prompt_tokens=prompt_tokens, output_tokens=output_tokens, prompt_blocks=len(keys),
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
    # Its re-admission hits what it had computed itself: recompute saved, not prefix reuse.
    assert b.hit_tokens == 0
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


def _counting_timer(prefilled: list):
    """The roofline timer, recording every prefill chunk's tokens in ``prefilled``."""

    class CountingTimer:
        kv_bytes_per_token = COST.kv_bytes_per_token

        def iteration_s(self, chunks, n_decode, decode_context_tokens):
            prefilled.extend(n for n, _ in chunks)
            return COST.iteration_s(chunks, n_decode, decode_context_tokens)

        def __getattr__(self, name):
            return getattr(COST, name)

    return CountingTimer


def test_preemption_recomputes_as_extra_prefill():
    # Two long decodes that cannot both complete in 40 blocks: the newer is preempted, and what
    # it had computed and lost is prefilled again, visible in the prefill work the timer saw.
    prefilled = []
    CountingTimer = _counting_timer(prefilled)
    env = simpy.Environment()
    finished = []
    inst = ServingInstance(env, 0, RadixCache(40, EVICTION_POLICIES.get("lru")()), CountingTimer(), B, 64, 8192,
                           on_finish=lambda r: (finished.append(r), r.done.succeed()), check_invariants=True,
                           kv_rule=KV_ADMISSION.get("vllm")(None, B))
    a = request(env, 0, 10 * B, 20 * B)
    b = request(env, 1, 10 * B, 20 * B)
    inst.submit(a)
    inst.submit(b)
    env.run()
    assert len(finished) == 2
    assert a.preemptions == 0 and b.preemptions >= 1
    assert b.preempted_recompute_tokens > 0
    assert inst.kv_stats["recompute_preemptions"] == inst.kv_stats["preemptions"] == b.preemptions
    # Every prompt token once, plus the recomputed tokens, plus the one token each re-prefill
    # computes to produce the next output token (it always computes at least one).
    assert sum(prefilled) >= a.prompt_tokens + b.prompt_tokens + b.preempted_recompute_tokens
    assert b.hit_tokens + b.prefilled_tokens == b.prompt_tokens
    # Without preemption (blocks reserved up front) B waits for A instead and computes nothing twice.
    prefilled.clear()
    env = simpy.Environment()
    inst = ServingInstance(env, 0, RadixCache(40, EVICTION_POLICIES.get("lru")()), CountingTimer(), B, 64, 8192,
                           on_finish=lambda r: r.done.succeed(), check_invariants=True,
                           kv_rule=KV_ADMISSION.get("reserve_full")(None, B))
    a2, b2 = request(env, 0, 10 * B, 20 * B), request(env, 1, 10 * B, 20 * B)
    inst.submit(a2)
    inst.submit(b2)
    env.run()
    assert sum(prefilled) == a2.prompt_tokens + b2.prompt_tokens and b2.preemptions == 0
    assert b2.admitted_s >= a2.finish_s


def test_sglang_ratio_decays_per_decode_step_and_is_reestimated_on_retraction():
    rule = KV_ADMISSION.get("sglang")(None, B)
    assert rule.ratio == 0.7
    rule.on_decode_steps(100)
    assert rule.ratio == pytest.approx(0.6)
    rule.on_decode_steps(10**6)
    assert rule.ratio == 0.1                     # floored at min_new_token_ratio
    rule.on_idle()
    assert rule.ratio == 0.7

    # On an instance: decode runs out of blocks, the request with the fewest output tokens so
    # far is retracted and the ratio is re-estimated from the requests still running.
    env = simpy.Environment()
    inst, finished = make_instance(env, capacity_blocks=60, rule="sglang")
    seen = []
    original = inst.kv_rule.on_preempted

    def on_preempted(batch, clock):
        original(batch, clock)
        running = [s for s in batch.running if s.prefill_left == 0]
        decoded = sum(s.req.output_tokens - s.output_left_at(clock) for s in running)
        max_new = sum(s.req.output_tokens for s in running)
        seen.append((inst.kv_rule.ratio, min(1.0, (decoded + 20 * len(running)) / max_new)))

    inst.kv_rule.on_preempted = on_preempted
    # B arrives when A has produced about a third of its 40 output blocks. B fits beside the
    # decayed share of A's remaining output but not beside all of it (4 + 40 + 4 + 24 > 60).
    a = request(env, 0, 4 * B, 40 * B)
    b = request(env, 1, 4 * B, 24 * B)
    inst.submit(a)
    submit_at(env, inst, 1.5, b)
    env.run()
    assert len(finished) == 2
    assert inst.kv_stats["retractions"] == inst.kv_stats["preemptions"] == len(seen) >= 1
    assert b.preemptions >= 1 and a.preemptions == 0
    for ratio, expected in seen:
        assert ratio == pytest.approx(expected)
        assert ratio > 0.1                   # well above the floor it had decayed towards


def test_sglang_admits_less_while_the_ratio_is_high():
    # The same arrivals under a high and a low fixed ratio: the cautious one keeps more
    # requests waiting for KV memory.
    from agentsim.config.scenario import ServingConfig

    def queued_for_kv(ratio):
        serving = ServingConfig(engine="sglang", init_new_token_ratio=ratio, min_new_token_ratio=ratio)
        env = simpy.Environment()
        inst, finished = make_instance(env, capacity_blocks=200, rule="sglang")
        inst.kv_rule = KV_ADMISSION.get("sglang")(serving, B)
        reqs = [request(env, i, 4 * B, 40 * B) for i in range(6)]
        for req in reqs:
            inst.submit(req)
        env.run()
        assert len(finished) == 6
        return sum(r.queue_kv_s for r in reqs), inst.kv_stats["retractions"]

    cautious, cautious_retractions = queued_for_kv(1.0)
    bold, bold_retractions = queued_for_kv(0.1)
    assert cautious > bold
    assert cautious_retractions <= bold_retractions


def test_with_prefix_caching_off_a_preempted_request_recomputes_everything_it_had():
    # As above, with the prefix cache (the default) and without (the benchmarks' setting,
    # cache.admission: no_prefix_cache): the preempted request's committed blocks are kept and
    # hit at its re-admission, or freed and computed again.
    from agentsim.cache.policies.admission import ADMISSION_FILTERS

    def run(admission):
        prefilled = []
        CountingTimer = _counting_timer(prefilled)
        env = simpy.Environment()
        cache = RadixCache(40, EVICTION_POLICIES.get("lru")())
        if admission is not None:
            cache.admission = ADMISSION_FILTERS.get(admission)()
        inst = ServingInstance(env, 0, cache, CountingTimer(), B, 64, 8192, check_invariants=True,
                               on_finish=lambda r: r.done.succeed(), kv_rule=KV_ADMISSION.get("vllm")(None, B))
        a, b = request(env, 0, 10 * B, 20 * B), request(env, 1, 10 * B, 20 * B)
        inst.submit(a)
        inst.submit(b)
        env.run()
        assert b.preemptions >= 1 and a.finish_s == a.finish_s and b.finish_s == b.finish_s
        return sum(prefilled), cache

    kept, _ = run(None)
    recomputed, cache = run("no_prefix_cache")
    assert recomputed > kept, (recomputed, kept)
    assert cache.used_blocks == 0 and cache.admission.rejected_blocks > 0


@pytest.mark.parametrize("rule", ["vllm", "sglang", "trtllm"])
def test_the_batch_totals_the_rules_read_match_a_scan_through_preemptions(rule, monkeypatch):
    # The rules read running totals the batch keeps (blocks held and owed to completion;
    # output left clipped at SGLang's 4,096 tokens) instead of scanning it every pass. With
    # invariant checks on, every iteration compares them with a scan. Outputs longer than the
    # clip start "far" and turn "near" mid-decode; the memory is tight enough to preempt.
    from agentsim.cluster.serving.batch import Batch
    from agentsim.cluster.serving.kv_admission import SGLANG_CLIP_MAX_NEW_TOKENS

    checks = []
    original = Batch.check_invariants

    def check(batch):
        original(batch)
        checks.append(len(batch.running))

    monkeypatch.setattr(Batch, "check_invariants", check)
    env = simpy.Environment()
    inst, finished = make_instance(env, capacity_blocks=260, rule=rule)
    reqs = [request(env, i, (2 + i) * B, (70 + 10 * i) * B) for i in range(4)]
    for i, req in enumerate(reqs):
        submit_at(env, inst, 0.2 * i, req)
    env.run()
    assert len(finished) == 4 and max(checks) >= 2
    assert all(r.output_tokens > SGLANG_CLIP_MAX_NEW_TOKENS for r in reqs)
    if rule != "trtllm":      # TensorRT-LLM's guarantee never preempts
        assert inst.kv_stats["preemptions"] >= 1
    assert inst.batch.held_blocks == inst.batch.completion_blocks == 0
    tracker = inst.batch.decoding.output_left
    assert (tracker is not None) == (rule == "sglang")
    if tracker is not None:
        assert tracker.total(inst.batch.decoding.clock) == 0


def test_clipped_output_left_counts_the_clip_until_the_clock_nears_the_finish():
    from agentsim.cluster.serving.batch import Batch, Running

    env = simpy.Environment()
    batch = Batch(B)
    batch.track_output_left(10)
    tracker = batch.decoding.output_left
    far = Running(request(env, 0, B, 25), None, 0, 1, 0)
    near = Running(request(env, 1, B, 4), None, 0, 1, 0)
    waiting = Running(request(env, 2, 2 * B, 30), None, 0, 1, 0)
    for state in (far, near, waiting):
        state.prefill_left = 0 if state is not waiting else state.prefill_left
        batch.join(state)     # far and near start decoding at clock 0
    assert tracker.total(0) == 10 + 4 + 10
    batch.decoding.clock = 4                       # near is done; far has 21 left: the clip
    assert batch.pop_finished() == [near]
    assert tracker.total(4) == 10 + 10
    batch.decoding.clock = 18                      # far has 7 left
    assert tracker.total(18) == 7 + 10
    batch.remove(waiting)
    assert tracker.total(18) == 7
    batch.check_invariants()
