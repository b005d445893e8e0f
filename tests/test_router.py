"""Routers: the prefix-affinity choice (with its load-bound early stop) equals a full scan."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from agentsim.cluster.router import AffinityParams, LeastLoaded, PrefixAffinity, RoundRobin

BLOCK_TOKENS = 64


class FakeTieredCache:
    def __init__(self, hbm_blocks: int, any_blocks: int):
        self.answer = (hbm_blocks, any_blocks)
        self.peeks = 0

    def peek(self, keys):
        self.peeks += 1
        return self.answer


def fake_instance(instance_id: int, load: int, hbm_blocks: int, any_blocks: int):
    return SimpleNamespace(instance_id=instance_id, load=load, tiered=True, block_tokens=BLOCK_TOKENS,
                           cache=FakeTieredCache(hbm_blocks, any_blocks))


def full_scan(instances, request, params: AffinityParams):
    """The definition: least (prompt - cached + penalty * load, load, id) over every instance."""
    def rank(inst):
        hbm, any_ = inst.cache.answer
        cached = BLOCK_TOKENS * (hbm + params.lower_tier_weight * (any_ - hbm))
        return (request.prompt_tokens - cached + params.load_penalty_tokens * inst.load, inst.load, inst.instance_id)
    return min(instances, key=rank)


@pytest.mark.parametrize("penalty", [0.0, 1.0, 64.0, 4096.0])
def test_prefix_affinity_equals_full_scan(penalty):
    rng = random.Random(11)
    params = AffinityParams(load_penalty_tokens=penalty, lower_tier_weight=0.5)
    for _ in range(2000):
        n_blocks = rng.randint(0, 40)
        request = SimpleNamespace(prompt_tokens=n_blocks * BLOCK_TOKENS + rng.randint(0, BLOCK_TOKENS - 1),
                                  prompt_keys=list(range(n_blocks)))
        instances = []
        for i in range(rng.randint(2, 18)):
            any_blocks = rng.choice([0, n_blocks, rng.randint(0, n_blocks)])
            hbm_blocks = rng.randint(0, any_blocks)
            instances.append(fake_instance(i, rng.choice([0, 1, 2, rng.randint(0, 60)]), hbm_blocks, any_blocks))
        router = PrefixAffinity(instances, params)
        assert router.choose(request) is full_scan(instances, request, params)


def test_prefix_affinity_skips_instances_the_load_term_rules_out():
    params = AffinityParams(load_penalty_tokens=4096.0)
    request = SimpleNamespace(prompt_tokens=40 * BLOCK_TOKENS, prompt_keys=list(range(40)))
    home = fake_instance(0, 3, 39, 40)  # the session's history: nearly the whole prompt cached
    others = [fake_instance(i, 5 + i, 2, 2) for i in range(1, 18)]
    router = PrefixAffinity([*others, home], params)
    assert router.choose(request) is home
    assert sum(inst.cache.peeks for inst in others) == 0  # every other instance is busier: never peeked


def test_least_loaded_and_round_robin():
    instances = [fake_instance(i, load, 0, 0) for i, load in enumerate([3, 1, 1, 2])]
    assert LeastLoaded(instances).choose(None).instance_id == 1  # lowest index on ties
    rr = RoundRobin(instances)
    assert [rr.choose(None).instance_id for _ in range(5)] == [0, 1, 2, 3, 0]
