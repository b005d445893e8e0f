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


class _ProcessLink(Link):
    """The link as it was written with SimPy processes (a start and a timer each a process):
    the reference the callback version must reproduce event for event."""

    def _begin(self, size_bytes, done):
        self.env.process(self._start_process(size_bytes, done))

    def _start_process(self, size_bytes, done):
        if self.latency_s > 0:
            yield self.env.timeout(self.latency_s)
        self._join(size_bytes, done)

    def _start_timer(self, delay_s, token):
        self.env.process(self._timer_process(delay_s, token))

    def _timer_process(self, delay_s, token):
        yield self.env.timeout(delay_s)
        if token != self._timer_token:
            return
        self._advance()
        self._rearm()


@pytest.mark.parametrize("latency_s", [0.0, 2.0 ** -10])
def test_callbacks_reproduce_the_process_links_order_of_events(latency_s):
    """Transfers started in bursts at the instants other processes wake at, on two links, with
    times that are exact binary fractions so that starts, finishes and wake-ups coincide: every
    completion happens at the same time and in the same order as with the process-based link,
    and what the other processes see of the links at each instant is the same."""
    step_s = 2.0 ** -6

    def run(link_class):
        env = simpy.Environment()
        links = [link_class(env, "a", 2.0 ** 33, latency_s), link_class(env, "b", 2.0 ** 31, latency_s)]
        rng = np.random.default_rng(3)
        log = []

        def client(i, start_s, size, link):
            yield env.timeout(start_s)
            done = link.transfer(size)
            log.append(("started", i, env.now, len(link.active)))   # joins only once this callback ends
            yield done
            log.append(("done", i, env.now))

        def ticker(i):
            for _ in range(60):
                yield env.timeout(step_s)
                log.append(("tick", i, env.now, [(len(link.active), link.bytes_total, link.estimate_s(2.0 ** 20))
                                                 for link in links]))

        for i in range(200):
            start = float(rng.integers(0, 40)) * step_s                # bursts on the tickers' instants
            size = float(rng.choice([2.0 ** 24, 2.0 ** 27, 2.0 ** 28]))  # finishes on those instants too
            env.process(client(i, start, size, links[i % 2]))
        for i in range(3):
            env.process(ticker(i))
        env.run()
        return log, [(link.bytes_total, link.busy_s, link.transfers) for link in links]

    log, totals = run(Link)
    assert len(log) == 2 * 200 + 3 * 60
    assert (log, totals) == run(_ProcessLink)


def test_a_transfer_is_five_events_where_processes_made_seven():
    """One transfer with setup latency: an urgent event and its latency timeout to join, an
    urgent event and a timeout for the finish timer, and its ``done`` event; the two processes
    it used to start added an ``Initialize`` each and a completion event each, seven in all."""
    counts = {}
    for link_class in (Link, _ProcessLink):
        env = simpy.Environment()
        link = link_class(env, "c2c", 150e9, 10e-6)
        scheduled = []
        original = env.schedule
        env.schedule = lambda event, priority=1, delay=0, original=original, scheduled=scheduled: (
            scheduled.append(type(event).__name__), original(event, priority, delay))
        done = link.transfer(7.0e9)
        env.run()
        assert done.processed and env.now == pytest.approx(10e-6 + 7.0e9 / 150e9)
        counts[link_class.__name__] = scheduled
    assert len(counts["Link"]) == 5 and "Process" not in counts["Link"]
    assert len(counts["_ProcessLink"]) == 7
