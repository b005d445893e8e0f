"""Warnings for runs that cannot do their job (agentsim/engine/run_warnings.py)."""

from __future__ import annotations

from agentsim.engine.loading import load_scenario
from agentsim.engine.run_warnings import result_warnings, scenario_warnings
from tests.conftest import run_cli


def test_a_ttl_longer_than_the_run_is_warned_about(small_scenario_yaml):
    long_ttl = load_scenario(small_scenario_yaml, ["cache.eviction=ttl_1h", "duration_s=2m"])
    [note] = scenario_warnings(long_ttl)
    assert note.startswith("cache.eviction: the TTL of 3600 s is longer than the run (duration_s 120 s)")
    assert scenario_warnings(load_scenario(small_scenario_yaml, ["cache.eviction=ttl_5m", "duration_s=10m"])) == []
    assert scenario_warnings(load_scenario(small_scenario_yaml, ["cache.eviction=lru"])) == []


def test_a_run_that_rejects_every_request_is_warned_about():
    [note] = result_warnings({"requests": 12, "requests_rejected": 12})
    assert "every one of the 12 measured requests was rejected" in note
    assert result_warnings({"requests": 12, "requests_rejected": 11}) == []
    assert result_warnings({"requests": 0, "requests_rejected": 0}) == []


def test_cli_prints_both_warnings_and_still_writes_the_run(small_scenario_yaml, tmp_path):
    # One 64-token block of KV (2.25 MB) under prompts of thousands of tokens: all rejected.
    proc = run_cli("run", str(small_scenario_yaml), "--out", str(tmp_path / "out"), "--quiet",
                   "--set", "duration_s=30s", "--set", "hardware.kv_capacity_bytes=3MB",
                   "--set", "cache.eviction=ttl_1h")
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 2 and "TTL of 3600 s" in warnings[0] and "was rejected" in warnings[1]
    assert (tmp_path / "out" / "summary.json").exists()
