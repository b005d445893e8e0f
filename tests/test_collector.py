"""The run's use of the garbage collector: survivors frozen during the events, handed back after."""

from __future__ import annotations

import gc

import pytest

from agentsim.engine.loading import load_scenario
from agentsim.engine.collector import freezing_collector
from agentsim.engine.simulation import Simulation


def _run_watching_the_freeze_count(path) -> tuple[list[int], dict]:
    sim = Simulation(load_scenario(path))
    seen: list[int] = []

    def watch(env):
        while True:
            seen.append(gc.get_freeze_count())
            yield env.timeout(20.0)

    sim.env.process(watch(sim.env))
    return seen, sim.run().summary


def test_a_run_freezes_its_survivors_and_hands_them_back(small_scenario_yaml):
    assert gc.get_freeze_count() == 0
    seen, summary = _run_watching_the_freeze_count(small_scenario_yaml)
    assert summary["requests"] > 0
    # Mid-run the long-lived objects (agents' processes, tree nodes, records) are frozen...
    assert len(seen) > 3 and min(seen[1:]) > 1000
    # ...and afterwards nothing stays frozen, so the finished run's objects can be freed.
    assert gc.get_freeze_count() == 0


def test_the_results_do_not_depend_on_the_collector(small_scenario_yaml):
    gc.disable()
    try:
        plain = Simulation(load_scenario(small_scenario_yaml)).run()
    finally:
        gc.enable()
    frozen = Simulation(load_scenario(small_scenario_yaml)).run()
    drop = {k for k in plain.summary if "wall" in k}
    # repr() so that a NaN (no evictions yet) equals the other run's NaN.
    assert {k: repr(v) for k, v in plain.summary.items() if k not in drop} == \
        {k: repr(v) for k, v in frozen.summary.items() if k not in drop}
    assert plain.tables["requests"].equals(frozen.tables["requests"])


def test_objects_frozen_by_someone_else_are_left_alone(small_scenario_yaml):
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        seen, _ = _run_watching_the_freeze_count(small_scenario_yaml)
        # Nothing more was frozen (the run left the collector alone: the count only falls, as
        # frozen objects die) and nothing was unfrozen.
        assert max(seen) <= before
        assert 0.9 * before < gc.get_freeze_count() <= before
    finally:
        gc.unfreeze()


def test_an_exception_inside_the_block_still_unfreezes():
    with pytest.raises(RuntimeError):
        with freezing_collector() as freeze:
            freeze()
            assert gc.get_freeze_count() > 0
            raise RuntimeError("boom")
    assert gc.get_freeze_count() == 0


def test_survivors_are_also_frozen_every_few_finished_requests(small_scenario_yaml, monkeypatch):
    """Besides every time-series sample, every ``FREEZE_EVERY_REQUESTS`` finished requests: a
    fleet day samples every 432 simulated seconds, tens of thousands of requests apart."""
    from contextlib import contextmanager

    from agentsim.engine import simulation

    def freezes(every: int) -> tuple[int, int]:
        calls: list[int] = []

        @contextmanager
        def counting():
            yield lambda: calls.append(1)

        monkeypatch.setattr(simulation, "freezing_collector", counting)
        monkeypatch.setattr(simulation, "FREEZE_EVERY_REQUESTS", every)
        sim = Simulation(load_scenario(small_scenario_yaml))
        sim.run()
        return len(calls), len(sim.request_records)

    by_samples, _ = freezes(10**9)
    both, finished = freezes(3)
    assert finished > 30 and both == by_samples + finished // 3
