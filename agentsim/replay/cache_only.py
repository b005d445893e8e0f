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
tie). ``"auto"`` (default) is logical unless the policy keeps timers (TTL expiry), which need
real seconds.

**Policy hooks**: a policy with timers gets ``on_timer(now_s)`` before each request whose time
has reached ``next_timer_s()``; an offline policy with ``set_future`` (Belady) is given the
whole request sequence first and ``begin_request(i)`` before request ``i``. A policy's
``counters()`` (e.g. TTL expirations) are added to the summary.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.policy import EvictionPolicy
from agentsim.cache.radix import RadixCache
from agentsim.errors import InputError, InvariantViolation
from agentsim.replay.prefix import CanonicalTrace, prefix_block_counts
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


def make_policy(name: str, params: dict | None = None):
    """An instance of the registered eviction policy ``name`` (InputError with did-you-mean)."""
    if name not in EVICTION_POLICIES:
        raise InputError(EVICTION_POLICIES.unknown_message(name), "--policy")
    cls = EVICTION_POLICIES.get(name)
    try:
        validated = EVICTION_POLICIES.validate_params(name, params)
    except Exception as exc:  # pydantic ValidationError or "takes no parameters"
        raise InputError(f"bad parameters for policy {name!r}: {exc}", "--policy") from None
    return cls(validated)


def resolve_capacity(unique_blocks: int, capacity_blocks: int | None, capacity_fraction: float | None) -> int:
    """Capacity in blocks from an absolute count or a fraction of the trace's unique blocks.

    A fraction rounds to the nearest block, at least 1. Neither given: 10% of unique blocks.
    """
    if capacity_blocks is not None and capacity_fraction is not None:
        raise InputError("give either --capacity-blocks or --capacity-fraction, not both", "command line")
    if capacity_blocks is not None:
        if capacity_blocks <= 0:
            raise InputError(f"--capacity-blocks must be positive, got {capacity_blocks}", "command line")
        return int(capacity_blocks)
    fraction = 0.1 if capacity_fraction is None else capacity_fraction
    if not 0 < fraction:
        raise InputError(f"--capacity-fraction must be positive, got {fraction}", "command line")
    return max(1, int(round(fraction * unique_blocks)))


def replay_cache_only(requests: list[TraceRequest], *, capacity_blocks: int | None = None,
                      capacity_fraction: float | None = None, policy: str = "lru",
                      policy_params: dict | None = None, clock: str = "auto",
                      canonical: CanonicalTrace | None = None, check_invariants: bool = False,
                      record_requests: bool = False) -> CacheOnlyResult:
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
    policy_obj = make_policy(policy, policy_params)
    cache = RadixCache(capacity, policy_obj, name="replay")
    # One call per request: match -> pin -> reserve -> commit -> unpin fused (RadixCache.serve).
    serve = cache.serve
    has_timers = type(policy_obj).next_timer_s is not EvictionPolicy.next_timer_s
    if clock == "auto":
        clock = "trace" if has_timers else "logical"
    use_trace_clock = clock == "trace"
    next_timer_s = policy_obj.next_timer_s if has_timers else None
    begin_request = getattr(policy_obj, "begin_request", None)
    set_future = getattr(policy_obj, "set_future", None)
    if set_future is not None:
        set_future([r.block_keys for r in requests])  # array('q') each: indexed without lists
    hit_blocks = 0
    hit_tokens = 0
    input_tokens = 0
    requested = 0
    block_tokens = requests[0].block_tokens if requests else 0
    per_request: list[int] | None = [] if record_requests else None
    started = time.perf_counter()
    for i, request in enumerate(requests):
        now_s = request.timestamp_s if use_trace_clock else float(i)
        if next_timer_s is not None:
            due = next_timer_s()
            if due is not None and due <= now_s:
                policy_obj.on_timer(now_s)
        if begin_request is not None:
            begin_request(i)
        keys = request.block_keys.tolist()
        n = len(keys)
        input_tokens += request.input_tokens
        requested += n
        if not n:
            if per_request is not None:
                per_request.append(0)
            continue
        try:
            # A request longer than the whole cache keeps only its first ``capacity`` blocks.
            hit = serve(keys, n if n <= capacity else capacity, now_s)
        except InvariantViolation as exc:
            raise InvariantViolation(f"cache-only replay, request {i}: {exc}") from None
        hit_blocks += hit
        if per_request is not None:
            per_request.append(hit)
        # min(hit blocks' tokens, input tokens), without min()'s generic call (~10x a test)
        tokens = hit * request.block_tokens
        hit_tokens += tokens if tokens < request.input_tokens else request.input_tokens
        if check_invariants:
            cache.check_invariants()
    elapsed = time.perf_counter() - started
    extra = {}
    counters = getattr(policy_obj, "counters", None)
    if callable(counters):
        extra.update(counters())
    return CacheOnlyResult(
        policy=policy, capacity_blocks=capacity, block_tokens=block_tokens, requests=len(requests),
        requested_blocks=requested, hit_blocks=hit_blocks, unique_blocks=unique_blocks,
        ideal_hit_blocks=ideal_hit_blocks, input_tokens=input_tokens, hit_tokens=hit_tokens,
        evicted_blocks=cache.evicted_blocks, replay_time_s=elapsed, clock=clock, request_hit_blocks=per_request,
        extra=extra)
