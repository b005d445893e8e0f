"""The one sequential cache-only replay loop: requests served one at a time through one cache.

Used by ``agentsim replay`` (cache-only), by the run diagnostics' Belady-headroom replay and
by the policy tests, so every cache-only number in agentsim comes from the same steps.

Per request ``i`` at ``now_s`` (``times_s[i]``, or ``i`` on the logical clock), in this order:

1. the policy's timers fire if due (``on_timer(now_s)`` when ``next_timer_s() <= now_s``);
2. if the request's agent was paused (a tool call or a human turn after its previous
   request), the pause ends: ``on_tool_end(owner, now_s)``;
3. an offline policy is told which request comes (``begin_request(i)``);
4. match ``prompts[i]`` (path-touch) -> pin the matched prefix -> reserve room for the rest
   of ``totals[i]`` (default: the prompt) truncated to the capacity (a request longer than the
   cache keeps its first ``capacity`` blocks; the deepest would go first anyway) -> commit;
5. if the agent pauses after this request (``pauses[i] = (owner, kind, gap_s)`` with kind
   ``tool`` or ``human``, or any kind in the policy's ``announced_gap_kinds``: the Belady
   agent-oracle also hears of the next call after a sub-agent join or an unknown stop, and
   of none, gap NaN, after an agent's last call), ``on_tool_start(owner, deepest_node, gap_s,
   now_s, tool=kind)`` before the
   unpin, so a TTL-pin takes over the request's own pin (as the timed engine does);
6. unpin.

An offline policy (``set_future``) is given the whole prompt sequence first. Requests are never
concurrent, so the only pins are the current request's and a reservation always succeeds for
a correct policy: a failure raises :class:`~agentsim.errors.InvariantViolation` naming the
request. Without ``totals`` or pauses a request takes :meth:`RadixCache.serve` (the same
steps fused). Hit blocks of a request = the longest resident prefix of its prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Sequence

from agentsim.cache.policy import EvictionPolicy
from agentsim.cache.radix import RadixCache
from agentsim.errors import InvariantViolation

#: Pause kinds that hold an agent's KV between two of its calls (sub-agent joins do not).
PAUSE_KINDS = ("tool", "human")

#: One request's pause after it: (owner, kind, gap_s), or None for no pause.
Pause = tuple[Hashable, str, float]


def has_tool_hooks(policy: EvictionPolicy) -> bool:
    """Whether ``policy`` acts on agents' pauses (``on_tool_start`` / ``on_tool_end``)."""
    cls = type(policy)
    return (cls.on_tool_start is not EvictionPolicy.on_tool_start
            or cls.on_tool_end is not EvictionPolicy.on_tool_end)


def has_timers(policy: EvictionPolicy) -> bool:
    """Whether ``policy`` keeps timers (``next_timer_s``: TTL expiry, pin time-outs)."""
    return type(policy).next_timer_s is not EvictionPolicy.next_timer_s


@dataclass
class SequentialStats:
    """Counters of one sequential replay (block-weighted; see the module docstring)."""

    requests: int = 0
    requested_blocks: int = 0
    hit_blocks: int = 0
    #: Hit blocks of each request in order.
    per_request_hits: list[int] = field(default_factory=list)
    tool_starts: int = 0
    tool_ends: int = 0

    @property
    def missed_blocks(self) -> int:
        return self.requested_blocks - self.hit_blocks

    @property
    def hit_ratio(self) -> float:
        return self.hit_blocks / self.requested_blocks if self.requested_blocks else 0.0


def replay_sequence(cache: RadixCache, prompts: Sequence[Sequence[int]], *,
                    times_s: Sequence[float] | None = None, totals: Sequence[Sequence[int]] | None = None,
                    pauses: Sequence[Pause | None] | None = None,
                    after_request: Callable[[int], None] | None = None, label: str = "replay") -> SequentialStats:
    """Serve ``prompts`` in order through ``cache`` (see the module docstring for the steps).

    ``prompts[i]`` / ``totals[i]``: block keys, root first (lists or ``array('q')``).
    ``pauses[i]`` = ``(owner, kind, gap_s)``: the request's agent (any hashable) and what follows
    the request (``tool`` / ``human`` pause; anything else, e.g. ``""`` or ``join``, is none);
    None when the agent is unknown. Ignored unless the cache's policy has tool hooks. ``after_request(i)`` runs
    after request ``i`` (invariant checks). ``label`` names the replay in an error.
    """
    policy = cache.policy
    capacity = cache.capacity_blocks
    stats = SequentialStats()
    per_request = stats.per_request_hits
    timers = has_timers(policy)
    if pauses is not None and not has_tool_hooks(policy):
        pauses = None
    paused: dict[Any, bool] = {}
    announced = getattr(policy, "announced_gap_kinds", PAUSE_KINDS)
    begin_request = getattr(policy, "begin_request", None)
    set_future = getattr(policy, "set_future", None)
    if set_future is not None:
        set_future(list(prompts))
    serve = cache.serve
    # RadixCache.serve skips the pin and unpin of a fully cached request; they matter only to a
    # policy that acts on releases (vLLM's free queue: a released block goes to its MRU end) or
    # to an admission filter, which then take the steps one by one.
    fused = not cache._notify_release and cache.admission is None
    requested = hits = 0
    for i, prompt in enumerate(prompts):
        now_s = float(times_s[i]) if times_s is not None else float(i)
        if timers:
            due = policy.next_timer_s()
            if due is not None and due <= now_s:
                policy.on_timer(now_s)
        pause = pauses[i] if pauses is not None else None
        if pause is not None:
            if paused and paused.pop(pause[0], False):
                policy.on_tool_end(pause[0], now_s)  # the agent's pause is over: it calls again
                stats.tool_ends += 1
            if pause[1] not in PAUSE_KINDS and pause[1] not in announced:
                pause = None
        if begin_request is not None:
            begin_request(i)
        keys = prompt if isinstance(prompt, list) else list(prompt)
        n = len(keys)
        requested += n
        total = totals[i] if totals is not None else None
        try:
            if not n:
                hit = 0
            elif total is None and pause is None and fused:
                hit = serve(keys, n if n <= capacity else capacity, now_s)
            else:
                hit = _serve_steps(cache, keys, keys if total is None else list(total), now_s, pause, stats,
                                   always_pin=not fused)
                if pause is not None:
                    paused[pause[0]] = True
        except InvariantViolation as exc:
            raise InvariantViolation(f"{label}, request {i}: {exc}") from None
        hits += hit
        per_request.append(hit)
        if after_request is not None:
            after_request(i)
    stats.requests = len(prompts)
    stats.requested_blocks = requested
    stats.hit_blocks = hits
    return stats


def _serve_steps(cache: RadixCache, prompt: list[int], total: list[int], now_s: float, pause: Pause | None,
                 stats: SequentialStats, always_pin: bool = False) -> int:
    """Steps 4-6 one by one: match the prompt, insert ``total``, announce the pause before the
    unpin. A fully cached request without a pause skips its pin and unpin unless ``always_pin``."""
    node, hit = cache.match(prompt, now_s)
    keep = min(len(total), cache.capacity_blocks)
    fresh = keep - hit
    pausing = pause is not None
    if fresh <= 0 and not pausing and not always_pin:
        return hit
    cache.pin(node)
    if fresh > 0:
        if not cache.reserve(fresh, now_s):
            cache.unpin(node)
            raise InvariantViolation(f"could not reserve {fresh} blocks")
        node = cache.commit(node, total[hit:keep], hit, fresh, now_s)
    if pausing:
        owner, kind, gap_s = pause
        cache.policy.on_tool_start(owner, node, gap_s, now_s, tool=kind)
        stats.tool_starts += 1
    cache.unpin(node)
    return hit


def serve_request(cache: RadixCache, keys: Sequence[int], now_s: float) -> int:
    """One request of a hand-driven replay (tests, examples): steps 4 and 6 of the loop at
    ``now_s``, without timers, pauses or an offline future; returns its hit blocks."""
    keys = list(keys)
    n = len(keys)
    try:
        if not n:
            return 0
        if cache._notify_release or cache.admission is not None:
            return _serve_steps(cache, keys, keys, now_s, None, SequentialStats(), always_pin=True)
        return cache.serve(keys, min(n, cache.capacity_blocks), now_s)
    except InvariantViolation as exc:
        raise InvariantViolation(f"request at t={now_s}: {exc}") from None
