"""`agentsim fit` on real traces: the FITS.yaml layout, scenario fit references, bad input, facts."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import yaml
from pydantic import TypeAdapter

from agentsim.commands.fit import run_fit
from agentsim.engine.loading import load_scenario
from agentsim.errors import InputError
from agentsim.workload.distributions import DistributionSpec, build
from tests.conftest import ROOT, SHARED_DATA, run_cli

WEKA = SHARED_DATA / "weka-claude-code"  # all 119 sessions: only the refit of the shipped fits needs them
FIXTURES = ROOT / "tests" / "fixtures" / "traces"
WEKA_FIXTURES = FIXTURES / "weka"  # six whole sessions copied from WEKA (see fixtures/traces/README.md)
SPEC = TypeAdapter(DistributionSpec)
# Three real sessions, two of them with sub-agents (0014: one, 0254: five in two spawns).
THREE = [str(WEKA_FIXTURES / f"trace_{n}.json.gz") for n in ("0014", "0254", "0291")]
WEKA_NAMES = ["tool_gap", "human_gap", "api_time", "appended_tokens", "output_tokens", "calls_per_session",
              "subagent_fanout", "subagents_per_call"]
ENTRY_KEYS = {"spec", "family", "parameters", "n", "quantiles", "empirical_quantiles", "provenance"}


@pytest.fixture(scope="module")
def three_fits(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("fits") / "fits.yaml"
    messages: list[str] = []
    run_fit(THREE, out, progress=messages.append)
    assert any("wrote" in m for m in messages)
    return out, yaml.safe_load(out.read_text())


def test_fit_writes_every_quantity_with_scores_and_quantiles(three_fits):
    _, doc = three_fits
    quantities = doc["quantities"]
    for name in WEKA_NAMES:
        assert name in quantities, name
        entry = quantities[name]
        assert ENTRY_KEYS <= set(entry), (name, set(entry))
        SPEC.validate_python(entry["spec"])
        assert set(entry["quantiles"]) == set(entry["empirical_quantiles"]) == {"p50", "p90", "p99"}
        assert entry["provenance"]["files"] == 3
    tool = quantities["tool_gap"]
    assert tool["n"] > 100 and tool["resolution"] == 1.0
    assert tool["criterion"] == "bic"
    runners = tool["runners_up"]
    assert len(runners) == 7  # 8 candidates, one chosen
    for runner in runners:
        assert {"family", "aic", "bic", "ks", "ad"} <= set(runner)
        assert runner["bic"] >= tool["scores"]["bic"]
    # The tool-gap median is honest to the data (within the rounding step).
    assert abs(tool["quantiles"]["p50"] - tool["empirical_quantiles"]["p50"]) <= 1.0
    # Sub-agent structure of these sessions: spawns of 1, 3 (+2 later in 0254) and 2.
    fanout = quantities["subagent_fanout"]
    assert fanout["spec"]["values"] == [1.0, 2.0, 2.0, 3.0]
    per_call = quantities["subagents_per_call"]
    assert per_call["parameters"]["rate"] == pytest.approx(8 / per_call["n"])
    assert quantities["calls_per_session"]["n"] == 3
    prov = doc["provenance"]
    assert prov["files"] == 3 and prov["format"] == "weka" and prov["sources"] == THREE
    assert prov["command"].startswith("agentsim fit ") and "--out" in prov["command"]
    assert prov["date"]


def test_scenario_loader_resolves_references_to_the_written_file(three_fits, small_scenario_yaml, tmp_path):
    out, doc = three_fits
    text = small_scenario_yaml.read_text()
    text = text.replace("tool_gap_s: {dist: lognormal, median: 5, sigma: 1.0}",
                        f"tool_gap_s: {{fit: {out}#tool_gap, max: 3600}}")
    text = text.replace("human_gap_s: {dist: exponential, mean: 30}", f"human_gap_s: {{fit: {out}#human_gap}}")
    text = text.replace("appended_tokens: {dist: lognormal, median: 800, sigma: 0.8, round: true}",
                        f"appended_tokens: {{fit: {out}#appended_tokens}}")
    assert text.count("{fit:") == 3
    scenario_file = tmp_path / "with_fits.yaml"
    scenario_file.write_text(text)
    scenario = load_scenario(scenario_file)
    coding = scenario.workload.agent_classes["coding"]
    tool_spec = coding.tool_gap_s
    assert tool_spec.max == 3600
    drawn = build(tool_spec).sample(np.random.default_rng(0), 20000)
    assert np.median(drawn) == pytest.approx(doc["quantities"]["tool_gap"]["quantiles"]["p50"], rel=0.08)
    assert build(coding.appended_tokens).spec.round


def test_fit_on_jsonl_fixtures_mooncake_and_bailian(tmp_path):
    out = tmp_path / "mooncake.yaml"
    doc = run_fit([str(FIXTURES / "mooncake_head40.jsonl")], out)
    assert set(doc["quantities"]) >= {"input_tokens", "output_tokens", "interarrival"}
    assert doc["quantities"]["input_tokens"]["n"] == 40
    assert doc["quantities"]["interarrival"]["n"] == 39
    doc = run_fit([str(FIXTURES / "bailian_sample.jsonl")], tmp_path / "bailian.yaml")
    assert doc["provenance"]["format"] == "bailian"
    assert doc["quantities"]["calls_per_session"]["n"] >= 1
    for entry in doc["quantities"].values():
        SPEC.validate_python(entry["spec"])


def test_directories_and_globs_expand_and_mixed_formats_are_refused(tmp_path):
    out = tmp_path / "f.yaml"
    doc = run_fit([str(WEKA_FIXTURES / "trace_02*.json.gz")], out)
    assert doc["provenance"]["files"] == 2  # 0254 and 0291
    doc = run_fit([str(WEKA_FIXTURES)], out)
    assert doc["provenance"]["files"] == 6
    with pytest.raises(InputError, match="fit one format at a time"):
        run_fit([str(WEKA_FIXTURES / "trace_0014.json.gz"), str(FIXTURES / "mooncake_head40.jsonl")], out)


@pytest.mark.parametrize("case", ["no_traces", "missing", "garbage", "empty_dir", "no_glob_match", "bad_criterion"])
def test_bad_input_exits_2_with_one_line(case, tmp_path):
    out = str(tmp_path / "fits.yaml")
    if case == "no_traces":
        args = ["fit", "--out", out]
    elif case == "missing":
        args = ["fit", str(tmp_path / "nope.json.gz"), "--out", out]
    elif case == "garbage":
        bad = tmp_path / "bad.json.gz"
        bad.write_bytes(gzip.compress(b"{\"requests\": [1, 2") [:20])  # truncated gzip stream
        args = ["fit", str(bad), "--out", out]
    elif case == "empty_dir":
        (tmp_path / "empty").mkdir()
        args = ["fit", str(tmp_path / "empty"), "--out", out]
    elif case == "no_glob_match":
        args = ["fit", str(tmp_path / "*.json.gz"), "--out", out]
    else:
        args = ["fit", THREE[0], "--out", out, "--criterion", "r2"]
    proc = run_cli(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not Path(out).exists()


@pytest.mark.slow
@pytest.mark.skipif(len(list(WEKA.glob("*.json.gz"))) != 119,
                    reason=f"needs all 119 Claude Code sessions in {WEKA}")
def test_shipped_fits_match_the_published_facts_and_are_reproducible(tmp_path):
    """Refit the 119 shared traces (~15 s): same specs as fits/claude-code.yaml; facts hold."""
    out = tmp_path / "claude-code.yaml"
    proc = run_cli("fit", str(WEKA), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "tool_gap" in proc.stdout  # the summary table
    assert "read 119/119 files" in proc.stderr  # progress on stderr
    fresh = yaml.safe_load(out.read_text())["quantities"]
    shipped = yaml.safe_load((ROOT / "fits" / "claude-code.yaml").read_text())["quantities"]
    assert {name: q["spec"] for name, q in fresh.items()} == {name: q["spec"] for name, q in shipped.items()}
    tool = shipped["tool_gap"]
    assert tool["empirical_quantiles"]["p50"] == 9.0  # published: about 9 s
    assert 60 <= tool["empirical_quantiles"]["p90"] <= 85  # about 71 s
    assert 500 <= tool["empirical_quantiles"]["p99"] <= 750  # about 600 s
    for key, tolerance in (("p50", 0.1), ("p90", 0.1), ("p99", 0.2)):
        assert tool["quantiles"][key] == pytest.approx(tool["empirical_quantiles"][key], rel=tolerance)
    human = shipped["human_gap"]
    assert 180 <= human["empirical_quantiles"]["p50"] <= 260  # about 210 s
    drawn = build(SPEC.validate_python(human["spec"])).sample(np.random.default_rng(0), 50000)
    assert np.mean(drawn > 300) > 0.40  # over 40% above 5 minutes
