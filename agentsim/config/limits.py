"""Size limits of a scenario, checked before anything is allocated.

A scenario can ask for more than any machine holds with a few characters
(``instances: 10000000``, ``concurrent: 1000000000``, ``rate_per_s: 1e308``), and the engine
would start allocating before noticing. These limits are far above every shipped scenario and
every study in docs/ (the largest uses 64 instances and a few thousand sessions), and each can be
raised on purpose in the scenario's ``limits:`` section, which the message names.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agentsim.config.distributions import support
from agentsim.config.units import Seconds
from agentsim.errors import FieldError


class Limits(BaseModel):
    """Upper bounds on what one scenario may ask for (raise them here when a study needs more)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    max_instances: int = Field(4096, gt=0, description="serving instances (hardware.instances; disaggregated: prefill plus decode workers)")
    max_concurrent_sessions: int = Field(1_000_000, gt=0, description="sessions kept alive by population arrivals, all classes together")
    max_expected_sessions: float = Field(10_000_000, gt=0, description="sessions Poisson arrivals start on average over duration_s, at the peak rate")
    max_duration_s: Seconds = Field(366 * 86400.0, gt=0, description="simulated time (duration_s): one year")
    max_prompt_tokens: int = Field(10_000_000, gt=0, description="longest prompt (shared prefixes plus max_context_tokens) in tokens")
    max_batch_requests: int = Field(1_000_000, gt=0, description="serving.max_batch_requests (or max_num_seqs; "
                                    "disaggregated: each pool's)")
    max_batch_tokens: int = Field(10_000_000, gt=0, description="token budget of one iteration (serving."
                                  "prefill_chunk_tokens or max_num_batched_tokens; disaggregated: each pool's)")
    max_gpus_per_instance: int = Field(1024, gt=0, description="GPUs of one serving instance (hardware."
                                       "gpus_per_instance; disaggregated: each pool's gpus_per_worker)")
    max_blocks_per_tier: int = Field(2**32, gt=0, description="KV blocks one tier of one instance may hold (HBM: "
                                     "kv_capacity / block bytes; a tier below it: its capacity / block bytes); "
                                     "every block count stays a machine integer")
    max_drain_s: Seconds = Field(3600.0, ge=0, description="simulated time after duration_s the run may take to finish "
                                 "the calls in flight (drain: true); calls still in flight then are rejected with "
                                 "reason drain_limit (agentsim.engine.drain)")


def limit_hint(name: str) -> str:
    """The sentence every limit message ends with."""
    return f"raise limits.{name} in the scenario if this is intended"


def _count_text(count: float) -> str:
    """A count for a message; one past the float range is said as such, not as ``inf``."""
    return f"{count:.3g}" if count < float("inf") else "more than 1e308"


def check_limits(scenario) -> None:
    """Raise FieldError (blaming the field that asks for too much) if ``scenario`` exceeds its
    ``limits``; called by the scenario model's validator, after every field is validated."""
    limits = scenario.limits
    if scenario.hardware.instances > limits.max_instances:
        raise FieldError(("hardware", "instances"), f"{scenario.hardware.instances:,} instances exceed the limit of "
                         f"{limits.max_instances:,}; {limit_hint('max_instances')}")
    disaggregation = scenario.serving.disaggregation
    if disaggregation is not None:
        pools = {"prefill": disaggregation.prefill.workers, "decode": disaggregation.decode.workers}
        if sum(pools.values()) > limits.max_instances:
            role = max(pools, key=pools.get)
            raise FieldError(("serving", "disaggregation", role, "workers"),
                             f"{pools['prefill']:,} prefill + {pools['decode']:,} decode workers exceed the limit of "
                             f"{limits.max_instances:,} serving instances; {limit_hint('max_instances')}")
    if scenario.duration_s > limits.max_duration_s:
        raise FieldError(("duration_s",), f"{scenario.duration_s:g} s exceeds the limit of {limits.max_duration_s:g} s; "
                         f"{limit_hint('max_duration_s')}")
    _check_engine_sizes(scenario)
    block_bytes = scenario.cache.block_tokens * scenario.model.kv_bytes_per_token
    hbm_blocks = scenario.kv_capacity_bytes_per_instance() / block_bytes
    if hbm_blocks > limits.max_blocks_per_tier:
        blamed = ("hardware", "kv_capacity_bytes") if scenario.hardware.kv_capacity_bytes is not None else ("hardware", "hbm_bytes_per_gpu")
        raise FieldError(blamed, f"{_count_text(hbm_blocks)} KV blocks of {block_bytes:,.0f} bytes per instance exceed the "
                                 f"limit of {limits.max_blocks_per_tier:,} blocks per tier; {limit_hint('max_blocks_per_tier')}")
    classes = scenario.workload.agent_classes
    concurrent = {name: c.arrival.concurrent or 0 for name, c in classes.items() if c.arrival.kind == "population"}
    if sum(concurrent.values()) > limits.max_concurrent_sessions:
        name = max(concurrent, key=concurrent.get)
        raise FieldError(("workload", "agent_classes", name, "arrival", "concurrent"),
                         f"{sum(concurrent.values()):,} concurrent sessions exceed the limit of "
                         f"{limits.max_concurrent_sessions:,}; {limit_hint('max_concurrent_sessions')}")
    expected = {name: c.arrival.peak_rate_per_s() * scenario.duration_s for name, c in classes.items()
                if c.arrival.kind == "poisson"}
    if sum(expected.values()) > limits.max_expected_sessions:
        name = max(expected, key=expected.get)
        raise FieldError(("workload", "agent_classes", name, "arrival", "rate_per_s"),
                         f"up to {_count_text(sum(expected.values()))} sessions would start in {scenario.duration_s:g} s "
                         f"(peak rate times duration), above the limit of {limits.max_expected_sessions:.3g}; "
                         f"{limit_hint('max_expected_sessions')}")
    for name, agent in classes.items():
        # Every sub-agent is a live session too: a fanout that alone exceeds the session limit
        # would be spawned (and allocated) at the first join.
        fanout = support(agent.subagents.fanout)[0] if agent.subagents.probability > 0 else 0
        if fanout > limits.max_concurrent_sessions:
            raise FieldError(("workload", "agent_classes", name, "subagents", "fanout"),
                             f"a fanout of at least {fanout:,.0f} sub-agents per join exceeds the limit of "
                             f"{limits.max_concurrent_sessions:,} concurrent sessions; {limit_hint('max_concurrent_sessions')}")
    shared = scenario.workload.global_system_prompt_tokens
    for name, agent in classes.items():
        for field, tokens in (("tools_prefix_tokens", shared + agent.tools_prefix_tokens),
                              ("max_context_tokens", agent.max_context_tokens),
                              ("subagents", shared + agent.tools_prefix_tokens + agent.subagents.system_tokens)):
            if tokens > limits.max_prompt_tokens:
                path = ("workload", "agent_classes", name, field) + (("system_tokens",) if field == "subagents" else ())
                raise FieldError(path, f"prompts of {tokens:,} tokens exceed the limit of {limits.max_prompt_tokens:,}; "
                                       f"{limit_hint('max_prompt_tokens')}")


def _check_engine_sizes(scenario) -> None:
    """GPUs per instance, batch slots and the iteration's token budget, aggregated and per pool,
    against their limits (each blames the field that gave the value in force)."""
    limits, serving, hardware = scenario.limits, scenario.serving, scenario.hardware
    sizes = [(("hardware", "gpus_per_instance"), hardware.gpus_per_instance, "GPUs per instance",
              "max_gpus_per_instance", limits.max_gpus_per_instance),
             (("serving", "max_num_seqs" if serving.max_num_seqs else "max_batch_requests"), serving.batch_requests(),
              "requests per batch", "max_batch_requests", limits.max_batch_requests),
             (("serving", "max_num_batched_tokens" if serving.max_num_batched_tokens else "prefill_chunk_tokens"),
              serving.batch_tokens(), "tokens per iteration", "max_batch_tokens", limits.max_batch_tokens)]
    if serving.disaggregation is not None:
        for role in ("prefill", "decode"):
            pool = getattr(serving.disaggregation, role)
            where = ("serving", "disaggregation", role)
            sizes += [(where + ("gpus_per_worker",), pool.gpus_per_worker or 0, "GPUs per worker",
                       "max_gpus_per_instance", limits.max_gpus_per_instance),
                      (where + ("max_num_seqs",), pool.max_num_seqs or 0, "requests per batch",
                       "max_batch_requests", limits.max_batch_requests),
                      (where + ("max_num_batched_tokens",), pool.max_num_batched_tokens or 0, "tokens per iteration",
                       "max_batch_tokens", limits.max_batch_tokens)]
    for path, value, what, name, limit in sizes:
        if value > limit:
            raise FieldError(path, f"{value:,} {what} exceed the limit of {limit:,}; {limit_hint(name)}")
