"""Soak: 24 simulated hours of the default scenario at reduced scale under invariant checking,
with the simulation's live state flat over simulated time (records aside, which grow by design)."""

import gc
import tracemalloc

import numpy as np
import pytest

from agentsim.engine.loading import load_scenario
from agentsim.engine.simulation import Simulation
from tests.conftest import ROOT

REDUCED = [
    "duration_s=24h", "run.check_invariants=true",
    "workload.agent_classes.coding.arrival.concurrent=6",
    "hardware.kv_capacity_bytes=3GB",          # about 1,300 blocks: eviction all day long
    "serving.max_batch_requests=8",
]


@pytest.mark.slow
def test_24h_soak_with_invariants_and_flat_live_state():
    scenario = load_scenario(ROOT / "scenarios" / "coding-agents.yaml", REDUCED)
    sim = Simulation(scenario)
    env = sim.env
    samples = []   # (hour, tree nodes, policy heap entries, scheduled events, live-state bytes)
    finished = [0]

    def drop_records():
        """Hand the run's records to nobody (as a streaming consumer would), so what remains is the
        simulation's live state: cache, sessions, queues, scheduled events."""
        finished[0] += len(sim.request_records)
        # Every record buffer, not only the requests': the tier hits (one row a request with a
        # hit) grew by a sealed chunk every 8,192 rows and read as a trend of the live state.
        for records in sim.record_buffers():
            records.clear()
        for stream in sim.diagnostics.streams.values():
            stream.clear()
        for recorder in sim.diagnostics.recorders:
            del recorder.ages_s[:]
            del recorder.blocks[:]

    def sampler():
        tracemalloc.start()
        while env.now < scenario.duration_s:
            yield env.timeout(3600)
            drop_records()
            cache = sim.instances[0].cache
            heap = len(getattr(cache.policy, "_heap", ()))
            nodes = sum(1 for _ in cache.iter_nodes())
            gc.collect()
            current, _peak = tracemalloc.get_traced_memory()
            samples.append((env.now / 3600, nodes, heap, len(env._queue), current))
        tracemalloc.stop()

    env.process(sampler())
    result = sim.run()
    summary = result.summary
    assert summary["complete"] is True
    assert summary["simulated_s"] >= 24 * 3600
    assert finished[0] > 5_000 and summary["evicted_blocks"] > 0   # it really ran all day
    samples = np.array(samples[1:], dtype=float)     # skip the warm-up hour
    first, last = samples[: len(samples) // 2], samples[len(samples) // 2:]
    for column, name in ((1, "tree nodes"), (2, "policy heap entries"), (3, "scheduled events")):
        assert last[:, column].max() <= 1.5 * first[:, column].max() + 10, name
    # Live bytes: no trend over the day (the second half's mean within 25% of the first's).
    assert last[:, 4].mean() <= 1.25 * first[:, 4].mean(), samples[:, 4]
