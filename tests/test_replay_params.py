"""`agentsim replay --param KEY=VALUE` (policy parameters with units) and `--set` in timed modes."""

from __future__ import annotations

import json

import pytest

from agentsim.errors import InputError
from agentsim.replay import replay_cache_only
from agentsim.replay.params import parse_param_options
from agentsim.replay.timed import run_timed_replay
from agentsim.workload.traces import load_requests
from tests.conftest import ROOT, run_cli

FIXTURES = ROOT / "tests" / "fixtures" / "traces"
MOONCAKE = FIXTURES / "mooncake_head40.jsonl"


def test_values_are_yaml_and_unit_strings_follow_the_name():
    params = parse_param_options(["tau_s=5m", "base=s3fifo", "pin_human=true", "min_bytes=2KB", "n=3"])
    assert params == {"tau_s": 300.0, "base": "s3fifo", "pin_human": True, "min_bytes": 2000.0, "n": 3}


@pytest.mark.parametrize("items,fragment", [
    (["tau_s"], "--param: expected KEY=VALUE"),
    (["tau_s=5 fortnights"], "--param tau_s=5 fortnights:"),
    (["tau_s=1", "tau_s=2"], "given twice"),
])
def test_bad_syntax_names_the_option(items, fragment):
    with pytest.raises(InputError) as info:
        parse_param_options(items)
    assert fragment in str(info.value)


def test_cache_only_replay_uses_the_parameters():
    requests = load_requests(MOONCAKE)
    short = replay_cache_only(requests, capacity_fraction=1.0, policy="ttl_expiry",
                              policy_params=parse_param_options(["ttl_s=100ms"]))
    long = replay_cache_only(requests, capacity_fraction=1.0, policy="ttl_expiry",
                             policy_params=parse_param_options(["ttl_s=1h"]))
    assert short.hit_blocks < long.hit_blocks and short.extra["ttl_expirations_blocks"] > 0


def test_cli_reports_a_bad_parameter_with_its_option():
    result = run_cli("replay", str(MOONCAKE), "--policy", "s3fifo", "--param", "tree_mod=cascade")
    assert result.returncode == 2
    assert "--param tree_mod=cascade" in result.stderr and "did you mean 'tree_mode'" in result.stderr
    assert "Traceback" not in result.stderr
    result = run_cli("replay", str(MOONCAKE), "--policy", "ttl_pin", "--param", "tau_s=-1", "--mode", "open-loop")
    assert result.returncode == 2 and "--param tau_s=-1" in result.stderr


def test_cli_param_changes_the_cache_only_result():
    args = ("replay", str(MOONCAKE), "--policy", "ttl_expiry", "--capacity-fraction", "1", "--json")
    short = json.loads(run_cli(*args, "--param", "ttl_s=100ms").stdout)
    long = json.loads(run_cli(*args, "--param", "ttl_s=1h").stdout)
    assert short["hit_blocks"] < long["hit_blocks"]


def test_timed_set_applies_without_a_scenario_file():
    base = run_timed_replay(MOONCAKE, mode="open-loop", capacity_fraction=0.5)
    slower = run_timed_replay(MOONCAKE, mode="open-loop", capacity_fraction=0.5,
                              overrides=["serving.max_batch_requests=1"])
    assert slower.summary["ttft_p99_s"] > base.summary["ttft_p99_s"]
    with pytest.raises(InputError) as info:
        run_timed_replay(MOONCAKE, mode="open-loop", overrides=["serving.max_batch_requestz=1"])
    assert str(info.value).startswith("--set")


def test_timed_replay_keeps_the_scenario_policy_parameters(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: s\nseed: 0\nduration_s: 1\nhardware: {profile: gb300_nvl72, gpus_per_instance: 4}\n"
        "model: {profile: deepseek_v3}\ncache: {eviction: {name: ttl_pin, params: {tau_s: 7}}}\n"
        "workload: {agent_classes: {a: {arrival: {kind: population, concurrent: 1}}}}\n")
    result = run_timed_replay(MOONCAKE, mode="open-loop", capacity_fraction=0.5, scenario_file=scenario)
    assert result.summary["policy"] == "ttl_pin"
    assert "tau_s: 7" in result.tables.get("scenario_yaml", "") or result.scenario.cache.eviction.params["tau_s"] == 7
    result = run_timed_replay(MOONCAKE, mode="open-loop", capacity_fraction=0.5, scenario_file=scenario,
                              policy_params={"tau_s": 9.0})
    assert result.scenario.cache.eviction.params["tau_s"] == 9.0
