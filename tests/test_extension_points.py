"""Adding a tier kind and adding a metric, as docs/design.md ("Where does X go") describes them,
done from a test: one registration each, no edits to agentsim's own files."""

from __future__ import annotations

import dataclasses

import pytest

from agentsim.engine.economics import memory_cost
from agentsim.engine.loading import load_scenario
from agentsim.engine.run_warnings import scenario_warnings
from agentsim.engine.simulation import run_scenario
from agentsim.hardware import tier_kinds
from agentsim.hardware.tier_kinds import LinkSpec, TierKind
from agentsim.metrics import catalogue
from agentsim.metrics.catalogue import Metric
from tests.conftest import ROOT

SMALL = ["duration_s=3m", "hardware.instances=1", "workload.agent_classes.coding.arrival.concurrent=24",
         "workload.agent_classes.coding.arrival.ramp_s=10s", "hardware.kv_capacity_bytes=2GB",
         "cache.tiers.disk.enabled=false", "run.belady_headroom=false"]


@pytest.fixture
def cxl_kind():
    """CXL memory expander: one per instance, loads straight into HBM over its own link."""
    kind = TierKind(
        "cxl", "CXL-attached memory expander (test kind)",
        load_links=("cxl_read",), write_links=("cxl_write",),
        endpoints={("cxl", "hbm"): "cxl_read", ("hbm", "cxl"): "cxl_write"},
        links=(LinkSpec("cxl_read", "inst{instance}.cxl_read", "instance", "cxl",
                        lambda hw, g, cfg: cfg.bandwidth_bytes_per_s, lambda hw, cfg: cfg.latency_s),
               LinkSpec("cxl_write", "inst{instance}.cxl_write", "instance", "cxl",
                        lambda hw, g, cfg: cfg.bandwidth_bytes_per_s, lambda hw, cfg: cfg.latency_s)),
        tier_link_fields=True,
        capacity_note="a CXL expander's size is not part of the hardware profile",
    )
    tier_kinds.register_tier_kind(kind)
    yield kind
    tier_kinds.unregister_tier_kind("cxl")


def test_a_tier_kind_registered_from_outside_serves_hits(cxl_kind):
    path = ROOT / "scenarios" / "gb300-nvl72-tiers.yaml"
    overrides = SMALL + ["cache.tiers.dram.enabled=false",
                         "cache.tiers.cxl={capacity_bytes: 200GB, bandwidth_bytes_per_s: 64GB/s, latency_s: 2us}"]
    scenario = load_scenario(path, overrides)
    summary = run_scenario(scenario).summary
    assert summary["hit_ratio_by_tier"]["cxl"] > 0
    assert summary["link_kinds"]["cxl"]["bytes"] > 0
    without = run_scenario(load_scenario(path, SMALL + ["cache.tiers.dram.enabled=false"])).summary
    assert summary["hit_ratio"] > without["hit_ratio"]
    # The kind was registered without a price: its capacity is charged at zero, and that is said.
    assert summary["memory_unpriced_tiers"] == ["cxl"] and without["memory_unpriced_tiers"] == []
    assert summary["memory_cost_by_tier_usd"]["cxl"] == 0.0
    assert summary["memory_cost_usd"] == 0.0    # HBM + CXL only: nothing else below HBM to pay for
    warned = [note for note in scenario_warnings(scenario) if "price" in note]
    assert len(warned) == 1 and "cxl" in warned[0] and "cache.tiers.cxl.usd_per_gb_month" in warned[0]
    assert not [note for note in scenario_warnings(load_scenario(path, SMALL)) if "price" in note]


CXL_200GB = "cache.tiers.cxl={capacity_bytes: 200GB, bandwidth_bytes_per_s: 64GB/s, latency_s: 2us}"


def _cxl_cost_per_hour(overrides):
    """Memory price per hour of the tiers gb300-nvl72-tiers has with ``overrides`` (no run needed)."""
    scenario = load_scenario(ROOT / "scenarios" / "gb300-nvl72-tiers.yaml", SMALL + overrides)
    tiers = [{"name": "cxl", "capacity_bytes": 200e9}]
    return memory_cost(scenario, tiers, simulated_s=3600.0), scenario


def test_a_tier_kind_carries_its_price_and_a_tier_may_override_it(cxl_kind):
    """The price per GB-month is the kind's (here read from a hardware field, as DRAM's is);
    ``cache.tiers.<name>.usd_per_gb_month`` overrides it for one scenario."""
    priced = dataclasses.replace(cxl_kind, usd_per_gb_month=lambda hw, cfg: hw.dram_usd_per_gb_month / 2)
    tier_kinds.unregister_tier_kind("cxl")
    tier_kinds.register_tier_kind(priced)
    cost, scenario = _cxl_cost_per_hour([CXL_200GB])
    expected_per_hour = 200 * scenario.hardware.dram_usd_per_gb_month / 2 / 730.0
    assert cost["memory_usd_per_hour"] == pytest.approx(expected_per_hour)
    assert cost["memory_cost_by_tier_usd"]["cxl"] == pytest.approx(expected_per_hour)   # one simulated hour
    assert cost["memory_unpriced_tiers"] == []
    assert not [note for note in scenario_warnings(scenario) if "price" in note]
    override, _ = _cxl_cost_per_hour([CXL_200GB, "cache.tiers.cxl.usd_per_gb_month=1.46"])
    assert override["memory_usd_per_hour"] == pytest.approx(200 * 1.46 / 730.0)


def _configured(hw, cfg) -> bool:
    return cfg is not None


@pytest.fixture
def cxl_host_kind():
    """A CXL expander as the host tier (in place of DRAM): disk hits stage through it."""
    kind = TierKind(
        "cxl", "CXL-attached memory expander as the host tier (test kind)",
        load_links=("cxl_read",), write_links=("cxl_write",),
        endpoints={("cxl", "hbm"): "cxl_read", ("hbm", "cxl"): "cxl_write"},
        links=(LinkSpec("cxl_read", "inst{instance}.cxl_read", "instance", "cxl",
                        lambda hw, g, cfg: cfg.bandwidth_bytes_per_s, lambda hw, cfg: cfg.latency_s, built=_configured),
               LinkSpec("cxl_write", "inst{instance}.cxl_write", "instance", "cxl",
                        lambda hw, g, cfg: cfg.bandwidth_bytes_per_s, lambda hw, cfg: cfg.latency_s, built=_configured)),
        tier_link_fields=True, host=True,
        capacity_note="a CXL expander's size is not part of the hardware profile",
    )
    tier_kinds.register_tier_kind(kind)
    yield kind
    tier_kinds.unregister_tier_kind("cxl")


#: HBM over a lower tier or two, without DRAM, under enough pressure that blocks reach the disk.
NO_DRAM = [o for o in SMALL if not o.startswith("cache.tiers.disk")] + ["cache.tiers.dram.enabled=false"]


def test_a_registered_host_tier_takes_the_place_of_dram(cxl_host_kind):
    """HBM + CXL (host) + disk: disk hits are prefetched into CXL over the NVMe read link and
    loaded from there over the CXL link; the Grace C2C links carry nothing."""
    path = ROOT / "scenarios" / "gb300-nvl72-tiers.yaml"
    overrides = NO_DRAM + ["cache.tiers.cxl={capacity_bytes: 4GB, bandwidth_bytes_per_s: 64GB/s, latency_s: 2us}",
                           "cache.tiers.order=[cxl, disk]", "cache.tiers.prefetch.policy=wait_complete"]
    summary = run_scenario(load_scenario(path, overrides)).summary
    hits = summary["hit_ratio_by_tier"]
    assert hits["disk"] > 0 and hits["cxl"] > 0 and hits["dram"] == 0
    assert summary["prefetches"] > 0 and summary["prefetch_served_tokens"] > 0
    links = {name: stats["bytes"] for name, stats in summary["links"].items()}
    assert links["inst0.c2c_h2d"] == 0 and links["inst0.c2c_d2h"] == 0
    assert links["tray0.nvme_read"] > 0 and links["tray0.nvme_write"] > 0
    # Every staged disk block continues into HBM over the CXL link, with the CXL tier's own hits.
    assert links["inst0.cxl_read"] > links["tray0.nvme_read"]


def test_a_registered_host_tier_must_come_first_and_carries_prefetch(cxl_host_kind):
    from agentsim.errors import InputError

    path = ROOT / "scenarios" / "gb300-nvl72-tiers.yaml"
    cxl = "cache.tiers.cxl={capacity_bytes: 4GB, bandwidth_bytes_per_s: 64GB/s, latency_s: 2us}"
    with pytest.raises(InputError, match=r"cache\.tiers\.order.*cxl must be the first tier below HBM"):
        load_scenario(path, NO_DRAM + [cxl, "cache.tiers.order=[disk, cxl]"])
    with pytest.raises(InputError, match=r"cache\.tiers\.prefetch\.policy.*needs an enabled dram or cxl tier"):
        load_scenario(path, NO_DRAM + ["cache.tiers.prefetch.policy=best_effort"])


def test_hbm_and_disk_without_dram_load_disk_hits_through_host_memory():
    """HBM + disk only: no host tier, so no prefetch, and a disk hit is read over NVMe and
    crosses C2C into HBM (host memory as a bounce buffer); copies down go to the NVMe write link."""
    path = ROOT / "scenarios" / "gb300-nvl72-tiers.yaml"
    summary = run_scenario(load_scenario(path, NO_DRAM)).summary
    assert summary["hit_ratio_by_tier"]["disk"] > 0 and summary["hit_ratio_by_tier"]["dram"] == 0
    links = {name: stats["bytes"] for name, stats in summary["links"].items()}
    assert links["tray0.nvme_read"] > 0 and links["tray0.nvme_write"] > 0
    assert links["inst0.c2c_h2d"] == pytest.approx(links["tray0.nvme_read"])
    assert links["inst0.c2c_d2h"] == 0


def test_a_metric_registered_from_outside_reaches_the_summary_and_the_table(small_scenario_yaml):
    from rich.console import Console

    from agentsim.commands.common import summary_table

    metric = catalogue.register(Metric("long_prompt_share", "share of prompts over 10k tokens", "fraction",
                                       table="summary",
                                       compute=lambda done: float((done["prompt_tokens"] > 10_000).mean())))
    try:
        result = run_scenario(load_scenario(small_scenario_yaml))
        done = result.tables["requests"]
        done = done[~done.rejected]
        expected = float((done[done.arrival_s >= load_scenario(small_scenario_yaml).run.warmup_s]
                          .prompt_tokens > 10_000).mean())
        assert result.summary["long_prompt_share"] == pytest.approx(expected)
        console = Console(record=True, width=200)
        console.print(summary_table(result.summary))
        assert "share of prompts over 10k tokens" in console.export_text()
    finally:
        catalogue.unregister(metric.key)
    assert "long_prompt_share" not in run_scenario(load_scenario(small_scenario_yaml)).summary
