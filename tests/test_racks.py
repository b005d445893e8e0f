"""Several racks (``hardware.racks``): placement across racks, which link a peer-HBM load uses
inside a rack and across racks, its time with and without contention, and a 2-rack run."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import simpy

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.tiers import TieredCache, TierSpec
from agentsim.cluster.costmodel import RooflineCostModel
from agentsim.cluster.request import LLMRequest
from agentsim.cluster.serving.instance import ServingInstance
from agentsim.cluster.serving.movement import stream_through
from agentsim.engine.loading import load_scenario
from agentsim.engine.simulation import run_scenario
from agentsim.errors import InputError
from agentsim.results import WALL_CLOCK_KEYS
from agentsim.hardware.links import Link
from agentsim.hardware.topology import InstanceLinks, build_topology, place

from tests.conftest import ROOT


B = 64
COST = RooflineCostModel(active_params=37e9, total_params=671e9, bytes_per_param=1.0, attn_coeff=2.5e6,
                         kv_bytes_per_token=70272, flops_per_s=5e15 * 0.35, bytes_per_s=8e12 * 0.7)
NIC_BPS = 400e9       # 4 GPUs x 100 GB/s
NIC_LATENCY_S = 5e-6
NVLINK_BPS = 3.6e12   # 4 GPUs x 900 GB/s


def test_instances_split_evenly_between_racks_and_numbered_rack_by_rack():
    placements = place(8, 4, 4, 72, racks=2)
    assert [p.rack for p in placements] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [p.domain for p in placements] == [0, 0, 0, 0, 1, 1, 1, 1]
    # Trays continue across racks: rack 0 has trays 0-3, rack 1 trays 4-7.
    assert [p.tray for p in placements] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert [p.first_gpu for p in placements] == [0, 4, 8, 12, 16, 20, 24, 28]
    # One rack is the old placement, unchanged.
    assert [(p.tray, p.domain, p.rack) for p in place(36, 4, 4, 72)] == \
        [((4 * i) // 4, (4 * i) // 72, 0) for i in range(36)]


def _two_rack_scenario(extra=()):
    return load_scenario(ROOT / "scenarios" / "coding-agents.yaml",
                         ["hardware.instances=4", "hardware.racks=2", "cache.tiers.peer_hbm=true", *extra])


def test_peer_load_stays_on_nvlink_inside_a_rack_and_crosses_both_nics_between_racks():
    env = simpy.Environment()
    topology = build_topology(env, _two_rack_scenario())
    assert topology.peers(0) == [1, 2, 3]       # its rack first
    assert topology.peers(2) == [3, 0, 1]
    inside = topology.peer_load_links(0, 1)
    assert [link.name for link in inside] == ["inst0.nvlink_in"]
    across = topology.peer_load_links(0, 2)
    assert [link.name for link in across] == ["inst2.nic", "inst0.nic"]
    assert all(link.kind == "network" for link in across)
    assert across[0].bandwidth_bytes_per_s == pytest.approx(NIC_BPS)


def test_racks_that_do_not_split_the_instances_are_a_clear_error(tmp_path):
    with pytest.raises(InputError, match=r"hardware\.racks.*not split evenly"):
        load_scenario(ROOT / "scenarios" / "coding-agents.yaml", ["hardware.instances=3", "hardware.racks=2"])
    with pytest.raises(InputError, match=r"hardware\.racks.*more than its NVLink domain"):
        load_scenario(ROOT / "scenarios" / "coding-agents.yaml", ["hardware.instances=40", "hardware.racks=2"])


def _run_transfers(sizes_and_links):
    env = simpy.Environment()
    links = {name: Link(env, name, NIC_BPS, NIC_LATENCY_S, "network") for name in ("a.nic", "b.nic", "c.nic")}
    done = {}

    def one(tag, size, names):
        yield env.process(stream_through(env, [links[n] for n in names], size))
        done[tag] = env.now

    for tag, size, names in sizes_and_links:
        env.process(one(tag, size, names))
    env.run()
    return done, links


def test_cross_rack_transfer_time_is_bytes_over_nic_bandwidth_plus_latency():
    size = 4e9
    done, links = _run_transfers([("x", size, ["a.nic", "b.nic"])])
    assert done["x"] == pytest.approx(size / NIC_BPS + NIC_LATENCY_S, rel=1e-9)
    assert links["a.nic"].bytes_total == pytest.approx(size) and links["b.nic"].bytes_total == pytest.approx(size)


def test_cross_rack_transfers_sharing_a_nic_take_twice_as_long():
    size = 4e9
    # Two loads out of the same sender NIC to two different receivers: the sender's NIC is the
    # shared bottleneck, so both finish after twice the bytes' time.
    done, _ = _run_transfers([("x", size, ["a.nic", "b.nic"]), ("y", size, ["a.nic", "c.nic"])])
    assert done["x"] == pytest.approx(2 * size / NIC_BPS + NIC_LATENCY_S, rel=1e-6)
    assert done["y"] == pytest.approx(done["x"], rel=1e-9)


def _instance(env, index, nic):
    lru = EVICTION_POLICIES.get("lru")
    cache = TieredCache(200_000, lru(), [TierSpec("dram", 400_000, lru(), "write_back")])
    links = InstanceLinks(h2d=Link(env, f"h2d{index}", 600e9, 10e-6), d2h=Link(env, f"d2h{index}", 520e9, 10e-6),
                          nvlink_in=Link(env, f"nvlink{index}", NVLINK_BPS, 2e-6, "nvlink"), nic=nic)
    return ServingInstance(env, index, cache, COST, B, 8, 8192, on_finish=lambda r: r.done.succeed(), links=links,
                           check_invariants=True)


def _request(env, rid, prompt_tokens):
    keys = list(range(prompt_tokens // B))
    return LLMRequest(rid, 0, "a", 0, rid, env.now, prompt_tokens, 1, len(keys), keys, env.event())


@pytest.mark.parametrize("same_rack", [True, False])
def test_a_peer_hit_loads_over_the_link_the_topology_gives(same_rack):
    """Instance 0 computes a 50K-token prompt; instance 1 then serves the same prompt from 0's
    HBM: over NVLink when both are in one rack, over both NICs when they are not."""
    env = simpy.Environment()
    nics = [Link(env, f"nic{i}", NIC_BPS, NIC_LATENCY_S, "network") for i in range(2)]
    first, second = _instance(env, 0, nics[0]), _instance(env, 1, nics[1])
    path = [second.links.nvlink_in] if same_rack else [nics[0], nics[1]]
    second.peers, second.peer_links = [first], {0: path}
    prompt = 50_000 + B
    warm = _request(env, 0, prompt)
    first.submit(warm)
    env.run(until=warm.done)
    req = _request(env, 1, prompt)
    second.submit(req)
    env.run(until=req.done)
    peer_blocks = prompt // B  # every full block; the 16 tokens of the partial one are computed
    peer_bytes = peer_blocks * B * COST.kv_bytes_per_token
    assert req.tier_hit_tokens["peer_hbm"] == peer_blocks * B
    expected_s = (peer_bytes / NVLINK_BPS + 2e-6) if same_rack else (peer_bytes / NIC_BPS + NIC_LATENCY_S)
    assert req.load_done_s - req.admitted_s == pytest.approx(expected_s, rel=1e-6)
    assert nics[0].bytes_total == pytest.approx(0 if same_rack else peer_bytes)
    assert nics[1].bytes_total == pytest.approx(0 if same_rack else peer_bytes)


TWO_RACKS = ["duration_s=3m", "hardware.instances=4", "hardware.racks=2", "hardware.kv_capacity_bytes=6GB",
             "workload.agent_classes.coding.arrival.concurrent=24", "workload.agent_classes.coding.arrival.ramp_s=20s",
             "cache.tiers.dram.enabled=false", "cache.tiers.peer_hbm=true", "serving.router=round_robin",
             "run.check_invariants=true"]


@pytest.mark.slow
def test_a_two_rack_run_conserves_tokens_loads_across_racks_and_is_deterministic():
    path = ROOT / "scenarios" / "gb300-nvl72-tiers.yaml"
    first = run_scenario(load_scenario(path, TWO_RACKS))
    again = run_scenario(load_scenario(path, TWO_RACKS))
    requests = first.tables["requests"]
    done = requests[~requests.rejected]
    assert len(done) > 100
    assert (done.hit_tokens + done.recomputed_tokens == done.prompt_tokens).all()
    assert done.hit_tokens_peer_hbm.sum() > 0
    links = first.summary["links"]
    # Round-robin spreads a session over both racks, so some peer hits come over the NICs.
    assert sum(links[f"inst{i}.nic"]["bytes"] for i in range(4)) > 0
    assert sum(links[f"inst{i}.nvlink_in"]["bytes"] for i in range(4)) > 0
    skip = set(WALL_CLOCK_KEYS)

    def stable(summary):  # JSON text, so NaN equals NaN
        return json.dumps({k: v for k, v in summary.items() if k not in skip}, sort_keys=True, default=str)

    assert stable(first.summary) == stable(again.summary)
    pd.testing.assert_frame_equal(first.tables["requests"], again.tables["requests"])


def _store_instance(env, index, store, nic_bps=NIC_BPS):
    lru = EVICTION_POLICIES.get("lru")
    cache = TieredCache(200_000, lru(), [TierSpec("remote", 400_000, lru(), "write_back")])
    links = InstanceLinks(h2d=Link(env, f"h2d{index}", 600e9, 10e-6), d2h=Link(env, f"d2h{index}", 520e9, 10e-6),
                          nic=Link(env, f"nic{index}", nic_bps, NIC_LATENCY_S, "network"), store=store)
    return ServingInstance(env, index, cache, COST, B, 8, 8192, on_finish=lambda r: r.done.succeed(), links=links,
                           check_invariants=True)


def test_any_instance_hits_another_instance_share_of_a_shared_store():
    """Instance 0 computes a prompt and its KV goes down to its share of the store; instance 1
    (another rack: no peer HBM) then loads it from the store over the store link, its NIC and
    C2C, one after the other, instead of recomputing it."""
    env = simpy.Environment()
    store = Link(env, "remote_store", 400e9, 20e-6, "network")
    first, second = _store_instance(env, 0, store), _store_instance(env, 1, store)
    second.store_peers, second.store_tier = [first], 1
    prompt = 50_000 + B
    warm = _request(env, 0, prompt)
    first.submit(warm)
    env.run(until=warm.done)
    blocks = prompt // B
    deepest = first.cache.match(list(range(blocks)), env.now, touch=False).node
    assert first.cache.demote_path(deepest, env.now) == blocks
    env.run(until=env.now + 1.0)   # the copy into the store is over: the read has the links alone
    assert store.bytes_total == pytest.approx(blocks * B * COST.kv_bytes_per_token)
    req = _request(env, 1, prompt)
    second.submit(req)
    env.run(until=req.done)
    size = blocks * B * COST.kv_bytes_per_token
    assert req.tier_hit_tokens["remote"] == blocks * B
    assert second.tier_stats["shared_store_hit_blocks"] == blocks
    expected_s = (20e-6 + size / 400e9) + (NIC_LATENCY_S + size / NIC_BPS) + (10e-6 + size / 600e9)
    assert req.load_done_s - req.admitted_s == pytest.approx(expected_s, rel=1e-6)
    assert second.links.nic.bytes_total == pytest.approx(size)
    # Without the shared store the second instance recomputes the prompt.
    third = _store_instance(env, 2, store)
    again = _request(env, 2, prompt)
    third.submit(again)
    env.run(until=again.done)
    assert again.hit_tokens == 0


def test_a_shared_store_splits_its_capacity_between_the_instances():
    scenario = load_scenario(ROOT / "scenarios" / "gb300-nvl72-tiers.yaml",
                             ["hardware.instances=4", "hardware.racks=2", "cache.tiers.remote.capacity_bytes=8TB",
                              "cache.tiers.remote.shared=true", "cache.tiers.order=[dram, disk, remote]"])
    from agentsim.hardware.topology import tier_capacity_bytes

    topology = build_topology(simpy.Environment(), scenario)
    assert tier_capacity_bytes(scenario, "remote", scenario.cache.tiers.remote, topology, 3) == pytest.approx(2e12)


def test_shared_on_a_local_tier_is_a_clear_error():
    with pytest.raises(InputError, match=r"cache\.tiers\.dram\.shared.*remote tier only"):
        load_scenario(ROOT / "scenarios" / "gb300-nvl72-tiers.yaml", ["cache.tiers.dram.shared=true"])


SHARED_STORE = ["duration_s=3m", "hardware.instances=4", "hardware.racks=2", "hardware.kv_capacity_bytes=3GB",
                "workload.agent_classes.coding.arrival.concurrent=24", "workload.agent_classes.coding.arrival.ramp_s=20s",
                "cache.tiers.dram.capacity_bytes=4GB", "cache.tiers.disk.enabled=false",
                "cache.tiers.remote.capacity_bytes=2TB", "cache.tiers.remote.shared=true",
                # LMCache style: every block is written through to DRAM and the store.
                "cache.tiers.dram.write_policy=write_through", "cache.tiers.remote.write_policy=write_through",
                "serving.router=round_robin", "run.check_invariants=true"]


@pytest.mark.slow
def test_a_two_rack_run_with_a_shared_store_hits_other_instances_shares_and_is_deterministic():
    path = ROOT / "scenarios" / "gb300-nvl72-tiers.yaml"
    first = run_scenario(load_scenario(path, SHARED_STORE))
    again = run_scenario(load_scenario(path, SHARED_STORE))
    done = first.tables["requests"][~first.tables["requests"].rejected]
    assert (done.hit_tokens + done.recomputed_tokens == done.prompt_tokens).all()
    assert first.summary["shared_store_hit_blocks"] > 0
    assert done.hit_tokens_remote.sum() > 0
    assert first.summary["links"]["remote_store"]["bytes"] > 0
    # The same store capacity (4 x 500 GB), each instance reading only what it wrote.
    private = run_scenario(load_scenario(path, SHARED_STORE + ["cache.tiers.remote.shared=false",
                                                               "cache.tiers.remote.capacity_bytes=500GB"])).summary
    assert private["shared_store_hit_blocks"] == 0
    # Round-robin moves sessions between instances: reading the others' shares raises the hit ratio.
    assert first.summary["hit_ratio"] > private["hit_ratio"]
    assert first.summary["ttft_p99_s"] <= private["ttft_p99_s"] * 1.05
    assert json.dumps({k: v for k, v in first.summary.items() if k not in WALL_CLOCK_KEYS}, sort_keys=True, default=str) \
        == json.dumps({k: v for k, v in again.summary.items() if k not in WALL_CLOCK_KEYS}, sort_keys=True, default=str)
