"""Capacity planning: SLO and axis parsing, bisection (on a synthetic monotone response, so the
search itself is checked exactly), monotonicity warnings, and a real plan end to end."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from typer.testing import CliRunner

from agentsim.errors import InputError
from agentsim.experiments.plan import Planner, Slo, parse_slo, parse_vary
from agentsim.experiments.runs import RunOutcome
from agentsim.experiments.store import SweepStore
from agentsim.experiments.sweep import ScenarioBuilder, value_at

from tests.conftest import SMALL_SCENARIO, run_cli


def builder(path):
    from agentsim.config.loader import read_yaml

    data, lines = read_yaml(path)
    return ScenarioBuilder(data, str(path), lines, path.parent)


def test_parse_slo():
    assert parse_slo("ttft_p99_s<=2") == Slo("ttft_p99_s", "<=", 2.0)
    assert parse_slo(" sla_attainment >= 0.99 ") == Slo("sla_attainment", ">=", 0.99)
    assert parse_slo("ttft_p99_s<500ms").threshold == pytest.approx(0.5)
    for bad in ("ttft_p99_s=2", "<=2", "ttft_p99_s<=fast"):
        with pytest.raises(InputError):
            parse_slo(bad)


def test_parse_vary_units_and_integers(small_scenario_yaml):
    b = builder(small_scenario_yaml)
    axis = parse_vary("hardware.kv_capacity_bytes=60GB..400GB", b)
    assert (axis.low, axis.high, axis.integer) == (60e9, 400e9, False)
    assert axis.step == pytest.approx(10e9)  # (400-60)/32 = 10.6 GB rounded down to a 1/2/2.5/5 step
    assert axis.label(axis.value(3)) == "90GB"
    assert axis.value(axis.steps) == 400e9
    ints = parse_vary("workload.agent_classes.coding.arrival.concurrent=4..64", b)
    assert ints.integer and ints.step == 1 and ints.value(5) == 9 and isinstance(ints.value(5), int)
    coarse = parse_vary("hardware.kv_capacity_bytes=1GB..2GB", b, resolution="250MB")
    assert coarse.steps == 4
    for bad in ("hardware.kv_capacity_bytes=2GB", "hardware.kv_capacity_bytes=4GB..2GB"):
        with pytest.raises(InputError):
            parse_vary(bad, b)


class FakeExecutor:
    """Returns a synthetic summary: metric = response(value of the axis), no simulation."""

    description = "fake"

    def __init__(self, path, response):
        self.path, self.response, self.calls = path, response, []

    def run(self, tasks):
        for task in tasks:
            value = value_at(task.scenario_data, self.path)
            self.calls.append((value, task.seed))
            yield RunOutcome(task.cell_id, task.seed, summary={"ttft_p99_s": self.response(value, task.seed),
                                                                "cost_per_million_tokens_usd": 1.0, "gpu_hours": 1.0})

    def close(self):
        pass


def plan_with(small_scenario_yaml, tmp_path, response, vary="hardware.kv_capacity_bytes=1GB..5GB", slo="ttft_p99_s<=2",
              seeds=(1, 2), criterion="all", resolution="0.125GB"):
    b = builder(small_scenario_yaml)
    axis = parse_vary(vary, b, resolution)
    executor = FakeExecutor(axis.path, response)
    planner = Planner(b, axis, [parse_slo(slo)], list(seeds), executor, SweepStore(tmp_path / "plan"), criterion)
    return planner.run(), executor


def test_bisection_finds_smallest_passing_value(small_scenario_yaml, tmp_path):
    # TTFT falls with capacity and crosses 2 s at 2.6 GB: the answer is the first grid value above, 2.625 GB.
    report, executor = plan_with(small_scenario_yaml, tmp_path, lambda v, seed: 2.0 * 2.6e9 / v)
    assert report.direction == "smallest" and report.answer == pytest.approx(2.625e9)
    assert len(executor.calls) == 2 * (2 + math.ceil(math.log2(32)))  # seeds x (ends + bisection steps)
    assert not report.warnings
    assert list(report.frontier.value) == sorted(report.frontier.value)
    assert report.frontier.passed.tolist() == [v >= 2.625e9 for v in report.frontier.value]


def test_criterion_all_needs_every_seed(small_scenario_yaml, tmp_path):
    # Seed 2 is 10% slower: under "all" it decides; under "mean" the average does.
    response = lambda v, seed: 2.0 * 2.6e9 / v * (1.1 if seed == 2 else 1.0)  # noqa: E731
    strict, _ = plan_with(small_scenario_yaml, tmp_path / "a", response, criterion="all")
    lenient, _ = plan_with(small_scenario_yaml, tmp_path / "b", response, criterion="mean")
    assert strict.answer == pytest.approx(2.875e9)   # 2.86 GB needed by seed 2
    assert lenient.answer == pytest.approx(2.75e9)   # 2.73 GB needed by the mean


def test_largest_value_on_a_load_axis(small_scenario_yaml, tmp_path):
    # More agents, worse TTFT: the largest passing population is sought.
    report, _ = plan_with(small_scenario_yaml, tmp_path, lambda v, seed: 0.1 * v,
                          vary="workload.agent_classes.coding.arrival.concurrent=1..64", resolution=None)
    assert report.direction == "largest" and report.answer == 20


def test_none_and_all_passing(small_scenario_yaml, tmp_path):
    none, _ = plan_with(small_scenario_yaml, tmp_path / "a", lambda v, seed: 10.0)
    assert none.answer is None and "no value" in none.message
    every, calls = plan_with(small_scenario_yaml, tmp_path / "b", lambda v, seed: 0.5)
    assert every.answer == 1e9 and len(calls.calls) == 4


def test_monotonicity_violation_is_reported(small_scenario_yaml, tmp_path):
    # TTFT rises again at the top of the range (still passing) although more capacity should
    # only help: 1.73 s at 3 GB but 1.94 s at 5 GB.
    def response(v, seed):
        return 2.0 * 2.6e9 / v + (0.9 if v >= 4.9e9 else 0.0)
    report, _ = plan_with(small_scenario_yaml, tmp_path, response, seeds=(1,))
    assert report.warnings and "not monotone" in report.warnings[0]


def test_invalid_end_of_the_axis_is_refused_before_any_run(small_scenario_yaml, tmp_path):
    # 5000 GB of KV does not fit in the instance's HBM: the high end cannot be built, which is
    # said before any run is made or written (it used to fail after the first round of runs).
    b = builder(small_scenario_yaml)
    with pytest.raises(InputError, match="hardware.kv_capacity_bytes=5000GB is not a valid scenario.*exceeds"):
        parse_vary("hardware.kv_capacity_bytes=1GB..5000GB", b)
    assert not (tmp_path / "p").exists()


def test_unknown_slo_metric_has_did_you_mean(small_scenario_yaml, tmp_path):
    with pytest.raises(InputError, match="did you mean 'ttft_p99_s'"):
        plan_with(small_scenario_yaml, tmp_path, lambda v, s: 1.0, slo="ttft_p99<=2")


def test_plan_command_checks_slo_metrics_before_any_run(small_scenario_yaml, tmp_path, monkeypatch):
    """An unknown metric fails at once: no plan run is made and --out is not created."""
    from agentsim.cli import app
    from agentsim.experiments import plan as plan_module

    def no_run(self):
        raise AssertionError("the plan started before its SLO metrics were checked")

    monkeypatch.setattr(plan_module.Planner, "run", no_run)
    out = tmp_path / "plan"
    args = ["plan", str(small_scenario_yaml), "--slo", "ttft_p99<=2", "--slo", "hit_ratio>=0.5",
            "--vary", "hardware.kv_capacity_bytes=1GB..6GB", "--workers", "1", "--out", str(out)]
    result = CliRunner().invoke(app, args)  # agentsim.cli.main turns the InputError into exit code 2
    assert isinstance(result.exception, InputError), result.output
    assert "unknown summary metric 'ttft_p99' (did you mean 'ttft_p99_s'?)" in str(result.exception)
    assert not out.exists()


def test_plan_command_on_a_real_scenario(small_scenario_yaml, tmp_path):
    """The smallest HBM KV capacity giving a 0.85 hit ratio on the small scenario (real runs)."""
    from agentsim.cli import app

    out = tmp_path / "plan"
    args = ["plan", str(small_scenario_yaml), "--slo", "hit_ratio>=0.85", "--slo", "ttft_p99_s<=2",
            "--vary", "hardware.kv_capacity_bytes=1GB..6GB", "--resolution", "0.5GB", "--seeds", "2",
            "--workers", "1", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    plan = json.loads((out / "plan.json").read_text())
    frontier = pd.read_parquet(out / "frontier.parquet")
    answer = plan["answer"]
    assert 1e9 < answer < 6e9 and plan["direction"] == "smallest"
    # The answer passes; the grid value just below it was simulated and fails.
    by_value = frontier.set_index("value")
    assert by_value.loc[answer, "passed"] and not by_value.loc[answer - 0.5e9, "passed"]
    assert by_value.loc[answer, "hit_ratio_mean"] >= 0.85
    assert (frontier.cost_per_million_tokens_usd > 0).all()
    text = " ".join(result.output.split())
    assert "frontier" in text and "smallest hardware.kv_capacity_bytes meeting every SLO" in text
    # Rerun reuses every run.
    again = CliRunner().invoke(app, args)
    assert "0 runs made" in " ".join(again.output.split())


def test_plan_cli_bad_slo_exits_2(small_scenario_yaml):
    result = run_cli("plan", str(small_scenario_yaml), "--slo", "ttft<=x", "--vary", "hardware.kv_capacity_bytes=1GB..2GB")
    assert result.returncode == 2 and "--slo" in result.stderr and "Traceback" not in result.stderr


TIERED = (SMALL_SCENARIO.replace("name: small", "name: small-tiered")
          .replace("kv_capacity_bytes: 6GB", "kv_capacity_bytes: 1GB")
          .replace("cache: {block_tokens: 64, eviction: lru}",
                   "cache: {block_tokens: 64, eviction: lru, tiers: {dram: {capacity_bytes: 4GB, eviction: lru, "
                   "write_policy: write_back}}}"))


def test_plan_prices_memory_below_hbm_and_gives_one_answer(tmp_path):
    """DRAM capacity costs per GB-month, so the plan's one answer (the smallest passing DRAM
    tier) is also the cheapest passing point per hour, and the output names no second answer.
    The objective sits between the hit ratio with 1 GB of DRAM (0.78) and the plateau from 4 GB
    on (0.88), so the smallest sizes fail and the larger ones pass."""
    from agentsim.cli import app

    scenario = tmp_path / "tiered.yaml"
    scenario.write_text(TIERED)
    out = tmp_path / "plan"
    result = CliRunner().invoke(app, ["plan", str(scenario), "--slo", "hit_ratio>=0.85",
                                      "--vary", "cache.tiers.dram.capacity_bytes=1GB..16GB", "--resolution", "1GB",
                                      "--seeds", "1", "--workers", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "cheapest passing point" not in text and "it costs $" in text and "/h" in text
    frontier = pd.read_parquet(out / "frontier.parquet").sort_values("value")
    per_hour = frontier.cost_usd_per_hour.to_numpy()
    assert (per_hour[1:] > per_hour[:-1]).all()              # more DRAM costs more per hour
    assert (frontier.memory_usd_per_hour > 0).all()
    plan = json.loads((out / "plan.json").read_text())
    passing = frontier[frontier.passed]
    assert plan["answer"] == passing.loc[passing.cost_usd_per_hour.idxmin(), "value"]
    # 1 GB of DRAM for an hour at the profile's price, for the one instance.
    from agentsim.config.scenario import HardwareConfig
    price = HardwareConfig().dram_usd_per_gb_month / 730.0
    gap = frontier.memory_usd_per_hour.iloc[1] - frontier.memory_usd_per_hour.iloc[0]
    steps = (frontier.value.iloc[1] - frontier.value.iloc[0]) / 1e9
    assert gap == pytest.approx(price * steps, rel=0.02)     # whole blocks: within 2%


class PricedExecutor(FakeExecutor):
    """FakeExecutor whose summaries also carry a cost per hour: ``cost(value)``."""

    def __init__(self, path, response, cost):
        super().__init__(path, response)
        self.cost = cost

    def run(self, tasks):
        for outcome in super().run(tasks):
            outcome.summary.update({"cost_usd_per_hour": self.cost(self.calls[-1][0]), "memory_usd_per_hour": 0.0})
            yield outcome


def _priced_plan(small_scenario_yaml, tmp_path, cost):
    b = builder(small_scenario_yaml)
    axis = parse_vary("hardware.kv_capacity_bytes=1GB..5GB", b, "0.125GB")
    executor = PricedExecutor(axis.path, lambda v, s: 1.0 if v >= 3e9 else 3.0, cost)
    return Planner(b, axis, [parse_slo("ttft_p99_s<=2")], [1], executor, SweepStore(tmp_path / "p"), "all").run()


def test_hbm_points_cost_the_same_and_the_answer_says_so(small_scenario_yaml, tmp_path):
    report = _priced_plan(small_scenario_yaml, tmp_path, lambda value: 24.0)
    assert report.answer == pytest.approx(3e9)
    assert "it costs $24/h" in report.message
    assert "costs the same per hour (HBM comes with the GPUs)" in report.message
    assert not any("not monotone" in w for w in report.warnings)


def test_a_cheaper_passing_point_is_a_warning_not_a_second_answer(small_scenario_yaml, tmp_path):
    report = _priced_plan(small_scenario_yaml, tmp_path, lambda value: 30.0 - value / 1e9)
    assert report.answer == pytest.approx(3e9)
    assert any("cost per hour is not monotone" in w and "5GB" in w for w in report.warnings)
