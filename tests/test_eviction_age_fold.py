"""The idle-age record of capacity evictions stays bounded on a long run: past
``EXACT_EVICTIONS`` a recorder folds its evictions into a log-binned histogram, and the
characteristic eviction time it reports stays the exact one's (median within a bin's 0.05%,
mean and max exact)."""

import math
import random
from types import SimpleNamespace

import numpy as np
import pytest

from agentsim.engine import diagnostics
from agentsim.engine.diagnostics import EvictionAgeRecorder, _age_stats, weighted_median


class _Policy:
    def on_remove(self, node, blocks, reason):
        pass


def _evict(recorders, env, rng, events):
    exact = []
    for _ in range(events):
        recorder = rng.choice(recorders)
        age = rng.choice((0.0, rng.lognormvariate(3.0, 2.0), rng.uniform(0, 1e-7)))
        blocks = rng.randrange(1, 40)
        env.now = 1e6
        node = SimpleNamespace(last_access_s=env.now - age)
        reason = "capacity" if rng.random() < 0.9 else "ttl_expiry"
        recorder.policy.on_remove(node, blocks, reason)
        if reason == "capacity":
            exact.append((env.now - node.last_access_s, blocks))
    return exact


@pytest.mark.parametrize("seed", range(3))
def test_folded_statistics_match_the_exact_ones(seed, monkeypatch):
    monkeypatch.setattr(diagnostics, "EXACT_EVICTIONS", 500)
    rng = random.Random(seed)
    env = SimpleNamespace(now=0.0)
    recorders = []
    for _ in range(3):
        policy = _Policy()
        recorder = EvictionAgeRecorder(env, policy)
        recorder.policy = policy
        recorders.append(recorder)
    exact = _evict(recorders, env, rng, 6000)
    assert all(r.folded_blocks is not None for r in recorders)         # every recorder folded
    assert all(len(r.ages_s) < 500 and len(r.ages_s) == len(r.blocks) for r in recorders)
    ages = np.array([a for a, _b in exact])
    weights = np.array([b for _a, b in exact], dtype=float)
    median, mean, largest = _age_stats(recorders)
    expected = weighted_median(ages, weights)
    if expected < diagnostics._AGE_MIN_S:
        assert median == 0.0
    else:
        assert abs(median / expected - 1.0) <= math.sqrt(diagnostics._AGE_BIN_RATIO) - 1.0 + 1e-12
    assert mean == pytest.approx(float((ages * weights).sum() / weights.sum()), rel=1e-12)
    assert largest == ages.max()


def test_below_the_cap_statistics_are_exact():
    rng = random.Random(7)
    env = SimpleNamespace(now=0.0)
    policy = _Policy()
    recorder = EvictionAgeRecorder(env, policy)
    recorder.policy = policy
    exact = _evict([recorder], env, rng, 300)
    assert recorder.folded_blocks is None
    ages = np.array([a for a, _b in exact])
    weights = np.array([b for _a, b in exact], dtype=float)
    assert _age_stats([recorder]) == (weighted_median(ages, weights),
                                      float((ages * weights).sum() / weights.sum()), float(ages.max()))
