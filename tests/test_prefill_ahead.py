"""Prefill-ahead of tool output (agentsim/engine/prefill_ahead.py): what it buys (TTFT), what it
costs (GPU seconds, wasted on gaps whose call never came; pinned KV), its low priority, and its
configuration errors."""

from __future__ import annotations

import json

import pytest
import simpy

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.radix import RadixCache
from agentsim.cluster.costmodel import RooflineCostModel
from agentsim.cluster.request import LLMRequest
from agentsim.cluster.serving.instance import ServingInstance
from agentsim.engine.loading import load_scenario
from agentsim.engine.prefill_ahead import PREFILL_AHEAD, StreamedToolOutput
from agentsim.engine.simulation import run_scenario
from agentsim.errors import InputError
from agentsim.results import WALL_CLOCK_KEYS

from tests.conftest import ROOT


SCENARIO = ROOT / "scenarios" / "prefill-ahead.yaml"
SMALL = ["duration_s=4m", "workload.agent_classes.coding.arrival.concurrent=16", "run.check_invariants=true"]
B = 64
COST = RooflineCostModel(active_params=37e9, total_params=671e9, bytes_per_param=1.0, attn_coeff=2.5e6,
                         kv_bytes_per_token=70272, flops_per_s=5e15 * 0.35, bytes_per_s=8e12 * 0.7)


def test_streamed_parts_arrive_evenly_and_leave_the_last_part_to_the_call():
    mechanism = PREFILL_AHEAD.create("streamed", {"chunks": 4})
    assert isinstance(mechanism, StreamedToolOutput)
    assert mechanism.parts(8.0, 1000) == [(2.0, 250), (4.0, 500), (6.0, 750)]
    assert PREFILL_AHEAD.create("none").parts(8.0, 1000) == []


def _summaries(extra):
    on = run_scenario(load_scenario(SCENARIO, SMALL + extra))
    off = run_scenario(load_scenario(SCENARIO, SMALL + extra + ["serving.prefill_ahead.name=none"]))
    return on, off


def test_prefill_ahead_lowers_ttft_on_the_same_seed_and_counts_its_cost():
    on, off = _summaries([])
    s_on, s_off = on.summary, off.summary
    # The same sessions: the same calls, so the comparison is of the mechanism alone. Faster
    # first tokens let a few more of those calls finish inside duration_s (145 against 142).
    assert s_on["sessions"] == s_off["sessions"]
    assert abs(s_on["requests"] - s_off["requests"]) <= 0.03 * s_off["requests"]
    assert s_on["ttft_p99_s"] < 0.8 * s_off["ttft_p99_s"]
    assert s_on["ttft_p50_s"] < s_off["ttft_p50_s"]
    assert s_on["hit_ratio"] > s_off["hit_ratio"]
    # Background prefills never appear as calls.
    assert (on.tables["requests"].request_id >= 0).all()
    assert s_on["prefill_ahead_requests"] > 0 and s_on["prefill_ahead_tokens"] > 0
    assert 0 < s_on["prefill_ahead_wasted_gpu_s"] < s_on["prefill_ahead_gpu_s"]
    assert s_on["prefill_ahead_wasted_gaps"] > 0           # sessions still in a tool gap at the end
    assert s_on["prefill_ahead_pinned_block_s"] == 0       # pin: false
    assert "prefill_ahead_gpu_s" not in s_off


def test_waste_is_counted_for_sessions_that_end_during_a_gap():
    # A run cut at 90 s leaves most agents in a tool gap: their prefills are wasted.
    short = run_scenario(load_scenario(SCENARIO, SMALL + ["duration_s=90s"])).summary
    assert short["prefill_ahead_wasted_gaps"] > 0
    assert short["prefill_ahead_wasted_gpu_s"] > 0
    # Every prefill whose gap's call came is not waste: the waste is a part of the total.
    assert short["prefill_ahead_wasted_gpu_s"] <= short["prefill_ahead_gpu_s"]


def test_pinned_prefill_ahead_holds_kv_and_reruns_identically():
    extra = SMALL + ["serving.prefill_ahead.params.pin=true"]
    first = run_scenario(load_scenario(SCENARIO, extra))
    again = run_scenario(load_scenario(SCENARIO, extra))
    assert first.summary["prefill_ahead_pinned_block_s"] > 0
    assert first.summary["prefill_ahead_pinned_blocks_mean"] > 0
    skip = set(WALL_CLOCK_KEYS)

    def stable(summary):
        return json.dumps({k: v for k, v in summary.items() if k not in skip}, sort_keys=True, default=str)

    assert stable(first.summary) == stable(again.summary)


def _request(env, rid, prompt_tokens, background=False):
    keys = list(range(rid * 10_000, rid * 10_000 + prompt_tokens // B))
    req = LLMRequest(rid, 0, "a", 0, 0, env.now, prompt_tokens, 1, len(keys), keys, env.event())
    req.background = background
    return req


def test_a_background_prefill_waits_behind_a_live_request():
    env = simpy.Environment()
    finished = []
    inst = ServingInstance(env, 0, RadixCache(100_000, EVICTION_POLICIES.create("lru")), COST, B, 1, 8192,
                           on_finish=finished.append, check_invariants=True)
    bg = _request(env, 1, 20_000, background=True)
    live = _request(env, 2, 20_000)
    inst.submit_background(bg)   # queued first
    inst.submit(live)
    env.run(until=60)
    assert [r.request_id for r in finished] == [2, 1]
    assert live.first_token_s < bg.first_token_s
    assert inst.background_active == 0 and not inst.background


def test_cancelled_background_prefill_never_runs():
    env = simpy.Environment()
    finished = []
    inst = ServingInstance(env, 0, RadixCache(100_000, EVICTION_POLICIES.create("lru")), COST, B, 1, 8192,
                           on_finish=finished.append)
    live = _request(env, 2, 20_000)
    bg = _request(env, 1, 20_000, background=True)
    inst.submit(live)
    inst.submit_background(bg)
    assert inst.cancel_background(bg)
    env.run(until=60)
    assert [r.request_id for r in finished] == [2]
    assert inst.background_active == 0


@pytest.mark.parametrize("override, path", [
    ("serving.prefill_ahead.name=streamd", "serving.prefill_ahead.name"),
    ("serving.prefill_ahead.params.chunks=1", "serving.prefill_ahead.params.chunks"),
    ("serving.prefill_ahead.params.chunk=3", "serving.prefill_ahead.params.chunk"),
])
def test_bad_prefill_ahead_settings_name_their_option(override, path):
    with pytest.raises(InputError) as err:
        load_scenario(SCENARIO, [override])
    assert path in str(err.value)
