"""Shared test helpers: small scenarios and a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# CI (``.ci/run`` runs with CI=true) replays the same property-test examples on every run, so a
# counterexample found by chance fails the run that can reproduce it, not a later unrelated one;
# a developer's run (no CI variable) explores new examples and saves any failure in .hypothesis/.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"

# Overrides that shrink any scenario to a few seconds of wall time.
SMALL = ["duration_s=4m", "run.check_invariants=true"]


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300,
            max_memory_bytes: int | None = None) -> subprocess.CompletedProcess:
    """Run ``agentsim ARGS`` in a subprocess (as a user would) and capture its output.
    ``max_memory_bytes`` caps the process's address space (``RLIMIT_AS``): an allocation past
    it fails in the child (a MemoryError, a traceback) instead of taking the machine's memory."""
    def cap_memory() -> None:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (max_memory_bytes, max_memory_bytes))

    return subprocess.run([sys.executable, "-m", "agentsim.cli", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=timeout, preexec_fn=cap_memory if max_memory_bytes else None)


#: A tiny but complete scenario: 8 coding agents on one GB300 instance for 3 simulated minutes.
SMALL_SCENARIO = """
name: small
seed: 7
duration_s: 3m
hardware: {profile: gb300_nvl72, gpus_per_instance: 4, kv_capacity_bytes: 6GB}
model: {profile: deepseek_v3}
cache: {block_tokens: 64, eviction: lru}
serving: {max_batch_requests: 16, prefill_chunk_tokens: 4096}
workload:
  global_system_prompt_tokens: 1000
  agent_classes:
    coding:
      arrival: {kind: population, concurrent: 8, ramp_s: 10s}
      tools_prefix_tokens: 4000
      initial_context_tokens: {dist: lognormal, median: 1500, sigma: 0.5, round: true}
      calls_per_session: {dist: lognormal, median: 10, sigma: 0.5, min: 1, round: true}
      tool_gap_s: {dist: lognormal, median: 5, sigma: 1.0}
      human_turn_probability: 0.1
      human_gap_s: {dist: exponential, mean: 30}
      appended_tokens: {dist: lognormal, median: 800, sigma: 0.8, round: true}
      output_tokens: {dist: lognormal, median: 150, sigma: 0.7, min: 1, round: true}
      subagents: {probability: 0.1, fanout: 2, calls: 3}
slo: {ttft_s: 2s, tpot_s: 100ms}
"""


@pytest.fixture
def small_scenario_yaml(tmp_path: Path) -> Path:
    """A tiny but complete scenario file."""
    path = tmp_path / "small.yaml"
    path.write_text(SMALL_SCENARIO)
    return path
