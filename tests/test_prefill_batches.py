"""``serving.mixed_prefill``: vLLM and TensorRT-LLM step the decoding requests inside an
iteration that prefills; SGLang (``enable_mixed_chunk`` off by default) runs a prefill batch on its
own and the decoding requests wait it out."""

import simpy

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.radix import RadixCache
from agentsim.cluster.serving.instance import ServingInstance
from agentsim.config.serving import ServingConfig
from agentsim.engine.loading import load_scenario
from tests.conftest import ROOT
from tests.test_serving import B, COST, request


class RecordingTimer:
    """COST, recording the decoding sequences timed with each prefill iteration."""

    def __init__(self):
        self.decoding_in_prefill = []

    def iteration_s(self, chunks, n_decode, decode_context_tokens):
        if chunks:
            self.decoding_in_prefill.append(n_decode)
        return COST.iteration_s(chunks, n_decode, decode_context_tokens)

    def __getattr__(self, name):
        return getattr(COST, name)


def run(mixed: bool):
    """A request decoding 400 tokens; a 32k-token prompt arrives while it decodes."""
    env = simpy.Environment()
    timer = RecordingTimer()
    inst = ServingInstance(env, 0, RadixCache(100_000, EVICTION_POLICIES.get("lru")()), timer, B, 64, 8192,
                           on_finish=lambda r: r.done.succeed(), mixed_prefill=mixed)
    decoder, late = request(env, 0, 1024, 400, keys_base=10**7), request(env, 1, 32_768, 2, keys_base=2 * 10**7)
    inst.submit(decoder)

    def arrive():
        yield env.timeout(decoder.first_token_s + 0.05 if decoder.first_token_s == decoder.first_token_s else 0.2)
        inst.submit(late)
    env.process(arrive())
    env.run()
    return decoder, late, timer


def test_prefill_only_batches_hold_the_decoding_requests_back():
    mixed_decoder, mixed_late, mixed_timer = run(True)
    apart_decoder, apart_late, apart_timer = run(False)
    # Mixed: the decoding request takes its step in each of the late prompt's 4 chunks.
    assert mixed_timer.decoding_in_prefill[-4:] == [1, 1, 1, 1]
    # Apart: the prefill batches carry no decode step (only the first request's own prefill ran
    # with nothing decoding), so the late prompt has its first token sooner ...
    assert apart_timer.decoding_in_prefill == [0] * len(apart_timer.decoding_in_prefill)
    assert apart_late.first_token_s - apart_late.arrival_s < mixed_late.first_token_s - mixed_late.arrival_s
    # ... and the decoding request, which took 4 of its steps inside those chunks when mixed,
    # now takes them after: it finishes later by about 4 decode steps.
    step_s = COST.iteration_s((), 1, 1200.0)
    delay_s = apart_decoder.finish_s - mixed_decoder.finish_s
    assert 3 * step_s < delay_s < 5 * step_s
    # Every output token is still produced: same output, one step per token.
    assert apart_decoder.output_tokens == mixed_decoder.output_tokens == 400


def test_the_engine_chooses_unless_the_scenario_says():
    assert ServingConfig(engine="sglang").mixes_prefill() is False
    assert ServingConfig(engine="vllm").mixes_prefill() is True
    assert ServingConfig(engine="trtllm").mixes_prefill() is True
    assert ServingConfig(engine="sglang", mixed_prefill=True).mixes_prefill() is True
    from agentsim.engine.simulation import Simulation
    scenario = load_scenario(ROOT / "scenarios" / "coding-agents.yaml",
                             ["serving.engine=sglang", "duration_s=1s"])
    assert {inst.mixed_prefill for inst in Simulation(scenario).instances} == {False}
