"""Agentic policies on hand-made sequences (no SimPy): TTL-pin static and Continuum adaptive.

The request flow is the engine's: match -> pin -> reserve -> commit -> on_tool_start (while the
request still pins its path) -> unpin; the pause ends with on_tool_end.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.radix import RadixCache


def make(name, capacity, **params):
    policy = EVICTION_POLICIES.get(name)(EVICTION_POLICIES.validate_params(name, params))
    return RadixCache(capacity, policy), policy


def serve(cache, keys, now_s, owner=None, gap_s=math.nan, tool="tool"):
    """One request; with ``owner``, the agent pauses afterwards (tool start before the unpin)."""
    match = cache.match(keys, now_s)
    cache.pin(match.node)
    need = len(keys) - match.hit_blocks
    if need and not cache.reserve(need, now_s):
        cache.unpin(match.node)
        return None
    node = cache.commit(match.node, keys[match.hit_blocks:], match.hit_blocks, need, now_s) if need else match.node
    if owner is not None:
        cache.policy.on_tool_start(owner, node, gap_s, now_s, tool=tool)
    cache.unpin(node)
    return match.hit_blocks


def log_removals(cache):
    log = []
    original = cache.policy.on_remove

    def on_remove(node, blocks, reason):
        log.append((node.keys[-blocks], blocks, reason))   # first block of the removed tail
        original(node, blocks, reason)

    cache.policy.on_remove = on_remove
    return log


# --- TTL-pin static --------------------------------------------------------------------------

def test_pinned_path_survives_pressure_and_is_honoured_at_tool_end():
    cache, policy = make("ttl_pin", 6, tau_s=100)
    serve(cache, [1, 2, 3], 0.0, owner="a", gap_s=5)     # agent a pauses: path pinned
    serve(cache, [10, 11, 12], 1.0)                        # plain request, unpinned
    log = log_removals(cache)
    serve(cache, [20, 21, 22], 2.0)                        # needs 3 blocks: only [10..12] may go
    assert [k for k, _b, _r in log] == [10]
    assert cache.match([1, 2, 3], 3.0, touch=False).hit_blocks == 3
    policy.on_tool_end("a", 4.0)
    assert policy.counters()["pins_honored"] == 1 and policy.counters()["pins_created"] == 1
    assert cache.pinned_blocks() == 0
    cache.check_invariants()


def test_pin_times_out_then_is_ordinary_cache_and_its_eviction_is_labelled():
    cache, policy = make("ttl_pin", 6, tau_s=10)
    serve(cache, [1, 2, 3], 0.0, owner="a", gap_s=60)
    assert policy.next_timer_s() == 10.0
    policy.on_timer(9.0)
    assert cache.pinned_blocks() == 3          # not yet due
    policy.on_timer(10.0)
    assert cache.pinned_blocks() == 0 and policy.pins_timed_out == 1
    assert cache.match([1, 2, 3], 10.0, touch=False).hit_blocks == 3   # released, not deleted
    serve(cache, [10, 11, 12], 11.0)
    serve(cache, [20, 21, 22], 12.0)           # evicts the timed-out path (least recent)
    assert policy.counters()["evicted_after_pin_timeout_blocks"] == 3
    policy.on_tool_end("a", 60.0)              # too late: not honoured
    assert policy.pins_honored == 0
    cache.check_invariants()


def test_pressure_unpin_releases_the_pin_with_most_remaining_time_first():
    cache, policy = make("ttl_pin", 6, tau_s=100)
    serve(cache, [1, 2, 3], 0.0, owner="a", gap_s=5)     # deadline 100
    serve(cache, [10, 11, 12], 50.0, owner="b", gap_s=5)  # deadline 150: most remaining
    log = log_removals(cache)
    assert serve(cache, [20, 21], 60.0) == 0
    assert policy.pins_broken_by_pressure == 1
    assert log == [(11, 2, "capacity")]         # b's tail [11, 12] (trimmed from the leaf's end)
    assert "b" not in policy.pins and "a" in policy.pins
    assert policy.counters()["evicted_after_pressure_unpin_blocks"] == 2
    cache.check_invariants()


def test_pinned_blocks_are_never_freed_without_unpin():
    cache, policy = make("ttl_pin", 4, tau_s=math.inf, pressure_order="oldest")
    serve(cache, [1, 2, 3, 4], 0.0, owner="a")
    # Everything is pinned: the allocation releases the pin (pressure) and only then evicts.
    assert serve(cache, [5, 6], 1.0) == 0
    assert policy.pins_broken_by_pressure == 1
    cache.check_invariants()


def test_human_pauses_are_not_pinned_by_default():
    cache, policy = make("ttl_pin", 6, tau_s=100)
    serve(cache, [1, 2, 3], 0.0, owner="a", gap_s=300, tool="human")
    assert policy.pins_created == 0 and cache.pinned_blocks() == 0


def random_agent_trace(seed, n_agents=5, n_requests=80):
    """(time, keys, owner, gap, ends) events of agents that grow a private history under a shared prompt."""
    rng = np.random.default_rng(seed)
    histories = {a: [1, 2] for a in range(n_agents)}
    next_key = 1000
    t = 0.0
    events = []
    for _ in range(n_requests):
        t += float(rng.exponential(1.0))
        agent = int(rng.integers(n_agents))
        grow = int(rng.integers(1, 5))
        histories[agent].extend(range(next_key, next_key + grow))
        next_key += grow
        if len(histories[agent]) > 16:
            histories[agent] = [1, 2] + list(range(next_key, next_key + 2))
            next_key += 2
        events.append((t, list(histories[agent]), agent, float(rng.exponential(3.0))))
    return events


def run_agent_trace(cache, events, with_timer=True):
    """Serve the events; each request's agent pauses (tool) until its next request."""
    policy = cache.policy
    log = log_removals(cache)
    paused = set()
    for t, keys, agent, gap in events:
        if with_timer:
            due = policy.next_timer_s()
            if due is not None and due <= t:
                policy.on_timer(t)
        if agent in paused:
            policy.on_tool_end(agent, t)
            paused.discard(agent)
        serve(cache, keys, t, owner=agent, gap_s=gap)
        paused.add(agent)
        cache.check_invariants()
    return log


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name,params", [
    ("ttl_pin", {"tau_s": 0.0}),
    ("continuum", {"recompute_s_per_block": 0.0}),
    ("ttl_pin", {"tau_s": 0.0, "base": "s3fifo"}),
])
def test_reductions_to_the_base_policy(seed, name, params):
    """Spec section 6: TTL-pin(tau=0) == base; Continuum with benefit 0 == base (event logs)."""
    events = random_agent_trace(seed)
    base = params.get("base", "lru")
    expected = run_agent_trace(make(base, 24)[0], events)
    got = run_agent_trace(make(name, 24, **params)[0], events)
    assert expected and got == expected


@pytest.mark.parametrize("seed", [0, 1])
def test_pins_change_victims_and_keep_invariants(seed):
    events = random_agent_trace(seed)
    cache, policy = make("ttl_pin", 24, tau_s=2.0)
    log = run_agent_trace(cache, events)
    base_log = run_agent_trace(make("lru", 24)[0], events)
    assert log != base_log
    counters = policy.counters()
    assert counters["pins_created"] == counters["pins_honored"] + counters["pins_timed_out"] \
        + counters["pins_broken_by_pressure"] + counters["pins_active"]
    assert counters["pins_timed_out"] > 0


def test_policy_params_are_validated():
    with pytest.raises(ValueError):
        EVICTION_POLICIES.validate_params("ttl_pin", {"tau_s": -1})
    with pytest.raises(ValueError):
        EVICTION_POLICIES.validate_params("ttl_pin", {"base": "ttl_5m"})
    with pytest.raises(ValueError):
        EVICTION_POLICIES.validate_params("continuum", {"windw": 3})


# --- Continuum -------------------------------------------------------------------------------------

def feed(policy, durations, tool="tool"):
    for i, d in enumerate(durations):
        policy._started[("x", i)] = (0.0, tool)
        policy.on_tool_end(("x", i), d)


def test_continuum_tau_is_a_quantile_of_the_history_and_zero_when_cost_wins():
    cache, policy = make("continuum", 100, recompute_s_per_block=1.0, mem_cost_per_block_s=0.01)
    feed(policy, [float(i) for i in range(1, 101)])     # durations 1..100 s
    tau = policy.choose_tau("tool")
    # value(tau) = P(T<=tau) - 0.01 E[min(T,tau)], maximised over the grid {0, p50, p75, p90, p95, p99}.
    samples = np.arange(1, 101, dtype=float)
    grid = [0.0] + [samples[int(math.ceil(q * 100)) - 1] for q in (0.5, 0.75, 0.9, 0.95, 0.99)]
    values = [np.mean(samples <= g) - 0.01 * np.mean(np.minimum(samples, g)) for g in grid]
    assert tau == grid[int(np.argmax(values))]
    assert tau > 0
    _c2, expensive = make("continuum", 100, recompute_s_per_block=1.0, mem_cost_per_block_s=10.0)
    feed(expensive, [float(i) for i in range(1, 101)])
    assert expensive.choose_tau("tool") == 0.0


def test_continuum_cold_start_is_exponential_and_history_is_per_tool():
    _cache, policy = make("continuum", 100, cold_start_mean_s=10.0, recompute_s_per_block=1.0,
                          mem_cost_per_block_s=0.0)
    # No cost: the largest candidate wins, the exponential's 99th percentile.
    assert policy.choose_tau("tool") == pytest.approx(-10.0 * math.log(0.01))
    feed(policy, [2.0] * 30, tool="tool")
    assert policy.choose_tau("tool") == 2.0
    # "human" has no history of its own: exponential with the all-kinds mean (2 s).
    assert policy.choose_tau("human") == pytest.approx(-2.0 * math.log(0.01))


def test_continuum_pins_with_the_chosen_tau_and_measures_the_pause():
    cache, policy = make("continuum", 10, recompute_s_per_block=1.0, mem_cost_per_block_s=0.0, min_samples=1)
    feed(policy, [4.0])
    serve(cache, [1, 2, 3], 0.0, owner="a", gap_s=999.0)   # the pre-sampled gap is ignored
    assert policy.next_timer_s() == 4.0
    policy.on_tool_end("a", 3.0)
    assert policy.pins_honored == 1
    assert sorted(policy.models["tool"].samples) == [3.0, 4.0]
