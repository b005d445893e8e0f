"""Disaggregated prefill/decode serving: the KV hand-off's timing on hand-built links, pool
placement, and whole runs (token conservation, TTFT parts, determinism, bad configurations)."""

from __future__ import annotations

import pandas as pd
import pytest
import simpy

from agentsim.cluster.serving.disaggregation import HandoffPorts, handoff, transfer_links
from agentsim.hardware.topology import Placement, place_pools
from agentsim.config.scenario import HardwareConfig
from agentsim.engine.loading import load_scenario
from agentsim.engine.simulation import run_scenario
from agentsim.errors import InputError
from tests.conftest import ROOT

SCENARIO = ROOT / "scenarios" / "coding-agents.yaml"
SMALL = ["workload.agent_classes.coding.arrival.concurrent=24", "duration_s=3m", "run.belady_headroom=false",
         "run.check_invariants=true"]
DISAGG = ["serving.disaggregation.prefill.workers=2", "serving.disaggregation.decode.workers=2"]
HW = HardwareConfig(nvlink_bytes_per_s=100e9, nvlink_latency_s=2e-6, nic_bytes_per_s=10e9, rdma_latency_s=5e-6)


def timed_transfers(sizes_bytes, same_domain: bool, efficiency: float = 1.0) -> list[float]:
    """End times of hand-offs of ``sizes_bytes`` started together from one prefill worker (4 GPUs)
    to one decode worker (4 GPUs)."""
    env = simpy.Environment()
    source, dest = HandoffPorts(env, "p", 4, HW), HandoffPorts(env, "d", 4, HW)
    links = transfer_links(source, Placement(0, 0, 0, 0), dest, Placement(1, 4, 1, 0 if same_domain else 1))
    ends = []

    def one(size):
        yield handoff(env, links, size, efficiency)
        ends.append(env.now)

    for size in sizes_bytes:
        env.process(one(size))
    env.run()
    return ends


def test_handoff_time_is_bytes_over_link_bandwidth_plus_latency():
    size = 2e9
    # Same NVLink domain: 4 GPUs x 100 GB/s of NVLink at both ends.
    assert timed_transfers([size], True) == [pytest.approx(2e-6 + size / 400e9, rel=1e-9)]
    # Different domains: the NICs, 4 x 10 GB/s.
    assert timed_transfers([size], False) == [pytest.approx(5e-6 + size / 40e9, rel=1e-9)]
    # The transfer engine's efficiency scales the bandwidth.
    assert timed_transfers([size], False, 0.5) == [pytest.approx(5e-6 + size / 20e9, rel=1e-9)]


def test_concurrent_handoffs_share_the_ports():
    size = 2e9
    ends = timed_transfers([size, size], False)
    assert ends == [pytest.approx(5e-6 + 2 * size / 40e9, rel=1e-9)] * 2


def test_pools_are_placed_domain_by_domain():
    prefill, decode = place_pools([(3, 8), (2, 32)], 4, 72)
    assert [p.first_gpu for p in prefill] == [0, 8, 16]
    assert [p.domain for p in prefill] == [0, 0, 0]
    # 24 + 32 = 56 fits the first domain; the next 32 would straddle it, so it starts at 72.
    assert [(p.first_gpu, p.domain) for p in decode] == [(24, 0), (72, 1)]
    # Numbered across the pools, prefill first; trays of 4 GPUs.
    assert [p.instance for p in prefill + decode] == [0, 1, 2, 3, 4]
    assert [p.tray for p in decode] == [6, 18]


#: The scenario's engine is SGLang, whose decode worker reserves first; both orders are run.
ORDERS = {"prefill first": ["serving.disaggregation.decode_first=false"], "decode first": []}


@pytest.fixture(scope="module", params=sorted(ORDERS))
def disaggregated_run(request):
    result = run_scenario(load_scenario(SCENARIO, SMALL + DISAGG + ORDERS[request.param]))
    result.order = request.param
    return result


def test_run_conserves_tokens_and_hands_every_call_over(disaggregated_run):
    result = disaggregated_run
    requests = result.tables["requests"]
    done = requests[~requests.rejected]
    assert len(done) > 100
    assert (done.hit_tokens + done.recomputed_tokens == done.prompt_tokens).all()
    assert done.prefill_worker.isin([0, 1]).all() and done.instance.isin([0, 1]).all()
    kv_bytes_per_token = result.scenario.model.kv_bytes_per_token
    assert (done.kv_transfer_bytes == (done.prompt_tokens - done.decode_hit_tokens) * kv_bytes_per_token).all()
    assert (done.kv_transfer_s > 0).all()
    # Sessions come back to the decode worker that holds their history: most of a prompt is
    # already there, and only the rest is sent.
    assert done.decode_hit_tokens.sum() > 0.5 * done.prompt_tokens.sum()
    summary = result.summary
    assert summary["disaggregated"] and summary["kv_transfers"] == len(requests)
    assert summary["kv_transfer_bytes"] == pytest.approx(done.kv_transfer_bytes.sum())
    assert summary["kv_transfer_bytes_by_link_kind"]["nvlink"] == pytest.approx(done.kv_transfer_bytes.sum())
    assert summary["kv_transfer_bytes_by_link_kind"]["network"] == 0   # 16 GPUs: one NVLink domain
    assert summary["ttft_kv_transfer_mean_s"] == pytest.approx(done.kv_transfer_s.mean())


def test_ttft_is_prefill_queue_plus_prefill_plus_decode_queue_plus_transfer_plus_first_step(disaggregated_run):
    done = disaggregated_run.tables["requests"].query("not rejected")
    parts = done.queue_wait_s + done.prefill_s + done.decode_queue_s + done.kv_transfer_s + done.decode_first_step_s
    assert (parts - done.ttft_s).abs().max() < 1e-9
    assert (done.prefill_s > 0).all() and (done.decode_queue_s >= 0).all()
    if disaggregated_run.order == "decode first":   # its decode wait is before the prefill, in queue_wait_s
        assert (done.decode_queue_s == 0).all()
    # The queue's causes still sum to the queue wait.
    causes = done.queue_slot_s + done.queue_kv_s + done.queue_load_s + done.queue_step_s
    assert (causes - done.queue_wait_s).abs().max() < 1e-9
    # The first token comes with the decode worker's first step: at least one decode step's time.
    assert (done.decode_first_step_s > 0).all()
    summary = disaggregated_run.summary
    assert summary["ttft_decode_first_step_mean_s"] == pytest.approx(done.decode_first_step_s.mean())


def test_disaggregated_runs_repeat(disaggregated_run):
    again = run_scenario(load_scenario(SCENARIO, SMALL + DISAGG + ORDERS[disaggregated_run.order]))
    pd.testing.assert_frame_equal(again.tables["requests"], disaggregated_run.tables["requests"])
    pd.testing.assert_frame_equal(again.tables["links"], disaggregated_run.tables["links"])


def _most_in_flight(done: pd.DataFrame) -> int:
    """Most calls at once between their prefill's admission and their end."""
    events = sorted([(t, 1) for t in done.arrival_s + done.queue_wait_s] + [(t, -1) for t in done.finish_s],
                    key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def test_decode_first_holds_a_decode_slot_from_before_the_prefill():
    """SGLang's order: a call's prefill starts only once a decode worker has reserved its slot,
    so at most the decode slots (2 workers x 3) are between prefill and end at once; prefilling
    first lets prefills run ahead of a full decode pool."""
    tight = SMALL + DISAGG + ["serving.disaggregation.decode.max_num_seqs=3"]
    first = run_scenario(load_scenario(SCENARIO, tight)).tables["requests"].query("not rejected")
    after = run_scenario(load_scenario(SCENARIO, tight + ORDERS["prefill first"])).tables["requests"].query("not rejected")
    assert len(first) > 50 and len(after) > 50
    assert _most_in_flight(first) <= 6 < _most_in_flight(after)
    # Waiting for a slot before the prefill: the prefill's admission is later, the decode queue empty.
    assert (first.decode_queue_s == 0).all() and after.decode_queue_s.max() > 0
    assert first.queue_wait_s.mean() > after.queue_wait_s.mean()


def test_a_call_its_prefill_worker_rejects_gives_its_decode_reservation_back():
    """Prompts larger than the prefill workers' KV are rejected there; decoding first, the decode
    worker had reserved a slot and KV for them and frees both (the run checks its invariants)."""
    small_prefill = SMALL + DISAGG + ["serving.disaggregation.prefill.kv_capacity_bytes=1.2GB"]
    requests = run_scenario(load_scenario(SCENARIO, small_prefill)).tables["requests"]
    rejected = requests[requests.rejected]
    assert len(rejected) > 0 and (rejected.reject_reason == "prefill_kv_capacity").all()
    assert rejected.instance.isin([0, 1]).all() and (rejected.hit_tokens == 0).all()
    assert (~requests.rejected).sum() > 100    # the others are served


def test_cross_domain_handoffs_use_the_nics():
    # 8-GPU prefill workers and 56-GPU decode workers: 16 + 56 fill rack 1, the second decode worker is in rack 2.
    result = run_scenario(load_scenario(SCENARIO, SMALL + [
        "model.profile=deepseek_v3", "serving.disaggregation.prefill.workers=2",
        "serving.disaggregation.prefill.gpus_per_worker=8", "serving.disaggregation.decode.workers=2",
        "serving.disaggregation.decode.gpus_per_worker=56"]))
    done = result.tables["requests"].query("not rejected")
    by_kind = result.summary["kv_transfer_bytes_by_link_kind"]
    to_rack_2 = done[done.instance == 1].kv_transfer_bytes.sum()
    assert to_rack_2 > 0 and by_kind["network"] == pytest.approx(to_rack_2)
    assert by_kind["nvlink"] == pytest.approx(done[done.instance == 0].kv_transfer_bytes.sum())


def test_the_prefill_pool_router_tracks_no_active_blocks():
    """As Dynamo's prefill router: kv_aware over the prefill pool without active blocks, over
    the decode pool with them."""
    from agentsim.engine.disaggregated import DisaggregatedCluster
    cluster = DisaggregatedCluster(simpy.Environment(), load_scenario(SCENARIO, SMALL + DISAGG), lambda call: None, False)
    assert not cluster.front.prefill_router.params.track_active_blocks
    assert cluster.front.decode_router.params.track_active_blocks


def test_decode_pool_takes_its_own_router():
    requests = run_scenario(load_scenario(SCENARIO, SMALL + DISAGG + [
        "serving.disaggregation.decode_router=round_robin"])).tables["requests"]
    counts = requests.instance.value_counts()
    assert set(counts.index) == {0, 1} and abs(counts[0] - counts[1]) <= 1


def test_aggregated_runs_have_no_handoff_columns_filled():
    requests = run_scenario(load_scenario(SCENARIO, SMALL)).tables["requests"]
    assert (requests.prefill_worker == -1).all() and requests.kv_transfer_s.isna().all()


@pytest.mark.parametrize("override,fragment", [
    ("serving.disaggregation.decode.parallelism.tp=3", "serving.disaggregation.decode.parallelism.tp"),
    ("serving.disaggregation.prefill.gpus_per_worker=1", "serving.disaggregation.prefill.gpus_per_worker"),
    ("cache.tiers.peer_hbm=true", "cache.tiers.peer_hbm"),
    ("serving.disaggregation.decode_router=nearest", "unknown router"),
])
def test_bad_disaggregation_is_reported_with_its_path(override, fragment):
    with pytest.raises(InputError) as info:
        load_scenario(SCENARIO, SMALL + DISAGG + [override])
    assert fragment in str(info.value)


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_prefill_router_keeps_an_idle_pool_on_the_prefix_and_spreads_a_burst(order):
    """Dynamo's cost over the prefill pool: a worker without the sessions' shared prefix (the
    coding agents' ~15K-token system prompt) costs that many more prefill tokens, so while the
    pool is nearly idle every prefill goes to the worker that holds it; once queued prefill
    tokens outweigh the prefix, the other worker takes its share. Both orders route the same
    way: deciding on the decode worker first holds calls back before the prefill router, but
    the router's view of the prefill workers' load (routed prefill tokens until the first
    token) is the same."""
    idle = run_scenario(load_scenario(SCENARIO, SMALL + DISAGG + ORDERS[order])).tables["requests"]
    idle = idle[~idle.rejected]
    assert idle.prefill_worker.value_counts().max() >= 0.95 * len(idle)
    burst = SMALL + DISAGG + ORDERS[order] + ["workload.agent_classes.coding.arrival.concurrent=160", "duration_s=1m"]
    loaded = run_scenario(load_scenario(SCENARIO, burst)).tables["requests"]
    loaded = loaded[~loaded.rejected]
    counts = loaded.prefill_worker.value_counts()
    assert len(loaded) > 150 and set(counts.index) == {0, 1}
    assert counts.max() <= 1.2 * len(loaded) / 2     # the burst is spread evenly
