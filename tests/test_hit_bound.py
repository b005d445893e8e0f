"""The provable hit bound (agentsim.cache.hit_bound): no registered policy exceeds it, and it is
the exact optimum of its relaxation (an independent LP gives the same number)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from agentsim.cache.hit_bound import prefix_hit_upper_bound
from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.policies._next_use import build_index
from agentsim.cache.policies.admission import ADMISSION_FILTERS
from agentsim.cache.radix import RadixCache
from agentsim.cache.sequential import replay_sequence

FIXTURES = Path(__file__).parent / "fixtures" / "traces"

TREE_MODE_POLICIES = [n for n in EVICTION_POLICIES.names()
                      if "tree_mode" in getattr(EVICTION_POLICIES.params_model(n), "model_fields", {})]
#: Every registered eviction policy with its defaults, every queue policy in every tree mode,
#: TTL variants whose timers fire within the small streams, every admission filter over LRU.
CONFIGS = [(name, {}, None) for name in EVICTION_POLICIES.names()]
CONFIGS += [(name, {"tree_mode": mode}, None) for name in TREE_MODE_POLICIES for mode in ("leaf_only", "cascade", "flat")]
CONFIGS += [("ttl_expiry", {"ttl_s": 3.0, "base": "s3fifo"}, None), ("ttl_expiry", {"ttl_s": 2.0}, None),
            ("ttl_pin", {"tau_s": 4.0}, None), ("tlru", {"threshold_blocks": 2, "next_prompt_blocks": 1}, None),
            ("s3fifo", {"move_to_main_threshold": 2}, None)]
CONFIGS += [("lru", {}, name) for name in ADMISSION_FILTERS.names()]
CONFIGS += [("s3fifo", {}, "tinylfu"), ("belady", {}, "second_hit")]

# One step: (agent, new prompt blocks, output blocks, pause after it, gap s, restart from the
# system prompt, agent whose history it continues (a fork: sub-agents, shared contexts) or None)
step_st = st.tuples(st.integers(0, 3), st.integers(1, 6), st.integers(0, 3),
                    st.sampled_from(["tool", "human", ""]), st.floats(0.0, 6.0), st.booleans(),
                    st.sampled_from([None, None, None, 0, 1, 2, 3]))


def agent_stream(steps, max_history_blocks=30):
    """Agents that re-send their history (prompt + every earlier output) under a shared system
    prompt, sometimes starting over or continuing another agent's history; keys are fresh, so a
    key determines its prefix."""
    histories: dict[int, list[int]] = {}
    next_key = 100
    prompts, totals, times, pauses = [], [], [], []
    now = 0.0
    for agent, grow, output, pause, gap_s, restart, *fork in steps:
        hist = histories.get(fork[0] if fork and fork[0] is not None else agent)
        if hist is None or restart or len(hist) > max_history_blocks:
            hist = [1, 2]
        prompt = hist + list(range(next_key, next_key + grow))
        next_key += grow
        total = prompt + list(range(next_key, next_key + output))
        next_key += output
        histories[agent] = total
        prompts.append(prompt)
        totals.append(total)
        times.append(now)
        pauses.append((agent, pause, gap_s))
        now += 1.0 + gap_s
    return prompts, totals, times, pauses


def policy_hits(config, capacity, prompts, totals, times, pauses) -> int:
    name, params, admission = config
    policy = EVICTION_POLICIES.get(name)(EVICTION_POLICIES.validate_params(name, params))
    cache = RadixCache(capacity, policy)
    if admission:
        cache.admission = ADMISSION_FILTERS.get(admission)()
    return replay_sequence(cache, prompts, times_s=times, totals=totals, pauses=pauses).hit_blocks


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step_st, min_size=1, max_size=40), capacity=st.integers(1, 40))
def test_no_registered_policy_exceeds_the_bound(steps, capacity):
    prompts, totals, times, pauses = agent_stream(steps)
    bound = prefix_hit_upper_bound(prompts, capacity, totals)
    assert bound.hit_blocks <= bound.unbounded_hit_blocks <= bound.requested_blocks
    for config in CONFIGS:
        hits = policy_hits(config, capacity, prompts, totals, times, pauses)
        assert hits <= bound.hit_blocks, (config, capacity, hits, bound.hit_blocks)


def relaxation_optimum_by_lp(prompts, totals, capacity) -> int:
    """The relaxation's optimum by linear programming (an independent solver): one variable
    per prompt reference whose previous reference (of any kind) is an earlier request ``i``,
    holding the block across the boundaries after requests i+1 .. k-1, where it is not one of
    that request's own blocks (a request keeps only its first ``capacity`` blocks); at the
    boundary after request m at most ``capacity - min(|total m|, capacity)`` such blocks. Interval constraint matrices are totally unimodular, so the LP
    optimum is integral."""
    last: dict[int, int] = {}
    intervals = []
    for k, (prompt, total) in enumerate(zip(prompts, totals)):
        for key in prompt:
            if key in last:
                intervals.append((last[key] + 1, k - 1))
        for key in total[:capacity]:
            last[key] = k
        for key in total[capacity:]:  # deeper than the cache: not resident after request k
            last.pop(key, None)
    if not intervals:
        return 0
    load = np.zeros((len(prompts), len(intervals)))
    for column, (start, end) in enumerate(intervals):
        load[start:end + 1, column] = 1.0
    room = np.array([capacity - min(len(total), capacity) for total in totals], dtype=float)
    result = linprog(-np.ones(len(intervals)), A_ub=load, b_ub=room, bounds=(0, 1), method="highs")
    assert result.status == 0
    return int(round(-result.fun))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step_st, min_size=1, max_size=30), capacity=st.integers(1, 30))
def test_the_sweep_is_the_exact_optimum_of_its_relaxation(steps, capacity):
    prompts, totals, _times, _pauses = agent_stream(steps)
    assert prefix_hit_upper_bound(prompts, capacity, totals).hit_blocks == \
        relaxation_optimum_by_lp(prompts, totals, capacity)


def test_long_requests_take_the_grouped_index_and_keep_the_exact_optimum():
    """Requests of >= 64 blocks use the radix-run groups (blocks of one run held as a count);
    the LP on single blocks gives the same optimum."""
    rng = np.random.default_rng(7)
    steps = [(int(rng.integers(3)), int(rng.integers(40, 90)), int(rng.integers(0, 20)), "tool", 1.0,
              bool(rng.random() < 0.1), int(rng.integers(3)) if rng.random() < 0.2 else None) for _ in range(40)]
    prompts, totals, _t, _p = agent_stream(steps, max_history_blocks=600)
    slot_of, bounds, _positions = build_index([seq for pair in zip(prompts, totals) for seq in pair])
    assert slot_of is not None and len(bounds) - 1 < len(slot_of) / 10  # runs, not single blocks
    for capacity in (50, 120, 300):
        assert prefix_hit_upper_bound(prompts, capacity, totals).hit_blocks == \
            relaxation_optimum_by_lp(prompts, totals, capacity)


def test_belady_trims_a_victim_run_only_while_its_tail_is_used_no_sooner():
    """Issue 22 item 5. Before request 2 Belady must free 6 of 7 evictable blocks: 139 (never
    used again) and the run 110..114,148,149, whose deepest block is never used again either but
    whose blocks 110..114 request 3 re-uses. Trimming that run by 6 in one step (it was keyed by
    its deepest block only) lost 111..114 and gave 7 hits where ARC had 8; it now trims a run
    only while its tail shares the deepest block's next use, evicts 139 next, and reaches the
    bound."""
    prompts = [[1, 2, 139, 140, 141, 142, 143], [1, 2, 110, 111, 112, 113, 114, 148, 149], [1, 2, 157, 158, 159],
               [1, 2, 110, 111, 112, 113, 114, 163, 164, 165]]
    totals = [prompts[0] + [144, 145, 146, 147], prompts[1], prompts[2] + [160, 161, 162],
              prompts[3] + [166, 167, 168]]
    times, pauses = [0.0, 1.0, 2.0, 3.0], [None] * 4
    belady = policy_hits(("belady", {}, None), 10, prompts, totals, times, pauses)
    arc = policy_hits(("arc", {}, None), 10, prompts, totals, times, pauses)
    bound = prefix_hit_upper_bound(prompts, 10, totals)
    assert belady == arc == bound.hit_blocks == relaxation_optimum_by_lp(prompts, totals, 10) == 8


@pytest.mark.parametrize("capacity", [100, 400, 1500])
def test_belady_reaches_the_bound_on_mooncake_requests(capacity):
    """On the first 1,200 Mooncake requests Belady's hits equal the upper bound: it is optimal
    there (trimming whole runs, it was below LRU's hits at some capacities of the full trace)."""
    from agentsim.replay.cache_only import replay_cache_only
    from agentsim.workload.traces import load_requests

    requests = load_requests(FIXTURES / "mooncake_head1200.jsonl.gz")
    belady = replay_cache_only(requests, capacity_blocks=capacity, policy="belady", bound=True)
    assert belady.hit_blocks == belady.extra["upper_bound_hit_blocks"]
    assert belady.hit_blocks >= replay_cache_only(requests, capacity_blocks=capacity, policy="lru").hit_blocks


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="capacity"):
        prefix_hit_upper_bound([[1, 2]], 0)
    with pytest.raises(ValueError, match="request 1"):
        prefix_hit_upper_bound([[1], [1, 2]], 4, totals=[[1, 5], [1, 3, 4]])
    assert prefix_hit_upper_bound([], 4).hit_blocks == 0
