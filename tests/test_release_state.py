"""A run that lets go of its live state before building the request table (what ``agentsim run``
and sweeps do through ``run_scenario``) gives exactly the result of one that keeps it, and the
state really goes."""

from __future__ import annotations

import gc
import math
import weakref

import pytest

from agentsim.engine.loading import load_scenario
from agentsim.engine.simulation import Simulation, run_scenario
from tests.conftest import ROOT

WALL_CLOCK = {"wall_s", "simulated_requests_per_wall_s", "headroom_replay_wall_s"}

CASES = {
    # HBM, DRAM and NVMe tiers on two instances: the hierarchy's summary and link table.
    "tiers": ("gb300-nvl72-tiers.yaml", ["duration_s=90s", "hardware.instances=2",
                                         "workload.agent_classes.coding.arrival.concurrent=24"]),
    # Prefill and decode pools: the disaggregated summary, filled from the requests.
    "disaggregated": ("gb300-disagg.yaml", ["duration_s=60s"]),
    # A plain HBM cache with the recompute split and the diagnostics.
    "plain": ("coding-agents.yaml", ["duration_s=3m", "workload.agent_classes.coding.arrival.concurrent=16"]),
}


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b or repr(a) == repr(b)


@pytest.mark.parametrize("case", sorted(CASES))
def test_releasing_the_state_changes_nothing_in_the_result(case):
    name, sets = CASES[case]
    kept = Simulation(load_scenario(ROOT / "scenarios" / name, sets)).run()
    released = run_scenario(load_scenario(ROOT / "scenarios" / name, sets))
    assert kept.summary["requests"] > 0
    keys = [key for key in kept.summary if key not in WALL_CLOCK]
    # Same keys in the same order (summary.json's text), and the same values.
    assert keys == [key for key in released.summary if key not in WALL_CLOCK]
    assert [key for key in keys if not _same(kept.summary[key], released.summary[key])] == []
    assert list(kept.tables) == list(released.tables)
    for table in kept.tables:
        assert kept.tables[table].equals(released.tables[table]), table


def test_a_released_simulation_frees_its_caches_sessions_and_events():
    name, sets = CASES["tiers"]
    simulation = Simulation(load_scenario(ROOT / "scenarios" / name, sets))
    watched = [weakref.ref(simulation.instances[0].cache), weakref.ref(simulation.env),
               weakref.ref(simulation.driver), weakref.ref(simulation.router)]
    result = simulation.run(release_state=True)
    gc.collect()
    assert result.summary["requests"] > 0 and len(result.tables["requests"]) == result.summary["requests"]
    assert [ref() for ref in watched] == [None] * len(watched)
    assert simulation.released and not hasattr(simulation, "instances")


def test_a_kept_simulation_can_still_be_inspected():
    name, sets = CASES["plain"]
    simulation = Simulation(load_scenario(ROOT / "scenarios" / name, sets))
    simulation.run()
    assert simulation.released is False
    assert simulation.instances[0].cache.inserted_blocks > 0


def test_the_deferred_diagnostics_need_none_of_the_live_state():
    """The eviction ages' statistics, the TTL diagnostics built on them and the headroom replay
    run after the state has gone: what fills them holds no cache or event loop, and filling them
    then gives the summary of a run that kept its state."""
    sets = ["duration_s=4m", "workload.agent_classes.coding.arrival.concurrent=16"]
    simulation = Simulation(load_scenario(ROOT / "scenarios" / "ttl-capacity-bound.yaml", sets))
    kept = simulation.run().summary
    assert kept["ttl_warning"] and math.isfinite(kept["characteristic_eviction_time_s"])
    assert kept["belady_headroom_skipped"] is None          # the replay ran
    early, deferred = simulation.diagnostics.summary_before_release()
    deferred_keys = ["characteristic_eviction_time_s", "characteristic_eviction_time_mean_s",
                     "characteristic_eviction_time_max_s", "characteristic_eviction_time_by_tier_s",
                     "ttl_tier", "ttl_tier_characteristic_eviction_time_s", "ttl_margin_s", "ttl_warning"]
    assert [early[key] for key in deferred_keys] == [None] * len(deferred_keys)
    assert "belady_replay_hit_ratio" not in early
    watched = [weakref.ref(simulation.instances[0].cache), weakref.ref(simulation.env)]
    del simulation
    gc.collect()
    assert [ref() for ref in watched] == [None, None]
    filled = deferred.finish(early)
    keys = [key for key in filled if key not in WALL_CLOCK]
    assert keys == [key for key in kept if key in filled and key not in WALL_CLOCK]
    assert [key for key in keys if not _same(filled[key], kept[key])] == []
