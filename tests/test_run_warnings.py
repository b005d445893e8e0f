"""Warnings for runs that cannot do their job (agentsim/engine/run_warnings.py)."""

from __future__ import annotations

from agentsim.engine.loading import load_scenario
from agentsim.engine.run_warnings import result_warnings, scenario_warnings
from tests.conftest import run_cli


def test_a_ttl_longer_than_the_run_is_warned_about(small_scenario_yaml):
    def ttl_notes(*overrides):
        return [n for n in scenario_warnings(load_scenario(small_scenario_yaml, list(overrides))) if "TTL" in n]

    [note] = ttl_notes("cache.eviction=ttl_1h", "duration_s=2m")
    assert note.startswith("cache.eviction: the TTL of 3600 s is longer than the run (duration_s 120 s)")
    assert ttl_notes("cache.eviction=ttl_5m", "duration_s=10m") == []
    assert ttl_notes("cache.eviction=lru") == []


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
    assert len(warnings) == 3, warnings
    assert "too little KV" in warnings[0] and "TTL of 3600 s" in warnings[1] and "was rejected" in warnings[2]
    assert (tmp_path / "out" / "summary.json").exists()


#: The small scenario's sessions grown past 28K tokens (6K-token appends, 30 calls, no
#: sub-agents), with a context limit of 60K tokens.
LONG_SESSIONS = ["duration_s=3m", "workload.agent_classes.coding.max_context_tokens=60000",
                 "workload.agent_classes.coding.appended_tokens={dist: lognormal, median: 6000, sigma: 0.3, round: true}",
                 "workload.agent_classes.coding.calls_per_session={dist: lognormal, median: 30, sigma: 0.3, min: 1, round: true}",
                 "workload.agent_classes.coding.subagents.probability=0"]


def test_too_little_kv_for_one_request_at_the_context_limit_is_warned_about(small_scenario_yaml):
    from agentsim.engine.simulation import run_scenario

    # 1 GB of DeepSeek-V3 KV holds 28,416 tokens, less than the 60,000-token context limit.
    short = load_scenario(small_scenario_yaml, [*LONG_SESSIONS, "hardware.kv_capacity_bytes=1GB"])
    [note] = scenario_warnings(short)
    assert note.startswith("too little KV: 1 GB of KV per instance holds 28,416 tokens, less than one request at "
                           "the context limit (workload.agent_classes.coding.max_context_tokens = 60,000 tokens")
    assert "raise hardware.kv_capacity_bytes" in note
    # The warning is in the summary, and it is right: the requests that grew past the KV are rejected.
    summary = run_scenario(short).summary
    assert summary["kv_capacity_warning"] == note and note in result_warnings(summary)
    assert 0 < summary["requests_rejected"] < summary["requests"]
    # 2.5 GB holds one request at the limit (71K tokens): no warning, and nothing is rejected.
    roomy = load_scenario(small_scenario_yaml, [*LONG_SESSIONS, "hardware.kv_capacity_bytes=2.5GB"])
    assert scenario_warnings(roomy) == []
    summary = run_scenario(roomy).summary
    assert summary["kv_capacity_warning"] is None and summary["requests_rejected"] == 0


def test_too_little_kv_names_the_disaggregated_pool():
    from tests.conftest import ROOT

    scenario = load_scenario(ROOT / "scenarios" / "gb300-disagg.yaml",
                             ["serving.disaggregation.decode.kv_capacity_bytes=3GB"])
    [note] = scenario_warnings(scenario)
    assert "3 GB of KV per decode worker holds 85,376 tokens" in note
    assert "raise serving.disaggregation.decode.kv_capacity_bytes" in note
    assert scenario_warnings(load_scenario(ROOT / "scenarios" / "gb300-disagg.yaml")) == []


def test_cli_says_a_warning_given_before_the_run_once(small_scenario_yaml, tmp_path):
    proc = run_cli("run", str(small_scenario_yaml), "--out", str(tmp_path / "out"),
                   *[arg for o in [*LONG_SESSIONS, "duration_s=30s", "hardware.kv_capacity_bytes=1GB"] for arg in ("--set", o)])
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "too little KV" in warnings[0]
    # ... and the summary table shows it.
    assert "KV warning" in proc.stdout


def test_shipped_scenarios_hold_one_request_at_their_context_limit():
    from tests.conftest import ROOT

    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        assert all("too little KV" not in n for n in scenario_warnings(load_scenario(path))), path.name
