"""Many runs in one process (a sweep's Dask worker, a notebook) do not accumulate memory: nothing
module-level keeps a finished simulation alive."""

from __future__ import annotations

import gc
import tracemalloc
import weakref

from agentsim.engine.loading import load_scenario
from agentsim.engine.simulation import Simulation

BRIEF = ["duration_s=30s"]


def _run_once(path, overrides) -> weakref.ref:
    simulation = Simulation(load_scenario(path, overrides))
    result = simulation.run()
    assert result.summary["requests"] > 0
    return weakref.ref(simulation)


def test_a_finished_simulation_is_freed(small_scenario_yaml):
    """Its scenario's deployment has no measured step tables (the roofline is used): the reason
    was cached as an exception whose traceback, grown by every re-raise, held every run's frames."""
    refs = [_run_once(small_scenario_yaml, BRIEF) for _ in range(3)]
    gc.collect()
    assert [ref() is None for ref in refs] == [True, True, True]


def test_repeated_runs_in_one_process_stay_within_a_memory_bound(small_scenario_yaml):
    """Before the fix each run of this scenario kept about 200 kB (its requests, keys and
    samples); what is left now is a few kB of library caches in total."""
    for _ in range(2):      # warm-up: imports, profile catalogues, timing-table look-ups
        _run_once(small_scenario_yaml, BRIEF)
    gc.collect()
    tracemalloc.start()
    try:
        base_bytes = tracemalloc.get_traced_memory()[0]
        runs = 5
        for _ in range(runs):
            _run_once(small_scenario_yaml, BRIEF)
        gc.collect()
        grown_bytes = tracemalloc.get_traced_memory()[0] - base_bytes
    finally:
        tracemalloc.stop()
    assert grown_bytes < 20_000 * runs, f"{grown_bytes / 1e3:.0f} kB kept by {runs} finished runs"
