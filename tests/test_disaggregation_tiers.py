"""Disaggregated serving with lower tiers and several racks: prefill and decode workers each
with DRAM and a shared remote store, hand-offs placed rack by rack (NVLink inside a rack, the
NICs between racks, sharing them with the store's traffic), the decode worker's own lower-tier
loads running beside the hand-off, and the 4-rack scenario end to end."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import simpy

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.tiers import TieredCache, TierSpec
from agentsim.cluster.request import LLMRequest
from agentsim.cluster.serving.disaggregation import KvHandoff
from agentsim.cluster.serving.instance import ServingInstance
from agentsim.engine.loading import load_scenario
from agentsim.engine.simulation import run_scenario
from agentsim.errors import InputError
from agentsim.hardware.links import Link
from agentsim.hardware.topology import InstanceLinks, place_pools
from agentsim.results import WALL_CLOCK_KEYS
from tests.conftest import ROOT
from tests.test_racks import B, COST

TIERED = ROOT / "scenarios" / "gb300-nvl72-tiers.yaml"
#: 2 racks, 2 prefill and 2 decode workers of 4 GPUs (one of each per rack), small HBM so that
#: histories go down to DRAM and the shared store, written through as LMCache does.
TWO_RACKS = ["duration_s=3m", "hardware.racks=2", "hardware.kv_capacity_bytes=3GB",
             "workload.agent_classes.coding.arrival.concurrent=24", "workload.agent_classes.coding.arrival.ramp_s=20s",
             "cache.tiers.dram.capacity_bytes=4GB", "cache.tiers.disk.enabled=false",
             "cache.tiers.remote.capacity_bytes=2TB", "cache.tiers.remote.shared=true",
             "cache.tiers.dram.write_policy=write_through", "cache.tiers.remote.write_policy=write_through",
             "serving.disaggregation.prefill.workers=2", "serving.disaggregation.decode.workers=2",
             "run.check_invariants=true", "run.belady_headroom=false"]


def test_each_pool_is_spread_over_the_racks_and_no_worker_leaves_its_rack():
    # The 4-rack scenario's pools: 16 prefill workers of 4 GPUs, 28 decode workers of 8 GPUs.
    prefill, decode = place_pools([(16, 4), (28, 8)], 4, 72, 4)
    assert [p.rack for p in prefill] == [i // 4 for i in range(16)]
    assert [p.rack for p in decode] == [j // 7 for j in range(28)]
    for p in prefill + decode:
        assert p.domain == p.rack                       # one NVL72 rack = one NVLink domain
        assert p.rack * 72 <= p.first_gpu and p.first_gpu + p.gpus <= (p.rack + 1) * 72
    # Rack 1: its 4 prefill workers on GPUs 72-87, then its 7 decode workers from 88.
    assert [p.first_gpu for p in prefill[4:8]] == [72, 76, 80, 84]
    assert decode[7].first_gpu == 88 and decode[7].tray == 22
    assert [p.instance for p in prefill + decode] == list(range(44))


def test_pools_that_overfill_a_rack_are_refused_with_the_path():
    with pytest.raises(InputError, match=r"hardware\.racks.*80 GPUs in the fullest rack.*72"):
        load_scenario(ROOT / "scenarios" / "gb300-disagg-4racks.yaml", ["serving.disaggregation.decode.workers=32"])


def test_peer_hbm_with_disaggregation_is_refused_with_the_path():
    with pytest.raises(InputError, match=r"cache\.tiers\.peer_hbm"):
        load_scenario(TIERED, TWO_RACKS + ["cache.tiers.peer_hbm=true"])


class _OneLink:
    """The hand-off side of a cluster with one prefill worker reached over ``link``."""

    def __init__(self, link: Link, efficiency: float):
        self.link = link
        self.efficiency = efficiency

    def links_between(self, prefill_worker: int, decode_worker: int) -> list[Link]:
        return [self.link]


H2D_BPS, H2D_LATENCY_S = 600e9, 10e-6


@pytest.mark.parametrize("handoff_bps", [1e9, 1e12])
def test_a_decode_worker_loading_its_own_dram_and_receiving_a_handoff_waits_for_both(handoff_bps):
    """A decode worker holds a session's 50K-token history in DRAM; the next call's prompt adds
    6,400 tokens, computed on a prefill worker. The history loads over C2C while the 6,400 new
    tokens' KV comes over the hand-off link: the call starts decoding when the later of the two
    has arrived (a slow link: the hand-off; a fast one: the DRAM load), not at the first, and
    its first token comes with its first decode step."""
    env = simpy.Environment()
    lru = EVICTION_POLICIES.get("lru")
    cache = TieredCache(200_000, lru(), [TierSpec("dram", 400_000, lru(), "write_back")])
    links = InstanceLinks(h2d=Link(env, "h2d", H2D_BPS, H2D_LATENCY_S), d2h=Link(env, "d2h", 520e9, 10e-6))
    decode = ServingInstance(env, 0, cache, COST, B, 8, 8192, on_finish=lambda r: r.done.succeed(), links=links,
                             check_invariants=True)
    handoff_link = Link(env, "handoff", handoff_bps, 5e-6, "network")
    decode.kv_handoff = KvHandoff(decode, _OneLink(handoff_link, 0.8))
    history = 50_000 // B * B
    keys = list(range(history // B))
    warm = LLMRequest(0, 0, "a", 0, 0, env.now, history + 1, 1, len(keys), keys, env.event())
    decode.submit(warm)
    env.run(until=warm.done)
    assert cache.demote_path(cache.match(keys, env.now, touch=False).node, env.now) == len(keys)
    env.run(until=env.now + 1.0)      # the copy down is over
    prompt = history + 6_400
    call_keys = list(range(prompt // B))
    call = LLMRequest(1, 0, "a", 0, 1, env.now, prompt, 8, len(call_keys), call_keys, env.event())
    call.prefill_worker, call.prefill_done_s, call.remote_prefill = 0, env.now, True
    call.prefill_computed_tokens, call.prefill_tier_hit_tokens = prompt, {"hbm": 0}
    decode.submit(call)
    start = env.now
    env.run(until=call.done)
    kvb = COST.kv_bytes_per_token
    load_s = H2D_LATENCY_S + history * kvb / H2D_BPS
    handoff_s = 5e-6 + 6_400 * kvb / (0.8 * handoff_bps)
    assert call.decode_hit_tokens == history and call.kv_transfer_bytes == 6_400 * kvb
    assert call.kv_transfer_s == pytest.approx(max(load_s, handoff_s), rel=1e-6)
    first_step_s = COST.decode_stretch_s(1, prompt, 1)    # alone in the batch
    assert call.decode_first_step_s == pytest.approx(first_step_s, rel=1e-6)
    assert call.first_token_s - start == pytest.approx(max(load_s, handoff_s) + first_step_s, rel=1e-6)
    # Its 8 output tokens are 8 decode steps: the first one's output is the first token.
    assert call.finish_s - start == pytest.approx(max(load_s, handoff_s) + COST.decode_stretch_s(1, prompt, 8), rel=1e-6)
    # The prefill worker's accounting is the call's: nothing was hit there, all was computed.
    assert call.hit_tokens == 0 and call.prefilled_tokens == prompt and call.tier_hit_tokens == {"hbm": 0}


PREFILL_FIRST = ["serving.disaggregation.decode_first=false"]


@pytest.fixture(scope="module")
def tiered_run():
    # Prefill first: the decode worker matches its cache after the prefill, by when most
    # histories have gone down to its DRAM (decoding first it matches them at arrival, below).
    return run_scenario(load_scenario(TIERED, TWO_RACKS + PREFILL_FIRST))


def _racks(result) -> tuple[dict[int, int], dict[int, int]]:
    """Rack of each prefill and each decode worker, as the run placed them."""
    prefill, decode = place_pools([(2, 4), (2, 4)], 4, 72, 2)
    return {i: p.rack for i, p in enumerate(prefill)}, {i: p.rack for i, p in enumerate(decode)}


def test_tiered_disaggregated_run_conserves_tokens_and_hits_lower_tiers(tiered_run):
    requests = tiered_run.tables["requests"]
    done = requests[~requests.rejected]
    assert len(done) > 100
    assert (done.hit_tokens + done.recomputed_tokens == done.prompt_tokens).all()
    by_tier = done[[c for c in done.columns if c.startswith("hit_tokens_")]].sum(axis=1)
    assert (by_tier == done.hit_tokens).all()
    # The prefill workers load history from DRAM and from other workers' shares of the store.
    assert done.hit_tokens_dram.sum() > 0 and done.hit_tokens_remote.sum() > 0
    assert tiered_run.summary["shared_store_hit_blocks"] > 0
    kv_bytes_per_token = tiered_run.scenario.model.kv_bytes_per_token
    assert (done.kv_transfer_bytes == (done.prompt_tokens - done.decode_hit_tokens) * kv_bytes_per_token).all()
    tiers = tiered_run.summary["tiers"]
    # Both pools' caches: 4 workers' HBM and DRAM.
    assert tiers["hbm"]["capacity_blocks"] == 4 * tiered_run.summary["kv_capacity_blocks"] // 2
    assert tiers["dram"]["loaded_blocks"] > 0 and tiers["remote"]["inserted_blocks"] > 0


def test_ttft_parts_add_up_with_decode_workers_loading_from_their_own_tiers(tiered_run):
    done = tiered_run.tables["requests"].query("not rejected")
    parts = done.queue_wait_s + done.prefill_s + done.decode_queue_s + done.kv_transfer_s + done.decode_first_step_s
    assert (parts - done.ttft_s).abs().max() < 1e-9
    # Most calls load part of their history from the decode worker's own lower tiers (its
    # HBM is small) while the hand-off brings the rest; only the rest is sent.
    local = done[done.loaded_bytes > 0]
    assert len(local) > len(done) / 2
    assert (local.decode_hit_tokens > 0).all()


def test_handoffs_stay_on_nvlink_inside_a_rack_and_cross_the_nics_between_racks(tiered_run):
    done = tiered_run.tables["requests"].query("not rejected")
    prefill_rack, decode_rack = _racks(tiered_run)
    same = done.prefill_worker.map(prefill_rack) == done.instance.map(decode_rack)
    by_kind = tiered_run.summary["kv_transfer_bytes_by_link_kind"]
    assert same.any() and (~same).any()
    assert by_kind["nvlink"] == pytest.approx(done[same].kv_transfer_bytes.sum())
    assert by_kind["network"] == pytest.approx(done[~same].kv_transfer_bytes.sum())
    links = tiered_run.tables["links"].set_index("link")
    # Workers are numbered prefill first in the hierarchy: inst0-1 prefill, inst2-3 decode.
    # A decode worker's NIC carries its cross-rack hand-offs (at 1/efficiency of the payload)
    # and its store traffic: more than the hand-offs alone.
    efficiency = tiered_run.scenario.serving.disaggregation.transfer_efficiency
    for decode in (0, 1):
        crossing = done[~same & (done.instance == decode)].kv_transfer_bytes.sum() / efficiency
        assert links.loc[f"inst{2 + decode}.nic", "bytes"] > crossing > 0
        inside = done[same & (done.instance == decode)].kv_transfer_bytes.sum() / efficiency
        assert links.loc[f"inst{2 + decode}.nvlink_in", "bytes"] == pytest.approx(inside)


@pytest.mark.slow
def test_tiered_disaggregated_runs_repeat(tiered_run):
    again = run_scenario(load_scenario(TIERED, TWO_RACKS + PREFILL_FIRST))
    pd.testing.assert_frame_equal(again.tables["requests"], tiered_run.tables["requests"])
    pd.testing.assert_frame_equal(again.tables["links"], tiered_run.tables["links"])

    def stable(summary):  # JSON text, so NaN equals NaN
        return json.dumps({k: v for k, v in summary.items() if k not in WALL_CLOCK_KEYS}, sort_keys=True, default=str)

    assert stable(again.summary) == stable(tiered_run.summary)


@pytest.mark.slow
def test_the_four_rack_scenario_runs_and_reports_handoffs_by_link_kind():
    result = run_scenario(load_scenario(ROOT / "scenarios" / "gb300-disagg-4racks.yaml", [
        "workload.agent_classes.coding.arrival.concurrent=400", "duration_s=2m", "run.check_invariants=true"]))
    summary = result.summary
    done = result.tables["requests"].query("not rejected")
    assert summary["disaggregated"] and summary["racks"] == 4
    assert summary["prefill_workers"] == 16 and summary["decode_workers"] == 28
    assert (done.hit_tokens + done.recomputed_tokens == done.prompt_tokens).all()
    prefill, decode = place_pools([(16, 4), (28, 8)], 4, 72, 4)
    same = done.prefill_worker.map(lambda i: prefill[i].rack) == done.instance.map(lambda j: decode[j].rack)
    by_kind = summary["kv_transfer_bytes_by_link_kind"]
    assert by_kind["nvlink"] == pytest.approx(done[same].kv_transfer_bytes.sum())
    assert by_kind["network"] == pytest.approx(done[~same].kv_transfer_bytes.sum())
    assert by_kind["nvlink"] > 0 and by_kind["network"] > 0
    assert summary["hit_ratio"] > 0.5


def test_a_shared_store_too_small_for_every_worker_is_refused_at_load_time():
    # 50 MB split between 44 workers is less than one 64-token block (2.2 MB) each; one
    # instance alone would hold 22 blocks of it.
    with pytest.raises(InputError, match=r"cache\.tiers\.remote\.capacity_bytes.*less than one KV block"):
        load_scenario(ROOT / "scenarios" / "gb300-disagg-4racks.yaml", ["cache.tiers.remote.capacity_bytes=50MB"])


def test_ttft_parts_add_up_decoding_first_with_tiers():
    """SGLang's order with tiers: the decode worker reserves and starts loading its own history
    at arrival, the prefill runs, then the hand-off; TTFT is still the sum of its parts."""
    done = run_scenario(load_scenario(TIERED, TWO_RACKS)).tables["requests"].query("not rejected")
    assert len(done) > 100 and (done.decode_queue_s == 0).all()
    parts = done.queue_wait_s + done.prefill_s + done.decode_queue_s + done.kv_transfer_s + done.decode_first_step_s
    assert (parts - done.ttft_s).abs().max() < 1e-9
    assert (done.hit_tokens + done.recomputed_tokens == done.prompt_tokens).all()
    assert (done.loaded_bytes > 0).any()
