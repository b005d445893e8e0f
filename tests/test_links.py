"""Links: fair sharing among concurrent transfers, setup latency, byte conservation."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from agentsim.hardware.links import Link


def timed(env, link, size, delay, out, name):
    yield env.timeout(delay)
    start = env.now
    yield link.transfer(size)
    out[name] = env.now - start


def test_one_transfer_takes_latency_plus_size_over_bandwidth():
    env = simpy.Environment()
    link = Link(env, "c2c", 150e9, 10e-6)
    out = {}
    env.process(timed(env, link, 7.0e9, 0.0, out, "a"))
    env.run()
    assert out["a"] == pytest.approx(10e-6 + 7.0e9 / 150e9, rel=1e-9)


def test_two_concurrent_loads_take_about_twice_as_long_as_one():
    env = simpy.Environment()
    link = Link(env, "c2c", 150e9, 10e-6)
    out = {}
    env.process(timed(env, link, 7.0e9, 0.0, out, "a"))
    env.process(timed(env, link, 7.0e9, 0.0, out, "b"))
    env.run()
    single = 10e-6 + 7.0e9 / 150e9
    assert out["a"] == pytest.approx(out["b"])
    assert out["a"] / single == pytest.approx(2.0, rel=0.01)
    assert link.busy_s == pytest.approx(2 * 7.0e9 / 150e9, rel=1e-9)


def test_late_small_transfer_shares_then_the_big_one_speeds_up():
    env = simpy.Environment()
    link = Link(env, "nvme", 10e9, 0.0)
    out = {}
    env.process(timed(env, link, 10e9, 0.0, out, "big"))     # alone: 1 s
    env.process(timed(env, link, 1e9, 0.5, out, "small"))    # shares from 0.5 s: 0.2 s
    env.run()
    assert out["small"] == pytest.approx(0.2)
    assert out["big"] == pytest.approx(1.1)


def test_bytes_are_conserved_under_random_contention():
    env = simpy.Environment()
    link = Link(env, "net", 25e9, 5e-6)
    rng = np.random.default_rng(0)
    sizes = rng.lognormal(18, 2, size=300)
    starts = np.sort(rng.uniform(0, 2.0, size=300))
    out = {}
    for i, (size, start) in enumerate(zip(sizes, starts)):
        env.process(timed(env, link, float(size), float(start), out, i))
    env.run()
    assert len(out) == 300
    assert link.bytes_total == pytest.approx(sizes.sum(), rel=1e-9)
    assert link.bytes_requested == pytest.approx(sizes.sum(), rel=1e-12)
    # Work conservation: busy time >= bytes / bandwidth (equal when no idle gaps inside transfers).
    assert link.busy_s == pytest.approx(sizes.sum() / 25e9, rel=1e-6)
