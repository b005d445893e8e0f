"""Invariant-checking mode (``--check-invariants``): a violation stops the run and names the
simulated time, the instance and the event; token conservation is checked per finished request."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cluster.serving.instance import ServingInstance
from agentsim.engine.loading import load_scenario
from agentsim.engine.simulation import run_scenario
from agentsim.errors import InvariantViolation
from tests.conftest import ROOT

FAULTY = "test_faulty_pinned_victim"

# Registering is idempotent per process so the module can be imported by a subprocess too.
FAULTY_POLICY_SOURCE = f'''
from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.policies.lru import LRU

if {FAULTY!r} not in EVICTION_POLICIES:
    @EVICTION_POLICIES.register({FAULTY!r})
    class PinnedVictim(LRU):
        """A broken policy: offers a pinned (in-use) node as the victim whenever one exists."""

        def pop_victim(self, now_s):
            for node in self.cache.iter_nodes():
                if node.lock_ref:
                    return node
            return super().pop_victim(now_s)
'''


@pytest.fixture
def faulty_policy():
    """Registers the broken policy for one test only: tests that iterate over every registered
    policy must never see it."""
    exec(FAULTY_POLICY_SOURCE, {})
    yield FAULTY
    EVICTION_POLICIES.unregister(FAULTY)

TIGHT = ["hardware.kv_capacity_bytes=1GB", "duration_s=2m", "run.check_invariants=true"]


def test_faulty_policy_violation_names_time_instance_and_event(small_scenario_yaml, faulty_policy):
    scenario = load_scenario(small_scenario_yaml, TIGHT + [f"cache.eviction.name={FAULTY}"])
    with pytest.raises(InvariantViolation) as info:
        run_scenario(scenario)
    message = str(info.value)
    assert message.startswith("invariant violated at t=")
    assert " on instance 0 during admission: " in message
    assert f"policy {FAULTY} chose a non-evictable node" in message
    t_s = float(message.split("t=")[1].split(" s")[0])
    assert 0 < t_s <= 2 * 60 + 600  # inside the run (arrivals end at 2 min; drain follows)


def test_the_same_scenario_with_lru_runs_clean(small_scenario_yaml):
    result = run_scenario(load_scenario(small_scenario_yaml, TIGHT))
    assert result.summary["complete"] is True
    assert result.summary["requests"] > 0 and result.summary["evicted_blocks"] > 0  # eviction really ran


def test_token_conservation_is_checked_per_request(small_scenario_yaml, monkeypatch):
    """An instance that over-reports a hit (hit + recomputed > prompt) is caught as the request finishes."""
    original = ServingInstance._admit

    def admit_and_overcount(self):
        before = len(self.running)
        original(self)
        for state in self.running[before:]:
            state.req.hit_tokens += 1  # claims one token it neither hit nor computed

    monkeypatch.setattr(ServingInstance, "_admit", admit_and_overcount)
    scenario = load_scenario(small_scenario_yaml, ["duration_s=1m", "run.check_invariants=true"])
    with pytest.raises(InvariantViolation) as info:
        run_scenario(scenario)
    message = str(info.value)
    assert message.startswith("invariant violated at t=") and "token conservation of request" in message
    assert "recomputed" in message and "!= prompt" in message
    assert "instance 0 during request completion" in message


def test_conservation_not_checked_without_the_flag(small_scenario_yaml, monkeypatch):
    """The check is part of the mode: the same fault passes silently when the mode is off (and
    the recorded columns still satisfy hit + recomputed = prompt by construction)."""
    original = ServingInstance._admit

    def admit_and_overcount(self):
        before = len(self.running)
        original(self)
        for state in self.running[before:]:
            state.req.hit_tokens += 1

    monkeypatch.setattr(ServingInstance, "_admit", admit_and_overcount)
    result = run_scenario(load_scenario(small_scenario_yaml, ["duration_s=1m"]))
    table = result.tables["requests"]
    assert (table.hit_tokens + table.recomputed_tokens == table.prompt_tokens).all()


def test_cli_reports_violation_in_one_line_with_exit_3(small_scenario_yaml, tmp_path):
    out = tmp_path / "out"
    code = FAULTY_POLICY_SOURCE + (
        "\nfrom agentsim.cli import main\n"
        f"main(['run', {str(small_scenario_yaml)!r}, '--out', {str(out)!r}, '--quiet', '--check-invariants',"
        f" '--set', 'cache.eviction.name={FAULTY}', '--set', 'hardware.kv_capacity_bytes=1GB', '--set', 'duration_s=2m'])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    # 1 GB of KV is too little for one 200K-token request: that warning comes first, then one error line.
    lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith("warning: too little KV")]
    assert len(lines) == 1 and lines[0].startswith("error: invariant violated at t="), proc.stderr
    assert "on instance 0 during admission" in lines[0]
    assert not (out / "summary.json").exists()
