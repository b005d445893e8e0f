"""End-to-end CLI: run, validate, schema, policies; determinism; bad input exits 2 with one message."""

import json
from pathlib import Path

import pandas as pd
import pytest

from agentsim.results import WALL_CLOCK_KEYS
from tests.conftest import ROOT, SMALL, run_cli

SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
REQUIRED_KEYS = ["requests", "sessions", "hit_ratio", "recomputed_tokens", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s",
                 "ttft_p999_s", "ttft_max_s", "tpot_p50_s", "tpot_p99_s", "e2e_p99_s", "sla_attainment",
                 "evicted_blocks", "gpu_busy_fraction", "simulated_s", "wall_s"]


#: Scenarios too large for a few minutes with invariant checks: fewer agents as well.
FEWER_AGENTS = {"gb300-disagg-4racks": ["workload.agent_classes.coding.arrival.concurrent=400"]}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_shipped_scenario_runs_small(scenario, tmp_path):
    out = tmp_path / "run"
    small = SMALL + FEWER_AGENTS.get(scenario.stem, [])
    proc = run_cli("run", str(scenario), "--out", str(out), "--quiet", *sum((["--set", s] for s in small), []))
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    for key in REQUIRED_KEYS:
        assert key in summary, key
    assert summary["requests"] > 0
    requests = pd.read_parquet(out / "requests.parquet")
    assert len(requests) == summary["requests"]
    assert (out / "scenario.resolved.yaml").exists()


def _strip(summary):
    return {k: v for k, v in summary.items() if k not in WALL_CLOCK_KEYS}


def test_same_seed_identical_files_different_seed_differs(small_scenario_yaml, tmp_path):
    outs = []
    for name, seed in (("a", "7"), ("b", "7"), ("c", "8")):
        out = tmp_path / name
        proc = run_cli("run", str(small_scenario_yaml), "--out", str(out), "--quiet", "--seed", seed)
        assert proc.returncode == 0, proc.stderr
        outs.append(out)
    a, b, c = outs
    assert (a / "requests.parquet").read_bytes() == (b / "requests.parquet").read_bytes()
    assert (a / "scenario.resolved.yaml").read_bytes() == (b / "scenario.resolved.yaml").read_bytes()
    sa, sb, sc = (json.loads((d / "summary.json").read_text()) for d in outs)
    assert _strip(sa) == _strip(sb)
    assert _strip(sa) != _strip(sc)
    assert (a / "requests.parquet").read_bytes() != (c / "requests.parquet").read_bytes()


def test_run_prints_summary_and_refuses_to_overwrite(small_scenario_yaml, tmp_path):
    out = tmp_path / "run"
    proc = run_cli("run", str(small_scenario_yaml), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "TTFT p99" in proc.stdout and "hit ratio" in proc.stdout
    before = (out / "summary.json").read_bytes()
    again = run_cli("run", str(small_scenario_yaml), "--out", str(out))
    assert again.returncode == 2
    assert "--force" in again.stderr and "Traceback" not in again.stderr
    assert (out / "summary.json").read_bytes() == before


def test_set_override_changes_the_run(small_scenario_yaml, tmp_path):
    proc = run_cli("run", str(small_scenario_yaml), "--out", str(tmp_path / "r"), "--quiet",
                   "--set", "hardware.kv_capacity_bytes=1GB", "--set", "workload.agent_classes.coding.arrival.concurrent=3")
    assert proc.returncode == 0, proc.stderr
    resolved = (tmp_path / "r" / "scenario.resolved.yaml").read_text()
    assert "concurrent: 3" in resolved and "kv_capacity_bytes: 1000000000.0" in resolved


def write(tmp_path: Path, text: str) -> Path:
    """Write a scenario where the shipped one lives relative to fits/ (its fit references resolve)."""
    (tmp_path / "scenarios").mkdir(exist_ok=True)
    if not (tmp_path / "fits").exists():
        (tmp_path / "fits").symlink_to(ROOT / "fits")
    path = tmp_path / "scenarios" / "bad.yaml"
    path.write_text(text)
    return path


BASE = (ROOT / "scenarios" / "coding-agents.yaml").read_text()


@pytest.mark.parametrize("mutation,expected", [
    (lambda t: t.replace("block_tokens: 64", "block_tokenz: 64"), ["block_tokenz", "did you mean 'block_tokens'", "cache.block_tokenz", "line"]),
    (lambda t: t.replace("kv_capacity_bytes: 80GB", "kv_capacity_bytes: 80 parsecs"), ["hardware.kv_capacity_bytes", "parsecs"]),
    (lambda t: t.replace("kv_capacity_bytes: 80GB", "kv_capacity_bytes: -5GB"), ["hardware.kv_capacity_bytes", "greater than 0"]),
    (lambda t: t.replace("eviction: lru", "eviction: lruu"), ["line 24: cache.eviction.name:", "unknown eviction policy 'lruu'", "did you mean 'lru'"]),
    (lambda t: t.replace("duration_s: 30m", "duration_s: 30GB"), ["duration_s", "30GB"]),
    (lambda t: t.replace("{dist: lognormal, median: 2000,", "{dist: lognormall, median: 2000,"), ["initial_context_tokens", "lognormall"]),
    (lambda t: t.replace("profile: gb300_nvl72", "profile: gb300"), ["unknown hardware profile 'gb300'", "did you mean"]),
    (lambda t: t + "\n  bad: [unclosed\n", ["YAML syntax error", "line"]),
    (lambda t: "", ["file is empty"]),
    # Cross-field checks name the field they blame (agentsim.errors.FieldError), with its line.
    (lambda t: t.replace("keep_tokens: 30000", "keep_tokens: 200000"),
     ["line 54: workload.agent_classes.coding.compaction.keep_tokens:", "smaller than trigger_tokens"]),
    (lambda t: t.replace("kind: population", "kind: poisson"),
     ["workload.agent_classes.coding.arrival.rate_per_s:", "needs rate_per_s"]),
])
def test_bad_scenarios_exit_2_with_one_clear_message(tmp_path, mutation, expected):
    assert mutation(BASE) != BASE, "the mutation no longer applies to the shipped scenario"
    path = write(tmp_path, mutation(BASE))
    for command in (["validate", str(path)], ["run", str(path), "--out", str(tmp_path / "o"), "--quiet"]):
        proc = run_cli(*command)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        message = proc.stderr.strip()
        assert len(message.splitlines()) == 1, message
        assert str(path) in message
        for fragment in expected:
            assert fragment in message, (fragment, message)
    assert not (tmp_path / "o" / "summary.json").exists()


def test_missing_file_and_bad_set(tmp_path):
    proc = run_cli("validate", str(tmp_path / "nope.yaml"))
    assert proc.returncode == 2 and "file not found" in proc.stderr and "nope.yaml" in proc.stderr
    proc = run_cli("validate", str(ROOT / "scenarios" / "coding-agents.yaml"), "--set", "cache.eviction.name=nosuch")
    assert proc.returncode == 2 and "nosuch" in proc.stderr
    proc = run_cli("validate", str(ROOT / "scenarios" / "coding-agents.yaml"), "--set", "novalue")
    assert proc.returncode == 2 and "PATH=VALUE" in proc.stderr


def test_negative_seed_is_blamed_on_the_option_not_the_file(tmp_path):
    proc = run_cli("run", str(ROOT / "scenarios" / "coding-agents.yaml"), "--seed", "-1", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "'--seed'" in proc.stderr and "Traceback" not in proc.stderr
    assert "line" not in proc.stderr and not (tmp_path / "o").exists()


def test_validate_schema_policies(tmp_path):
    proc = run_cli("validate", str(ROOT / "scenarios" / "coding-agents.yaml"))
    assert proc.returncode == 0 and "valid" in proc.stdout
    proc = run_cli("schema")
    schema = json.loads(proc.stdout)
    assert "workload" in schema["properties"] and "cache" in schema["properties"]
    proc = run_cli("policies", "--json")
    names = [row["name"] for row in json.loads(proc.stdout)]
    assert "lru" in names
    proc = run_cli("--help")
    assert proc.returncode == 0 and "run" in proc.stdout


def test_switching_policy_by_name_drops_the_old_policys_params():
    from agentsim.engine.loading import load_scenario

    path = ROOT / "scenarios" / "ttl-capacity-bound.yaml"
    scenario = load_scenario(path, ["cache.eviction.name=lru"])
    assert scenario.cache.eviction.name == "lru" and scenario.cache.eviction.params == {}
    kept = load_scenario(path, ["cache.eviction.params.ttl_s=60"])
    assert kept.cache.eviction.name == "ttl_expiry" and kept.cache.eviction.params["ttl_s"] == 60


def test_a_run_that_finishes_no_request_still_writes_a_summary(tmp_path):
    out = tmp_path / "empty"
    proc = run_cli("run", str(ROOT / "scenarios" / "coding-agents.yaml"), "--out", str(out), "--quiet",
                   "--set", "duration_s=1ms", "--set", "workload.agent_classes.coding.arrival.ramp_s=1h")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"] == 0 and summary["hit_ratio"] is None
