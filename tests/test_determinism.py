"""Determinism across processes: the same scenario and seed give byte-identical Parquet tables
and an identical summary.json (except the wall-clock keys) whatever PYTHONHASHSEED is, so no
result depends on the iteration order of sets or dicts of hashed objects (strings hash
differently in every process unless the seed is fixed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentsim.results import WALL_CLOCK_KEYS
from tests.conftest import ROOT

TIERED = ROOT / "scenarios" / "gb300-nvl72-tiers.yaml"
# Shrink the rack scenario: 3 instances, a few agents, a few minutes (tiers, links and the
# default KV-aware router all stay in play).
TIERED_SMALL = ["duration_s=3m", "hardware.instances=3", "workload.agent_classes.coding.arrival.concurrent=24",
                "workload.agent_classes.coding.arrival.ramp_s=20s", "run.check_invariants=true"]


def _run(scenario: Path, out: Path, hash_seed: str, overrides: list[str]) -> None:
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    args = [sys.executable, "-m", "agentsim.cli", "run", str(scenario), "--out", str(out), "--quiet"]
    for item in overrides:
        args += ["--set", item]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr


def _assert_identical(a: Path, b: Path) -> None:
    tables_a = sorted(p.name for p in a.glob("*.parquet"))
    assert tables_a == sorted(p.name for p in b.glob("*.parquet")) and "requests.parquet" in tables_a
    for name in tables_a:
        assert (a / name).read_bytes() == (b / name).read_bytes(), f"{name} differs between hash seeds"
    assert (a / "scenario.resolved.yaml").read_bytes() == (b / "scenario.resolved.yaml").read_bytes()
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    for key in WALL_CLOCK_KEYS:
        sa.pop(key, None)
        sb.pop(key, None)
    differing = sorted(k for k in set(sa) | set(sb) if sa.get(k) != sb.get(k))
    assert not differing, f"summary keys differ between hash seeds: {differing}"


# Other policies, routers and several instances on the small scenario.
ZOO = ["run.check_invariants=true", "hardware.instances=2", "serving.router=cache_aware",
       "cache.eviction.name=s3fifo", "hardware.kv_capacity_bytes=2GB", "duration_s=2m"]


@pytest.mark.parametrize("name", ["small", "zoo", "tiered"])
def test_identical_outputs_under_different_hash_seeds(name, small_scenario_yaml, tmp_path):
    scenario, overrides = {"small": (small_scenario_yaml, ["run.check_invariants=true"]),
                           "zoo": (small_scenario_yaml, ZOO), "tiered": (TIERED, TIERED_SMALL)}[name]
    _run(scenario, tmp_path / "a", "1", overrides)
    _run(scenario, tmp_path / "b", "4242", overrides)
    _assert_identical(tmp_path / "a", tmp_path / "b")
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["requests"] > 0 and summary["complete"] is True
