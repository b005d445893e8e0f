"""``pinned_blocks`` walks only the pinned subtree; it must equal the sum over the whole tree on
every call engine-style admission makes (plain and tiered caches, real runs)."""

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
    ("coding-agents.yaml", ["duration_s=5m", "serving.engine=sglang"]),
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
