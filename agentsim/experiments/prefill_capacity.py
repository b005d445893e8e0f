"""How hard a disaggregated benchmark row drove its prefill pool, against what the emulated pool
can compute: a check that says, before any queue is modelled, whether a row's TTFT can be fitted.

A benchmark of ``C`` closed-loop clients sends a client's next request when its last one ends,
so the run served ``C / (TTFT + (output - 1) * TPOT)`` requests a second (Little's law over a
client's cycle; ``TPOT`` is the benchmark's ``(E2E - TTFT) / (output - 1)``). The prefill pool
computes every prompt, so ``that rate * prompt / prefill GPUs`` is the prompt tokens a second
per prefill GPU the real pool sustained: a lower bound on the real pool's capacity. The lengths
are the means of the distributions the row's clients drew from (``initial_context_tokens``,
``output_tokens`` of its scenario).

The emulated pool's capacity is its step timer's: every attention-DP rank of a worker computes
as many whole prompts of that mean length as its token budget (``max_num_batched_tokens``, per
rank) holds, back to back, with no prefix hits and nothing decoding; a prompt longer than the
budget runs in budget-sized chunks on every rank at once.

``measured load = sustained / capacity``. Above 1 the measured run computed prompts faster than
the emulated workers can, so no queue in front of them reproduces it: its prefill step times are
too slow for that deployment, and a predicted TTFT of a saturated queue is too high. Near 1 the
row's TTFT is the queue's and moves steeply with any error of the step times either way.
"""

from __future__ import annotations

from agentsim.config.disaggregation import pool_scenario
from agentsim.hardware.timing.select import build_timer
from agentsim.workload.distributions import build as build_sampler


def mean_lengths(scenario, agent_class: str = "client") -> tuple[float, float]:
    """``(prompt tokens, output tokens)``: the means of ``agent_class``'s first-call context and
    output-length distributions (a benchmark row's scenario has one call per session)."""
    spec = scenario.workload.agent_classes[agent_class]
    return build_sampler(spec.initial_context_tokens).mean(), build_sampler(spec.output_tokens).mean()


def prefill_capacity_per_gpu(scenario, prompt_tokens: float) -> float | None:
    """Prompt tokens a second per GPU of ``scenario``'s prefill workers (its
    ``serving.disaggregation``) computing prompts of ``prompt_tokens`` back to back (see the
    module docstring); None for a scenario without disaggregation or a prompt under a token."""
    if scenario.serving.disaggregation is None or prompt_tokens < 1:
        return None
    pool = pool_scenario(scenario, "prefill")
    timer, _ = build_timer(pool)
    ranks = pool.serving.parallelism.attention_dp
    budget = pool.serving.batch_tokens()
    prompt = int(round(prompt_tokens))
    if prompt <= budget:
        per_rank = budget // prompt
        step_s = timer.iteration_s([(prompt, 0)] * (per_rank * ranks), 0, 0.0)
        computed = per_rank * ranks * prompt
    else:
        step_s, done = 0.0, 0
        while done < prompt:
            chunk = min(budget, prompt - done)
            step_s += timer.iteration_s([(chunk, done)] * ranks, 0, 0.0)
            done += chunk
        computed = ranks * prompt
    return computed / step_s / pool.hardware.gpus_per_instance if step_s > 0 else None


def sustained_prompt_rate_per_gpu(clients: int, prompt_tokens: float, output_tokens: float, ttft_ms: float,
                                  tpot_ms: float, prefill_gpus: int) -> float | None:
    """Prompt tokens a second per prefill GPU of a closed-loop benchmark of ``clients`` clients
    whose requests took ``ttft_ms`` to the first token and ``tpot_ms`` per later token (see the
    module docstring); None when the cycle or the GPUs are not positive."""
    cycle_s = (ttft_ms + max(output_tokens - 1.0, 0.0) * tpot_ms) / 1e3
    if not cycle_s > 0 or prefill_gpus <= 0:
        return None
    return clients / cycle_s * prompt_tokens / prefill_gpus


def prefill_gpus(scenario) -> int:
    """GPUs of ``scenario``'s prefill pool (workers x GPUs per worker); 0 without disaggregation."""
    if scenario.serving.disaggregation is None:
        return 0
    pool = pool_scenario(scenario, "prefill")
    return pool.hardware.instances * pool.hardware.gpus_per_instance
