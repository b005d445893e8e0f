"""Metrics that mean what their names say: the recompute split, queueing by cause, throughput,
goodput, per-agent-class figures and human units in the CLI table."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agentsim.cache.policies import EVICTION_POLICIES
from agentsim.cache.radix import RadixCache
from agentsim.engine.loading import load_scenario
from agentsim.engine.recompute import RecomputeClassifier
from agentsim.engine.simulation import run_scenario
from agentsim.metrics.catalogue import format_value
from tests.conftest import SMALL_SCENARIO, run_cli

B = 4  # block tokens of the hand-made caches


def _serve(cache, keys, now):
    match = cache.match(keys, now)
    cache.pin(match.node)
    need = len(keys) - match.hit_blocks
    assert cache.reserve(need, now)
    node = cache.commit(match.node, keys[match.hit_blocks:], match.hit_blocks, need, now)
    cache.unpin(node)
    return match.hit_blocks


def _request(keys, hit_blocks, prompt_tokens=None, rewrite=(), instance=0):
    return SimpleNamespace(prompt_tokens=prompt_tokens if prompt_tokens is not None else len(keys) * B,
                           hit_tokens=hit_blocks * B, prompt_keys=keys, rejected=False, instance=instance,
                           rewrite=rewrite, arrival_s=1.0)


def test_classifier_tells_cold_from_evicted_from_invalidated():
    cache = RadixCache(6, EVICTION_POLICIES.get("lru")())
    classifier = RecomputeClassifier([SimpleNamespace(cache=cache, instance_id=0)], B, warmup_s=0.0)
    assert _serve(cache, [1, 2, 3, 4], 0.0) == 0
    # Never cached: all cold, including the partial last block (2 tokens).
    assert classifier.classify(_request([1, 2, 3, 4], 0, prompt_tokens=18)) == (18, 0, 0)
    _serve(cache, [10, 11, 12, 13], 1.0)         # evicts two blocks of the first sequence (LRU)
    hit = cache.match([1, 2, 3, 4], 2.0, touch=False).hit_blocks
    assert hit == 2
    cold, evicted, invalidated = classifier.classify(_request([1, 2, 3, 4, 5], hit))
    assert (cold, evicted, invalidated) == (B, 2 * B, 0)   # blocks 3, 4 lost; block 5 new
    assert classifier.evicted_by_tier_tokens == {"hbm": 2 * B}
    # A history rewrite from block 1 of a call that left 4 blocks cached: new keys 20, 21, 22
    # at positions 1..3 replace cached KV (invalidated), position 4 is new text (cold).
    rewritten = _request([1, 20, 21, 22, 23], 1, rewrite=(0, 1, 4))
    assert classifier.classify(rewritten) == (B, 0, 3 * B)
    # The same rewrite seen by another instance is not this instance's invalidation.
    assert classifier.classify(_request([1, 20, 21, 22, 23], 1, rewrite=(1, 1, 4)))[2] == 0


def test_classifier_keeps_each_instances_losses_apart():
    caches = [RadixCache(4, EVICTION_POLICIES.get("lru")()) for _ in range(2)]
    classifier = RecomputeClassifier([SimpleNamespace(cache=c, instance_id=i) for i, c in enumerate(caches)], B, 0.0)
    for cache in caches:
        _serve(cache, [1, 2, 3, 4], 0.0)
    caches[0].evict(4, 1.0)
    caches[1].evict(4, 1.0)          # the same keys lost on a second instance: recorded apart
    _serve(caches[1], [1, 2, 3, 4], 2.0)
    assert classifier.classify(_request([1, 2, 3, 4], 0, instance=0)) == (0, 4 * B, 0)
    assert classifier.classify(_request([7, 8], 0, instance=1)) == (2 * B, 0, 0)
    # A key held only by instance 0 is cold on instance 1.
    _serve(caches[0], [30, 31], 3.0)
    caches[0].evict(4, 4.0)
    assert classifier.classify(_request([30, 31], 0, instance=1)) == (2 * B, 0, 0)
    assert classifier.classify(_request([30, 31], 0, instance=0))[1] == 2 * B


#: The small scenario with compaction instead of sub-agents, 3 GB of KV and a chat class beside the coding one.
MIXED = (SMALL_SCENARIO.replace("name: small", "name: mixed").replace("kv_capacity_bytes: 6GB", "kv_capacity_bytes: 3GB")
         .replace("      subagents: {probability: 0.1, fanout: 2, calls: 3}\n", """\
      compaction: {trigger_tokens: 12000, keep_tokens: 3000}
    chat:
      arrival: {kind: population, concurrent: 6, ramp_s: 10s}
      tools_prefix_tokens: 500
      initial_context_tokens: {dist: lognormal, median: 800, sigma: 0.5, round: true}
      calls_per_session: {dist: lognormal, median: 5, sigma: 0.5, min: 1, round: true}
      tool_gap_s: {dist: lognormal, median: 20, sigma: 1.0}
      human_turn_probability: 0.5
      human_gap_s: {dist: exponential, mean: 30}
      appended_tokens: {dist: lognormal, median: 300, sigma: 0.8, round: true}
      output_tokens: {dist: lognormal, median: 300, sigma: 0.7, min: 1, round: true}
"""))


@pytest.fixture(scope="module")
def mixed_yaml(tmp_path_factory):
    path = tmp_path_factory.mktemp("mixed") / "mixed.yaml"
    path.write_text(MIXED)
    return path


def _run(path, *overrides):
    return run_scenario(load_scenario(path, ["run.check_invariants=true", *overrides]))


@pytest.fixture(scope="module")
def mixed(mixed_yaml):
    return _run(mixed_yaml)


def test_recomputed_tokens_are_cold_plus_evicted_plus_invalidated(mixed, mixed_yaml):
    s, requests = mixed.summary, mixed.tables["requests"]
    parts = requests.recomputed_cold_tokens + requests.recomputed_evicted_tokens + requests.recomputed_invalidated_tokens
    assert (parts == requests.recomputed_tokens).all()
    assert s["recomputed_tokens_cold"] + s["recomputed_tokens_evicted"] + s["recomputed_tokens_invalidated"] == s["recomputed_tokens"]
    # 3 GB evicts and the coding class compacts: every cause is present.
    assert s["evicted_blocks"] > 0 and s["compactions"] > 0
    assert s["recomputed_tokens_evicted"] > 0 and s["recomputed_tokens_invalidated"] > 0
    assert s["recomputed_tokens_evicted_by_tier"] == {"hbm": s["recomputed_tokens_evicted"]}
    # First calls are never cached anywhere: all cold.
    first = requests[requests.gap_kind == "first"]
    assert (first.recomputed_cold_tokens == first.recomputed_tokens).all()
    # Nothing lost with ample memory and no compaction: the old "recomputed" is all cold.
    roomy = _run(mixed_yaml, "hardware.kv_capacity_bytes=200GB", "workload.agent_classes.coding.compaction=null").summary
    assert roomy["evicted_blocks"] == 0
    assert roomy["recomputed_tokens_cold"] == roomy["recomputed_tokens"] > 0
    assert roomy["recomputed_tokens_evicted"] == roomy["recomputed_tokens_invalidated"] == 0


def test_recompute_split_by_tier_names_the_tier_that_lost_the_blocks():
    from tests.conftest import ROOT
    s = run_scenario(load_scenario(ROOT / "scenarios" / "ttl-bound.yaml", ["duration_s=10m"])).summary
    by_tier = s["recomputed_tokens_evicted_by_tier"]
    assert set(by_tier) == {"hbm", "dram"}
    # HBM only demotes to DRAM; what is lost is lost from DRAM (its TTL expiry or capacity).
    assert by_tier["dram"] == s["recomputed_tokens_evicted"] > 0 and by_tier["hbm"] == 0


def test_queueing_is_split_by_cause(mixed_yaml):
    run = _run(mixed_yaml, "hardware.kv_capacity_bytes=400MB")
    s, requests = run.summary, run.tables["requests"]
    parts = requests.queue_slot_s + requests.queue_kv_s + requests.queue_load_s + requests.queue_step_s
    done = requests[~requests.rejected]
    assert (parts[done.index] - done.queue_wait_s).abs().max() < 1e-9
    # Preempted requests wait in the queue again after their first admission: that wait is
    # requeue_wait_s, apart from the first wait the causes partition.
    preempted = done[done.preemptions > 0]
    assert len(preempted) > 0 and (preempted.requeue_wait_s > 0).any()
    assert (done[done.preemptions == 0].requeue_wait_s == 0).all()
    assert s["requeue_wait_mean_s"] == pytest.approx(done.requeue_wait_s.sum() / len(done))
    # 400 MB of KV for 14 agents: the queue waits for memory, not for batch slots.
    assert s["queue_wait_share_by_cause"]["kv"] > 0.9
    assert s["queue_kv_mean_s"] > 10 * s["queue_slot_mean_s"]
    slots = _run(mixed_yaml, "serving.max_batch_requests=4").summary
    assert slots["queue_wait_share_by_cause"]["slot"] > 0.3 and slots["queue_kv_mean_s"] == 0


def test_queue_causes_partition_the_prefill_queue_when_disaggregated():
    from tests.conftest import ROOT
    run = run_scenario(load_scenario(ROOT / "scenarios" / "gb300-disagg.yaml", ["duration_s=1m", "run.check_invariants=true"]))
    requests = run.tables["requests"]
    done = requests[~requests.rejected]
    parts = done.queue_slot_s + done.queue_kv_s + done.queue_load_s + done.queue_step_s
    assert len(done) > 0 and (done.prefill_worker >= 0).all()
    assert (parts - done.queue_wait_s).abs().max() < 1e-9
    assert (done.queue_wait_s > 0).any()


def test_throughput_goodput_and_agent_classes(mixed, mixed_yaml):
    s, requests = mixed.summary, mixed.tables["requests"]
    window = s["measured_window_s"]
    assert window == pytest.approx(s["simulated_s"] - 0.0)
    assert s["requests_per_s"] * window == pytest.approx(s["requests_measured"])
    assert s["output_tokens_per_s"] * window == pytest.approx(s["output_tokens"])
    assert s["goodput_requests_per_s"] * window == pytest.approx(int(requests.slo_met.sum()))
    tight = _run(mixed_yaml, "slo.ttft_s=50ms").summary
    assert tight["goodput_requests_per_s"] < 0.9 * tight["requests_per_s"]
    classes = s["by_agent_class"]
    assert set(classes) == {"coding", "chat"}
    assert sum(c["requests_measured"] for c in classes.values()) == s["requests_measured"]
    assert sum(c["recomputed_tokens"] for c in classes.values()) == s["recomputed_tokens"]
    assert sum(c["requests_per_s"] for c in classes.values()) == pytest.approx(s["requests_per_s"])
    coding = requests[requests.agent_class == "coding"]
    assert classes["coding"]["hit_ratio"] == pytest.approx(coding.hit_tokens.sum() / coding.prompt_tokens.sum())


def test_one_class_runs_have_no_per_class_table(small_scenario_yaml):
    assert "by_agent_class" not in run_scenario(load_scenario(small_scenario_yaml, ["duration_s=1m"])).summary


def test_human_units():
    assert format_value(0.04551, "s") == "45.5 ms"
    assert format_value(2.5, "s") == "2.5 s"
    assert format_value(668.0, "s") == "11.1 min"
    assert format_value(3 * 3600.0, "s") == "3 h"
    assert format_value(80e9, "bytes") == "80 GB"
    assert format_value(float("nan"), "s") == "-"


def test_cli_table_prints_latencies_in_ms_and_per_class_figures(mixed_yaml, tmp_path):
    proc = run_cli("run", str(mixed_yaml), "--out", str(tmp_path / "out"), "--set", "duration_s=1m")
    assert proc.returncode == 0, proc.stderr
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in proc.stdout.splitlines()
            if line.count("│") >= 3}
    assert rows["TTFT p50"].endswith(" ms") and rows["TPOT p99"].endswith(" ms")
    assert "throughput (requests/s)" in rows and "goodput (requests/s within the SLO)" in rows
    assert "by agent class" in proc.stdout and "coding" in proc.stdout and "chat" in proc.stdout


def test_deployment_is_stated_in_summary_cli_and_report(tmp_path):
    from tests.conftest import ROOT
    out = tmp_path / "tiers"
    proc = run_cli("run", str(ROOT / "scenarios" / "ttl-bound.yaml"), "--out", str(out), "--set", "duration_s=1m")
    assert proc.returncode == 0, proc.stderr
    import json
    dep = json.loads((out / "summary.json").read_text())["deployment"]
    assert dep["hardware"] == "gb300_nvl72" and dep["gpus"] == 4 and dep["gpus_per_instance"] == 4
    assert dep["model"] == "deepseek-ai/DeepSeek-V3" and dep["engine"] == "sglang"  # scenarios/ttl-bound.yaml serves with SGLang
    assert dep["parallelism"].startswith("tp4")
    assert [t["name"] for t in dep["tiers"]] == ["hbm", "dram"]
    assert dep["kv_capacity_bytes"] == pytest.approx(8e9, rel=0.01)
    assert dep["timing_source"] in ("measured", "roofline")
    for text in ("gb300_nvl72", "DeepSeek-V3", "tp4", "hbm 8 GB + dram", "step timing"):
        assert text in proc.stdout, text
    report = run_cli("report", str(out))
    assert report.returncode == 0, report.stderr
    html = (out / "report.html").read_text()
    assert "<h2>Deployment</h2>" in html and "gb300_nvl72" in html and "DeepSeek-V3" in html


def _ttl_bound(*overrides):
    from tests.conftest import ROOT
    return run_scenario(load_scenario(ROOT / "scenarios" / "ttl-bound.yaml", ["duration_s=10m", *overrides])).summary


def test_each_tier_has_a_regime_that_agrees_with_its_evictions():
    # A 5-minute TTL on HBM over an LRU DRAM tier big enough to keep everything it gets: HBM
    # demotes thousands of blocks, DRAM evicts none.
    s = _ttl_bound("cache.eviction=ttl_5m", "cache.tiers.dram.eviction=lru", "cache.tiers.dram.capacity_bytes=30GB")
    by_tier = s["evictions_by_tier_and_reason_blocks"]
    assert sum(by_tier["hbm"].values()) > 1000 and sum(by_tier["dram"].values()) == 0
    assert s["regime_by_tier"] == {"hbm": "capacity_bound", "dram": "no_eviction"}
    # The run's regime is that of the TTL's tier, not "no_eviction" beside thousands of evictions.
    assert s["regime"] == "capacity_bound" and s["evicted_blocks"] > 0
    assert s["cache_exit_regime"] == "no_eviction"


def test_ttl_is_judged_against_the_tier_it_applies_to():
    s = _ttl_bound("cache.eviction=ttl_5m", "cache.tiers.dram.eviction=lru", "cache.tiers.dram.capacity_bytes=30GB")
    assert s["ttl_tier"] == "hbm" and s["ttl_s"] == 300
    t_c_hbm = s["characteristic_eviction_time_by_tier_s"]["hbm"]
    assert s["ttl_tier_characteristic_eviction_time_s"] == t_c_hbm
    assert s["ttl_margin_s"] == pytest.approx(300 - t_c_hbm) and s["ttl_margin_s"] > 0
    # The TTL cannot fire (HBM evicts after about T_C, well before 5 minutes): a warning says so.
    assert s["ttl_expirations_blocks"] == 0
    assert s["ttl_warning"] is not None and "never fired" in s["ttl_warning"] and "hbm" in s["ttl_warning"]
    # A TTL that fires (on DRAM, the scenario as written) gets no warning, and its tier is DRAM.
    fired = _ttl_bound()
    assert fired["ttl_tier"] == "dram" and fired["ttl_expirations_blocks"] > 0 and fired["ttl_warning"] is None
    assert fired["regime"] == fired["regime_by_tier"]["dram"] == "ttl_bound"


def test_cli_warns_when_a_ttl_cannot_fire(tmp_path):
    from tests.conftest import ROOT
    proc = run_cli("run", str(ROOT / "scenarios" / "ttl-capacity-bound.yaml"), "--out", str(tmp_path / "o"),
                   "--set", "duration_s=5m", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert "warning: the TTL" in proc.stderr and "never fired" in proc.stderr
