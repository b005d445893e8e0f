"""Workload structure: prefix-sharing graph, sub-agents, context mutation, arrival profiles."""

import json

import pytest

from agentsim.engine.loading import scenario_from_dict
from agentsim.engine.agents import arrival_rate_multiplier
from agentsim.engine.simulation import run_scenario
from agentsim.workload.prefix_graph import PromptPath, build_prefix_graph, sharing_statistics
from tests.conftest import ROOT, run_cli


def scenario(**agent_overrides):
    agent = {
        "arrival": {"kind": "population", "concurrent": 6, "ramp_s": 5},
        "tools_prefix_tokens": 3000,
        "initial_context_tokens": 1000,
        "calls_per_session": 12,
        "tool_gap_s": {"dist": "exponential", "mean": 2},
        "human_turn_probability": 0.0,
        "appended_tokens": {"dist": "lognormal", "median": 2500, "sigma": 0.5, "round": True},
        "output_tokens": 100,
    }
    agent.update(agent_overrides)
    return scenario_from_dict({
        "name": "structure", "seed": 3, "duration_s": 300,
        "hardware": {"profile": "gb300_nvl72", "kv_capacity_bytes": "200GB"},
        "model": {"profile": "deepseek_v3"},
        "cache": {"block_tokens": 64, "eviction": "lru"},
        "run": {"check_invariants": True},
        "workload": {"global_system_prompt_tokens": 1000, "agent_classes": {"coder": agent}},
    })


def test_prefix_graph_of_hand_made_prompts():
    prompts = [
        PromptPath((1, 2, 3, 10, 11), 0, "a", 0, False),
        PromptPath((1, 2, 3, 10, 11, 12), 0, "a", 0, False),
        PromptPath((1, 2, 3, 20), 1, "a", 0, False),
        PromptPath((1, 2, 3, 10, 11, 30), 0, "a", 1, False),    # a sub-agent of session 0
        PromptPath((1, 2, 40), 2, "b", 0, False),                # another class shares blocks 1, 2
    ]
    graph = build_prefix_graph(prompts, block_tokens=64)
    kinds = {d["kind"]: d for _, d in graph.nodes(data=True)}
    assert kinds["global"]["tokens"] == 2 * 64 and kinds["global"]["requests"] == 5
    assert kinds["class_prefix"]["tokens"] == 64 and kinds["class_prefix"]["sessions"] == 2
    assert kinds["subagent_branch"]["tokens"] == 64
    stats = sharing_statistics(graph)
    total = sum(len(p.keys) for p in prompts) * 64
    assert sum(stats["prompt_tokens_by_kind"].values()) == total
    # reused = tokens already present in an earlier prompt: 0 + 5 + 3 + 5 + 2 blocks
    assert stats["reused_prompt_fraction"] == pytest.approx(15 * 64 / total)


def test_subagents_raise_and_compaction_lowers_the_hit_ratio():
    base = run_scenario(scenario()).summary
    with_subagents = run_scenario(scenario(subagents={"probability": 0.5, "fanout": 3, "calls": 3,
                                                      "system_tokens": 2000, "task_tokens": 300})).summary
    compacted = run_scenario(scenario(compaction={"trigger_tokens": 15000, "keep_tokens": 2000})).summary
    assert with_subagents["subagents"] > 0
    assert with_subagents["hit_ratio"] > base["hit_ratio"]
    assert compacted["compactions"] > 0 and compacted["invalidated_blocks"] > 0
    assert compacted["hit_ratio"] < base["hit_ratio"]
    assert compacted["evicted_blocks_by_reason"].get("mutation", 0) > 0


def test_edits_invalidate_history():
    edited = run_scenario(scenario(edits={"probability": 0.5, "dropped_tokens": 1500})).summary
    base = run_scenario(scenario()).summary
    assert edited["edits"] > 0
    assert edited["evicted_blocks_by_reason"].get("mutation", 0) > 0
    assert edited["hit_ratio"] < base["hit_ratio"]


def test_diurnal_and_burst_arrivals_follow_the_profile():
    profile = [0.2] * 12 + [2.0] * 12
    sc = scenario(arrival={"kind": "poisson", "rate_per_s": 0.02, "diurnal": profile,
                           "bursts": [{"start_s": "1h", "duration_s": "30m", "multiplier": 5}]},
                  calls_per_session=1)
    arrival = sc.workload.agent_classes["coder"].arrival
    assert arrival_rate_multiplier(arrival, 10) == 0.2
    assert arrival_rate_multiplier(arrival, 3600 + 60) == pytest.approx(1.0)
    assert arrival_rate_multiplier(arrival, 13 * 3600) == 2.0
    sc = sc.model_copy(update={"duration_s": 24 * 3600.0})
    requests = run_scenario(sc).tables["requests"]
    first = requests[requests.call_index == 0].arrival_s.to_numpy()
    night = ((first < 12 * 3600) & ~((first >= 3600) & (first < 5400))).sum()
    day = (first >= 12 * 3600).sum()
    # Expected: night 0.02*0.2*(12h-0.5h) ~ 166, day 0.02*2*12h ~ 1728.
    assert day / max(night, 1) == pytest.approx(1728 / 166, rel=0.3)
    burst = ((first >= 3600) & (first < 5400)).sum()
    assert burst == pytest.approx(0.02 * 0.2 * 5 * 1800, rel=0.5)


def test_bad_diurnal_profile_is_rejected(tmp_path):
    text = (ROOT / "scenarios" / "coding-agents.yaml").read_text().replace(
        "arrival: {kind: population, concurrent: 64, ramp_s: 2m}",
        "arrival: {kind: poisson, rate_per_s: 0.1, diurnal: [1, 2, 3]}")
    (tmp_path / "fits").symlink_to(ROOT / "fits")
    (tmp_path / "scenarios").mkdir()
    path = tmp_path / "scenarios" / "s.yaml"
    path.write_text(text)
    proc = run_cli("validate", str(path))
    assert proc.returncode == 2 and "24 hourly multipliers" in proc.stderr and "diurnal" in proc.stderr


def test_graph_command_writes_graphml_png_and_stats(tmp_path):
    out = tmp_path / "g"
    proc = run_cli("graph", str(ROOT / "scenarios" / "coding-agents.yaml"), "--out", str(out), "--duration", "3m",
                   "--set", "workload.agent_classes.coding.subagents.probability=0.3")
    assert proc.returncode == 0, proc.stderr
    stats = json.loads((out / "sharing.json").read_text())
    assert stats["prompts"] > 0 and 0 < stats["shared_prompt_fraction"] < 1
    assert "subagent_branch" in stats["tokens_by_kind"]
    assert (out / "prefix_graph.png").stat().st_size > 10_000
    import networkx as nx

    graph = nx.read_graphml(out / "prefix_graph.graphml")
    assert graph.number_of_nodes() == stats["segments"] + 1


def test_a_diurnal_profile_whose_peak_multiplier_is_one_still_shapes_arrivals():
    profile = [0.1] * 12 + [1.0] * 12   # normalised to the peak hour
    sc = scenario(arrival={"kind": "poisson", "rate_per_s": 0.05, "diurnal": profile}, calls_per_session=1)
    sc = sc.model_copy(update={"duration_s": 24 * 3600.0})
    first = run_scenario(sc).tables["requests"].query("call_index == 0").arrival_s.to_numpy()
    night, day = (first < 12 * 3600).sum(), (first >= 12 * 3600).sum()
    # Expected: night 0.05*0.1*12h = 216, day 0.05*12h = 2160.
    assert night == pytest.approx(216, rel=0.25) and day == pytest.approx(2160, rel=0.1)
