"""``cache.tiers`` mistakes give one InputError naming the file, the line and the YAML path (the
CLI prints it as one line and exits 2); a user-given tier ``order`` and ``links`` overrides work."""

from __future__ import annotations

import pytest
import simpy

from agentsim.engine.loading import load_scenario
from agentsim.errors import InputError
from agentsim.engine.simulation import Simulation

from tests.conftest import run_cli

BASE = """\
name: tiers-config
seed: 1
duration_s: 30s
hardware: {profile: gb300_nvl72, gpus_per_instance: 4, instances: 2, kv_capacity_bytes: 6GB}
model: {profile: deepseek_v3}
cache:
  block_tokens: 64
  tiers:
    dram: {capacity_bytes: 40GB, eviction: lru}
    disk: {capacity_bytes: 200GB, eviction: lru}
    load_rule: cost_model
workload:
  agent_classes:
    coding:
      arrival: {kind: population, concurrent: 2}
      calls_per_session: 3
      tool_gap_s: 2.0
"""
DRAM = "    dram: {capacity_bytes: 40GB, eviction: lru}\n"
DISK = "    disk: {capacity_bytes: 200GB, eviction: lru}\n"
RULE = "    load_rule: cost_model\n"


def write(tmp_path, old, new, extra_hw=""):
    assert old in BASE
    text = BASE.replace(old, new, 1)
    if extra_hw:
        text = text.replace("kv_capacity_bytes: 6GB}", f"kv_capacity_bytes: 6GB, {extra_hw}}}")
    path = tmp_path / "tiers.yaml"
    path.write_text(text)
    return path


def line_of(path, needle):
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if needle in line:
            return number
    raise AssertionError(needle)


CASES = [
    # id, old, new, line needle, fragments
    ("remote-without-capacity", RULE, "    remote: {bandwidth_bytes_per_s: 100GB/s}\n" + RULE, "remote:",
     ["cache.tiers.remote.capacity_bytes", "needs capacity_bytes"]),
    ("unknown-tier-eviction-policy", DISK, "    disk: {capacity_bytes: 200GB, eviction: lfuu}\n", "disk:",
     ["cache.tiers.disk.eviction.name", "'lfuu'", "did you mean 'lfu'"]),
    ("bad-tier-policy-params", DRAM, "    dram: {capacity_bytes: 40GB, eviction: {name: s3fifo, params: {small_ratio: 2}}}\n",
     "dram:", ["cache.tiers.dram.eviction.params.small_ratio"]),
    ("unknown-tier-policy-param", DRAM, "    dram: {capacity_bytes: 40GB, eviction: {name: slru, params: {protected: 0.5}}}\n",
     "dram:", ["cache.tiers.dram.eviction.params.protected", "unknown parameter"]),
    ("tier-smaller-than-a-block", DRAM, "    dram: {capacity_bytes: 1MB, eviction: lru}\n", "dram:",
     ["cache.tiers.dram.capacity_bytes", "less than one KV block"]),
    ("bandwidth-on-a-local-tier", DRAM, "    dram: {capacity_bytes: 40GB, bandwidth_bytes_per_s: 1TB/s}\n", "dram:",
     ["cache.tiers.dram.bandwidth_bytes_per_s", "remote tier only"]),
    ("exclusive-write-through", DRAM, "    dram: {capacity_bytes: 40GB, inclusive: false, write_policy: write_through}\n",
     "dram:", ["cache.tiers.dram", "exclusive"]),
    ("prefetch-without-a-tier-below-dram", DISK, "    prefetch: {policy: wait_complete}\n", "prefetch:",
     ["cache.tiers.prefetch.policy", "needs an enabled dram tier and a tier below it"]),
    ("unknown-prefetch-policy", RULE, RULE + "    prefetch: {policy: eager}\n", "prefetch:",
     ["cache.tiers.prefetch.policy", "'eager'"]),
    ("demote-without-lower-tiers", DRAM + DISK, "    peer_hbm: true\n    on_tool_call: demote\n", "on_tool_call",
     ["cache.tiers.on_tool_call", "needs an enabled tier below HBM"]),
    ("tiers-in-the-wrong-order", DRAM, "    order: [disk, dram]\n" + DRAM, "order:",
     ["cache.tiers.order", "wrong order [disk, dram]", "dram must be the first"]),
    ("order-names-an-unconfigured-tier", DRAM, "    order: [dram, remote, disk]\n" + DRAM, "order:",
     ["cache.tiers.order[1]", "'remote'", "not configured"]),
    ("order-misses-a-tier", DRAM, "    order: [dram]\n" + DRAM, "order:",
     ["cache.tiers.order", "'disk' is configured but missing"]),
    ("order-repeats-a-tier", DRAM, "    order: [dram, disk, dram]\n" + DRAM, "order:",
     ["cache.tiers.order[2]", "listed twice"]),
    ("order-unknown-tier", DRAM, "    order: [dram, tape]\n" + DRAM, "order:",
     ["cache.tiers.order[1]", "'tape'"]),
    ("link-to-an-unknown-tier", RULE, RULE + "    links: [{from: dram, to: tape, bandwidth_bytes_per_s: 1GB/s}]\n",
     "links:", ["cache.tiers.links[0].to", "unknown tier 'tape'"]),
    ("link-to-an-unconfigured-tier", RULE, RULE + "    links: [{from: remote, to: dram, bandwidth_bytes_per_s: 1GB/s}]\n",
     "links:", ["cache.tiers.links[0].from", "'remote'", "not configured"]),
    ("link-between-unjoined-tiers", RULE, RULE + "    links: [{from: disk, to: hbm, bandwidth_bytes_per_s: 1GB/s}]\n",
     "links:", ["cache.tiers.links[0]", "no link goes from disk to hbm"]),
    ("link-without-values", RULE, RULE + "    links: [{from: disk, to: dram}]\n", "links:",
     ["cache.tiers.links[0]", "needs bandwidth_bytes_per_s or latency_s"]),
    ("link-unknown-key", RULE, RULE + "    links: [{from: disk, to: dram, bandwith: 1GB/s}]\n", "links:",
     ["cache.tiers.links[0].bandwith", "did you mean 'bandwidth_bytes_per_s'"]),
]


@pytest.mark.parametrize("case_id,old,new,needle,fragments", CASES, ids=[c[0] for c in CASES])
def test_tiers_mistake_is_one_input_error_with_file_line_and_path(tmp_path, case_id, old, new, needle, fragments):
    path = write(tmp_path, old, new)
    with pytest.raises(InputError) as info:
        load_scenario(path)
    text = str(info.value)
    assert "\n" not in text
    for fragment in [str(path), f"line {line_of(path, needle)}", *fragments]:
        assert fragment in text, (fragment, text)


def test_disk_tier_without_nvme_drives(tmp_path):
    path = write(tmp_path, DRAM, DRAM, extra_hw="nvme_drives_per_tray: 0")
    with pytest.raises(InputError, match=r"line 10: cache\.tiers\.disk: a disk tier needs local NVMe drives"):
        load_scenario(path)


def test_cli_prints_one_line_and_exits_2(tmp_path):
    path = write(tmp_path, RULE, "    remote: {bandwidth_bytes_per_s: 100GB/s}\n" + RULE)
    result = run_cli("validate", str(path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in result.stderr
    assert f"line {line_of(path, 'remote:')}: cache.tiers.remote.capacity_bytes" in lines[0]


def test_disabled_tiers_may_stay_in_order_and_links(tmp_path):
    path = write(tmp_path, DRAM, "    order: [dram, disk]\n    links: [{from: disk, to: dram, latency_s: 1ms}]\n" + DRAM)
    scenario = load_scenario(path, ["cache.tiers.disk.enabled=false"])
    assert [name for name, _ in scenario.cache.tiers.enabled_tiers()] == ["dram"]


def test_order_puts_a_remote_store_above_disk_and_links_override_bandwidths(tmp_path):
    path = write(tmp_path, DRAM, "    order: [dram, remote, disk]\n"
                                 "    remote: {capacity_bytes: 1TB, bandwidth_bytes_per_s: 200GB/s}\n"
                                 "    links: [{from: disk, to: dram, bandwidth_bytes_per_s: 10GB/s, latency_s: 1ms},\n"
                                 "            {from: dram, to: hbm, bandwidth_bytes_per_s: 1TB/s}]\n" + DRAM)
    scenario = load_scenario(path)
    sim = Simulation(scenario, env=simpy.Environment())
    assert [t.name for t in sim.instances[0].cache.tiers] == ["hbm", "dram", "remote", "disk"]
    links = sim.hierarchy.topology.all_links
    assert links["tray0.nvme_read"].bandwidth_bytes_per_s == 10e9 and links["tray0.nvme_read"].latency_s == 1e-3
    assert links["inst0.c2c_h2d"].bandwidth_bytes_per_s == 1e12 and links["inst1.c2c_h2d"].bandwidth_bytes_per_s == 1e12
    assert links["tray0.nvme_write"].bandwidth_bytes_per_s == 4 * 3.5e9      # not overridden
    assert links["remote_store"].bandwidth_bytes_per_s == 200e9
    # HBM evictions now demote into the remote store (the tier right below DRAM), then disk.
    result = sim.run()
    assert result.summary["requests"] > 0
