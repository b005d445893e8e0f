"""The generated coding-agent workload agrees with the Claude Code traces it was fitted to.

Sessions of the default scenario draw tool gaps, calls per session and per-call context growth
from ``fits/claude-code.yaml``. Their quantiles must match the empirical quantiles of the shared
traces within 10% (p99 within 20%).
"""


import numpy as np
import pytest

from agentsim.engine.loading import load_scenario
from agentsim.engine.agents import AgentClassModel
from agentsim.workload.fitting.quantities import weka_quantities
from tests.conftest import ROOT, SHARED_DATA

TRACES = sorted((SHARED_DATA / "weka-claude-code").glob("*.json.gz"))

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not TRACES, reason=f"needs the 119 Claude Code sessions in {SHARED_DATA / 'weka-claude-code'}")]


@pytest.fixture(scope="module")
def empirical():
    quantities = {q.name: q.sample.values for q in weka_quantities(TRACES)}
    return quantities


@pytest.fixture(scope="module")
def generated():
    scenario = load_scenario(ROOT / "scenarios" / "coding-agents.yaml")
    spec = scenario.workload.agent_classes["coding"]
    model = AgentClassModel("coding", 0, spec)
    rng = np.random.default_rng(2026)
    n = 200_000
    return {
        "tool_gap": model.tool_gap.sample(rng, n),
        "calls_per_session": np.maximum(1, model.calls.sample(rng, n)),
        "appended_tokens": model.appended.sample(rng, n),
        "output_tokens": model.output.sample(rng, n),
    }


def _check(gen, emp, q, tolerance):
    g, e = np.percentile(gen, q), np.percentile(emp, q)
    assert g == pytest.approx(e, rel=tolerance), f"p{q}: generated {g:.1f} vs traces {e:.1f}"


@pytest.mark.parametrize("q,tolerance", [(50, 0.10), (90, 0.10), (99, 0.20)])
def test_tool_gap_quantiles(generated, empirical, q, tolerance):
    _check(generated["tool_gap"], empirical["tool_gap"], q, tolerance)


@pytest.mark.parametrize("q,tolerance", [(50, 0.10), (90, 0.10)])
def test_calls_per_session(generated, empirical, q, tolerance):
    _check(generated["calls_per_session"], empirical["calls_per_session"], q, tolerance)


def test_calls_per_session_mean(generated, empirical):
    assert generated["calls_per_session"].mean() == pytest.approx(empirical["calls_per_session"].mean(), rel=0.10)


@pytest.mark.parametrize("q,tolerance", [(50, 0.10), (90, 0.10), (99, 0.20)])
def test_context_growth_per_call(generated, empirical, q, tolerance):
    # Context grows by the tokens appended between calls plus the previous call's output.
    _check(generated["appended_tokens"], empirical["appended_tokens"], q, tolerance)
    _check(generated["output_tokens"], empirical["output_tokens"], q, tolerance)


def test_mean_context_growth(generated, empirical):
    growth_gen = generated["appended_tokens"].mean() + generated["output_tokens"].mean()
    growth_emp = empirical["appended_tokens"].mean() + empirical["output_tokens"].mean()
    assert growth_gen == pytest.approx(growth_emp, rel=0.10)
