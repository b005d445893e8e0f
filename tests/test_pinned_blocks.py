"""``pinned_blocks`` (a count kept by every pin, unpin and commit, and for a tiered cache by every
HBM entry or exit too) must equal the sum over the whole tree on every call engine-style admission
makes (plain and tiered caches, real runs: loads, prefetches, tool-gap demotions, recompute and
swap preemption included)."""

import pytest

from agentsim.cache.radix import RadixCache
from agentsim.cache.tiers import TieredCache
from agentsim.engine.loading import load_scenario
from agentsim.engine.simulation import Simulation
from tests.conftest import ROOT


def _whole_tree(cache) -> int:
    tiered = isinstance(cache, TieredCache)
    return sum(len(n.keys) for n in cache.iter_nodes()
               if n.lock_ref > 0 and (not tiered or n.entries[0] is not None)) + cache.reserved_blocks


@pytest.mark.parametrize("scenario, overrides", [
    ("gb300-nvl72-tiers.yaml", ["duration_s=3m", "workload.agent_classes.coding.arrival.concurrent=60",
                                "hardware.instances=2"]),
    ("gb300-nvl72-tiers.yaml", ["duration_s=3m", "workload.agent_classes.coding.arrival.concurrent=60",
                                "hardware.instances=2", "cache.tiers.prefetch.policy=wait_complete",
                                "cache.tiers.on_tool_call=demote", "cache.tiers.prefetch_before_return=true"]),
    ("coding-agents.yaml", ["duration_s=5m", "serving.engine=sglang"]),
    # A plain cache under pressure: SGLang retracts (the retracted requests commit their blocks
    # and unpin); TensorRT-LLM's guarantee holds requests back instead.
    ("coding-agents.yaml", ["duration_s=5m", "serving.engine=sglang", "hardware.kv_capacity_bytes=2GB"]),
    ("coding-agents.yaml", ["duration_s=5m", "serving.engine=trtllm", "hardware.kv_capacity_bytes=2GB"]),
])
def test_pinned_blocks_equals_the_whole_tree_sum(scenario, overrides, monkeypatch):
    calls = []
    for cls in (RadixCache, TieredCache):
        original = cls.pinned_blocks

        def checked(self, _original=original):
            value = _original(self)
            assert value == _whole_tree(self)
            calls.append(value)
            return value

        monkeypatch.setattr(cls, "pinned_blocks", checked)
    Simulation(load_scenario(ROOT / "scenarios" / scenario, overrides)).run()
    assert len(calls) > 100 and max(calls) > 0          # asked often, with pins held


def test_tiered_pinned_count_under_swap_preemption():
    """vLLM's swap preemption moves pinned requests' KV out of HBM and back: the tiered cache's
    count of pinned HBM blocks is checked against the tree at every invariant check."""
    scenario = load_scenario(ROOT / "scenarios" / "gb300-nvl72-tiers.yaml", [
        "duration_s=3m", "workload.agent_classes.coding.arrival.concurrent=150", "hardware.instances=1",
        "serving.engine=vllm", "serving.preemption=swap", "run.check_invariants=true"])
    checks = []
    original = TieredCache.check_invariants

    def counted(self):
        checks.append(self.pinned_hbm_blocks)
        original(self)

    TieredCache.check_invariants = counted
    try:
        result = Simulation(scenario).run()
    finally:
        TieredCache.check_invariants = original
    assert result.summary["swap_preemptions"] > 0 and max(checks) > 0
