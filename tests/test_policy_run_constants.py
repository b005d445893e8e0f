"""Policies priced by run constants (GDSF) take the run's block size and model, not their
packaged defaults (agentsim.cache.run_constants, agentsim.engine.policy_factory)."""

import pytest

from agentsim.engine.loading import scenario_from_dict
from agentsim.engine.simulation import Simulation
from agentsim.replay.cache_only import replay_cache_only
from agentsim.replay.timed import DEFAULT_SCENARIO
from agentsim.workload.traces import load_requests
from tests.conftest import ROOT

MOONCAKE = ROOT / "tests" / "fixtures" / "traces" / "mooncake_head1200.jsonl.gz"


def test_cache_only_gdsf_prices_blocks_with_the_traces_block_size():
    requests = load_requests(MOONCAKE)
    assert requests[0].block_tokens == 512

    def hits(params=None):
        return replay_cache_only(requests, capacity_fraction=0.1, policy="gdsf", policy_params=params).hit_blocks

    default = hits()
    assert default == hits({"block_tokens": 512})
    # The 64-token default misprices Mooncake's blocks: the replay differs (as it did before).
    assert default != hits({"block_tokens": 64})


def _scenario(**model):
    data = {**DEFAULT_SCENARIO, "model": {"profile": "llama31_70b", **model}, "cache": {
        "block_tokens": 32, "eviction": {"name": "gdsf", "params": {"cost_model": "flops"}}}}
    return scenario_from_dict(data, source="test")


def test_timed_gdsf_takes_the_scenarios_block_size_and_model():
    scenario = _scenario()
    policy = Simulation(scenario).instances[0].cache.policy
    assert policy.params.block_tokens == 32
    assert policy.params.active_params == pytest.approx(scenario.model.active_params)
    assert policy.params.attn_coeff == pytest.approx(scenario.model.attn_coeff)
    assert policy.params.kv_bytes_per_token == pytest.approx(scenario.model.kv_bytes_per_token)
    assert scenario.model.active_params != pytest.approx(37e9)  # not the packaged DeepSeek-V3 default


def test_a_constant_the_user_sets_wins():
    data = {**DEFAULT_SCENARIO, "cache": {"block_tokens": 32, "eviction": {"name": "gdsf", "params": {"block_tokens": 128}}}}
    policy = Simulation(scenario_from_dict(data, source="test")).instances[0].cache.policy
    assert policy.params.block_tokens == 128
