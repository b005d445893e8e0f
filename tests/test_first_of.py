"""The decode stretch's wait for "its end or an arrival" (``instance._first_of``) runs as SimPy's
``timeout | wakeup`` condition does: the waiting process resumes at the same point among the
instant's events, and sees the same of the two."""

from __future__ import annotations

import pytest
import simpy

from agentsim.cluster.serving.instance import _first_of


def _run(use_condition: bool, stretch_s: float, arrival_s: float | None, wakeup_done_before: bool):
    env = simpy.Environment()
    log = []
    state = {"wakeup": env.event()}
    if wakeup_done_before:
        state["wakeup"].succeed()

    def arrivals():
        if arrival_s is None:
            return
        yield env.timeout(arrival_s)
        log.append(("arrival", env.now))
        if not state["wakeup"].triggered:
            state["wakeup"].succeed()

    def other():   # something else that wakes at the same instants
        for at in (stretch_s, arrival_s or stretch_s):
            yield env.timeout(at - env.now if at > env.now else 0)
            log.append(("other", env.now))

    def stretch():
        if wakeup_done_before:
            yield env.timeout(0)   # let the early wakeup be processed first
        timeout = env.timeout(stretch_s - env.now)
        wakeup = state["wakeup"]
        if use_condition:
            result = yield timeout | wakeup
            log.append(("resumed", env.now, timeout in result, wakeup in result))
        else:
            yield _first_of(env, timeout, wakeup)
            log.append(("resumed", env.now, timeout.callbacks is None, wakeup.callbacks is None))
        yield env.timeout(1.0)
        log.append(("after", env.now, len(wakeup.callbacks or []), len(timeout.callbacks or [])))

    env.process(arrivals())
    env.process(stretch())
    env.process(other())
    env.run()
    return log


@pytest.mark.parametrize("arrival_s", [None, 0.5, 1.0, 2.0])
@pytest.mark.parametrize("wakeup_done_before", [False, True])
def test_first_of_resumes_where_the_condition_does(arrival_s, wakeup_done_before):
    expected = _run(True, 1.0, arrival_s, wakeup_done_before)
    assert _run(False, 1.0, arrival_s, wakeup_done_before) == expected
    # The stretch saw what happened first (the arrival at 0.5, or its own end).
    resumed = next(entry for entry in expected if entry[0] == "resumed")
    assert resumed[1] == (0.0 if wakeup_done_before else min(arrival_s or 1.0, 1.0))


def test_a_long_lived_wakeup_does_not_gather_callbacks():
    env = simpy.Environment()
    wakeup = env.event()

    def stretches():
        for _ in range(100):
            yield _first_of(env, env.timeout(0.01), wakeup)

    env.process(stretches())
    env.run()
    assert wakeup.callbacks == []
