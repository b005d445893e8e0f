"""Cache-only replay: the fastest way from a trace to hit ratios (no timing, no SimPy).

Requests are served one at a time in the order given (:func:`load_requests` sorts by
timestamp, file order for ties) against one :class:`~agentsim.cache.radix.RadixCache` ruled by
any registered eviction policy. Per request: ``match`` (path-touch) -> ``pin`` the matched
prefix -> ``reserve`` room for the missing blocks (evicting others) -> ``commit`` them ->
``unpin``. A request longer than the whole cache keeps only its first ``capacity_blocks``
blocks (the deepest would be evicted first anyway).

**Hit ratio** (used everywhere in agentsim): hit blocks / requested blocks, where a request's
hit blocks are the longest prefix of its block keys resident when it arrives. Token-weighted
variants are named as such: ``token_hit_ratio`` = hit tokens / input tokens with hit tokens =
``min(hit_blocks * block_tokens, input_tokens)`` (the trace's last block may be partial).

**Clock**: ``"logical"`` gives the cache request ``i`` at ``now_s = i``, so every request has a
distinct timestamp and LRU is exactly block LRU with ties broken deepest-first (the stack model
of :mod:`agentsim.replay.mrc`); ``"trace"`` passes the trace's timestamps (equal timestamps
tie). ``"auto"`` (default) is logical unless the policy keeps timers (TTL expiry) or acts on
agents' pauses the trace records, which need real seconds.

**Policy hooks** (the steps are :func:`agentsim.cache.sequential.replay_sequence`'s): a policy
with timers gets ``on_timer(now_s)`` before each request whose time has reached
``next_timer_s()``; an offline policy with ``set_future`` (Belady) is given the whole request
sequence first and ``begin_request(i)`` before request ``i``; an agentic policy (tool hooks) gets
``on_tool_start`` after each request its agent pauses after (a WEKA ``tool_use`` / ``end_turn``
stop; :mod:`agentsim.workload.traces.agents`) and ``on_tool_end`` when that agent calls again. A
policy's ``counters()`` (e.g. TTL expirations, pins) are added to the summary, and
``policy_signals_missing`` lists what the policy needed and the trace could not give
(``agent_pauses`` on a trace without agents: the policy then runs as its base order). A policy
parameter named ``block_tokens`` (GDSF) takes the trace's block size unless ``--param`` sets it;
model constants (GDSF's ``active_params``, ``attn_coeff``, ``kv_bytes_per_token``) keep their
defaults, the packaged DeepSeek-V3, since a cache-only replay has no scenario (timed replay
takes them from its scenario's model).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.policy import EvictionPolicy
from agentsim.cache.radix import RadixCache
from agentsim.cache.run_constants import with_run_constants
from agentsim.cache.sequential import has_timers, has_tool_hooks, replay_sequence
from agentsim.errors import InputError, InvariantViolation
from agentsim.replay.params import validate_policy_params
from agentsim.replay.prefix import CanonicalTrace, prefix_block_counts
from agentsim.workload.traces.agents import AgentSignals, agent_signals
from agentsim.workload.traces.records import TraceRequest

CLOCKS = ("auto", "logical", "trace")


@dataclass(slots=True)
class CacheOnlyResult:
    """Counters of one cache-only replay. Ratios are properties (see the module docstring)."""

    policy: str
    capacity_blocks: int
    block_tokens: int
    requests: int
    requested_blocks: int
    hit_blocks: int
    unique_blocks: int
    ideal_hit_blocks: int
    input_tokens: int
    hit_tokens: int
    evicted_blocks: int
    replay_time_s: float
    clock: str = "logical"
    extra: dict[str, Any] = field(default_factory=dict)
    #: Per-request hit blocks in replay order (only with ``record_requests=True``).
    request_hit_blocks: list[int] | None = None

    @property
    def hit_ratio(self) -> float:
        return self.hit_blocks / self.requested_blocks if self.requested_blocks else 0.0

    @property
    def ideal_hit_ratio(self) -> float:
        return self.ideal_hit_blocks / self.requested_blocks if self.requested_blocks else 0.0

    @property
    def token_hit_ratio(self) -> float:
        return self.hit_tokens / self.input_tokens if self.input_tokens else 0.0

    def summary(self) -> dict[str, Any]:
        """Flat JSON-ready dict (snake_case, units in names)."""
        out = {
            "mode": "cache-only",
            "policy": self.policy,
            "capacity_blocks": self.capacity_blocks,
            "capacity_fraction": self.capacity_blocks / self.unique_blocks if self.unique_blocks else None,
            "block_tokens": self.block_tokens,
            "requests": self.requests,
            "requested_blocks": self.requested_blocks,
            "hit_blocks": self.hit_blocks,
            "unique_blocks": self.unique_blocks,
            "hit_ratio": self.hit_ratio,
            "ideal_hit_ratio": self.ideal_hit_ratio,
            "token_hit_ratio": self.token_hit_ratio,
            "input_tokens": self.input_tokens,
            "hit_tokens": self.hit_tokens,
            "evicted_blocks": self.evicted_blocks,
            "clock": self.clock,
            "replay_time_s": self.replay_time_s,
        }
        out.update(self.extra)
        return out


def make_policy(name: str, params: dict | None = None, param_items: list[str] | None = None,
                constants: dict | None = None):
    """An instance of the registered eviction policy ``name`` (InputError with did-you-mean).

    Bad ``params`` raise an InputError naming the ``--param`` option (``param_items`` are the
    option texts the params came from, see :mod:`agentsim.replay.params`). ``constants`` are
    the run's constants (:mod:`agentsim.cache.run_constants`, e.g. the trace's
    ``block_tokens``): they fill the policy's parameters of those names that ``params`` leaves
    unset.
    """
    if name not in EVICTION_POLICIES:
        raise InputError(EVICTION_POLICIES.unknown_message(name), "--policy")
    validated = validate_policy_params(EVICTION_POLICIES, name, params or {}, param_items)
    if constants:
        validated = EVICTION_POLICIES.validate_params(
            name, with_run_constants(EVICTION_POLICIES.params_model(name), params, constants))
    return EVICTION_POLICIES.get(name)(validated)


def check_capacity_blocks(capacity_blocks: int) -> None:
    """Raise InputError unless ``capacity_blocks`` is positive and within the blocks one tier
    may hold (``limits.max_blocks_per_tier``, the scenario limit): a policy sizes its state by
    its capacity before the first request, so a capacity of 10^20 blocks must be refused, not
    allocated. No trace has that many blocks: ``--capacity-fraction 1`` holds every block of it."""
    from agentsim.config.limits import Limits

    if capacity_blocks <= 0:
        raise InputError(f"--capacity-blocks must be positive, got {capacity_blocks}", "command line")
    limit = Limits().max_blocks_per_tier
    if capacity_blocks > limit:
        raise InputError(f"{capacity_blocks:,} blocks exceed the limit of {limit:,} blocks per tier "
                         "(limits.max_blocks_per_tier); to hold every block of the trace use --capacity-fraction 1",
                         "--capacity-blocks")


def resolve_capacity(unique_blocks: int, capacity_blocks: int | None, capacity_fraction: float | None) -> int:
    """Capacity in blocks from an absolute count or a fraction of the trace's unique blocks.

    A fraction rounds to the nearest block, at least 1. Neither given: 10% of unique blocks.
    """
    if capacity_blocks is not None and capacity_fraction is not None:
        raise InputError("give either --capacity-blocks or --capacity-fraction, not both", "command line")
    if capacity_blocks is not None:
        check_capacity_blocks(capacity_blocks)
        return int(capacity_blocks)
    fraction = 0.1 if capacity_fraction is None else capacity_fraction
    if not 0 < fraction <= 1:  # a fraction of the trace's unique blocks: above 1 holds more than there is
        raise InputError(f"--capacity-fraction must be in (0, 1], got {fraction}", "--capacity-fraction")
    return max(1, int(round(fraction * unique_blocks)))


def replay_cache_only(requests: list[TraceRequest], *, capacity_blocks: int | None = None,
                      capacity_fraction: float | None = None, policy: str = "lru",
                      policy_params: dict | None = None, clock: str = "auto",
                      canonical: CanonicalTrace | None = None, check_invariants: bool = False,
                      record_requests: bool = False, bound: bool = False) -> CacheOnlyResult:
    """Replay ``requests`` (already in replay order) through one radix cache; see module docstring.

    ``canonical`` may pass a precomputed :func:`canonicalize` of the same requests (it gives the
    unique-block count and ideal hits). ``check_invariants`` verifies the cache after every
    request (slow; for tests). ``record_requests`` keeps each request's hit blocks.
    """
    if clock not in CLOCKS:
        raise InputError(f"unknown clock {clock!r}; known: {', '.join(CLOCKS)}", "--clock")
    if canonical is None:
        unique_blocks, ideal_hit_blocks = prefix_block_counts(requests)
    else:
        unique_blocks, ideal_hit_blocks = canonical.unique_blocks, canonical.ideal_hit_blocks
    capacity = resolve_capacity(unique_blocks, capacity_blocks, capacity_fraction)
    # The trace's block size, not the policy's 64-token default (GDSF prices blocks by it).
    block_tokens = requests[0].block_tokens if requests else None
    policy_obj = make_policy(policy, policy_params, constants={"block_tokens": block_tokens})
    cache = RadixCache(capacity, policy_obj, name="replay")
    tool_hooks = has_tool_hooks(policy_obj)
    signals = agent_signals(requests) if tool_hooks else None
    pauses = signals.pauses if signals is not None and signals.has_pauses else None
    if clock == "auto":
        # Timers and agents' pauses are in seconds: they need the trace's clock.
        clock = "trace" if has_timers(policy_obj) or pauses is not None else "logical"
    times_s = [r.timestamp_s for r in requests] if clock == "trace" else None
    started = time.perf_counter()
    stats = replay_sequence(cache, [r.block_keys for r in requests], times_s=times_s, pauses=pauses,
                            after_request=(lambda _i: cache.check_invariants()) if check_invariants else None,
                            label="cache-only replay")
    hit_tokens = 0
    input_tokens = 0
    for request, hit in zip(requests, stats.per_request_hits):
        # min(hit blocks' tokens, input tokens): the trace's last block may be partial
        tokens = hit * request.block_tokens
        hit_tokens += tokens if tokens < request.input_tokens else request.input_tokens
        input_tokens += request.input_tokens
    block_tokens = requests[0].block_tokens if requests else 0
    elapsed = time.perf_counter() - started
    extra: dict[str, Any] = {}
    counters = getattr(policy_obj, "counters", None)
    if callable(counters):
        extra.update(counters())
    if tool_hooks:
        extra.update(tool_starts=stats.tool_starts, tool_ends=stats.tool_ends)
    extra["policy_signals_missing"] = missing_signals(policy, policy_obj, signals)
    if bound:
        # Imported here: the bound needs numpy, which a plain cache-only replay does not load.
        from agentsim.cache.hit_bound import prefix_hit_upper_bound

        upper = prefix_hit_upper_bound([r.block_keys for r in requests], capacity)
        extra.update(upper_bound_hit_blocks=upper.hit_blocks, upper_bound_hit_ratio=upper.hit_ratio,
                     upper_bound_headroom=upper.hit_ratio - stats.hit_ratio)
    return CacheOnlyResult(
        policy=policy, capacity_blocks=capacity, block_tokens=block_tokens, requests=len(requests),
        requested_blocks=stats.requested_blocks, hit_blocks=stats.hit_blocks, unique_blocks=unique_blocks,
        ideal_hit_blocks=ideal_hit_blocks, input_tokens=input_tokens, hit_tokens=hit_tokens,
        evicted_blocks=cache.evicted_blocks, replay_time_s=elapsed, clock=clock,
        request_hit_blocks=stats.per_request_hits if record_requests else None, extra=extra)


def missing_signals(name: str, policy: EvictionPolicy, signals: AgentSignals | None) -> list[str]:
    """What ``policy`` acts on that this replay cannot give it (``[]``: nothing is missing).

    ``agent_pauses``: the policy reacts to agents pausing between calls (tool or human gaps),
    and the trace records no agent with a tool or human stop (Mooncake, Bailian), so the
    policy runs as its base order. :func:`signal_warnings` words it for the user.
    """
    if has_tool_hooks(policy) and (signals is None or not signals.has_pauses):
        return ["agent_pauses"]
    return []


def signal_warnings(summary: dict) -> list[str]:
    """One warning line per signal a run's policy needed and did not get."""
    notes = []
    if "agent_pauses" in (summary.get("policy_signals_missing") or []):
        notes.append(f"policy {summary.get('policy')!r} acts on agents' tool and human pauses, which this trace "
                     "does not record (no sessions with tool_use / end_turn stops): it ran as its base policy")
    return notes
