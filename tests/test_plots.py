"""Figures over real run tables and hand-made tables whose right answer is known."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from agentsim import plots
from agentsim.engine.loading import load_scenario
from agentsim.engine.simulation import run_scenario
from tests.conftest import ROOT

TIERS = "cache.tiers={dram: {capacity_bytes: 100GB, eviction: lru, write_policy: write_back}, disk: {capacity_bytes: 400GB}}"


@pytest.fixture(scope="module")
def tiered_run():
    """A 3-minute coding-agents run with a small HBM and DRAM + disk tiers (links, evictions)."""
    scenario = load_scenario(ROOT / "scenarios" / "coding-agents.yaml",
                             ["duration_s=3m", "hardware.kv_capacity_bytes=6GB", TIERS])
    return run_scenario(scenario)


def _requests(n: int = 2000, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    queue = rng.exponential(0.05, n)
    load = rng.exponential(0.01, n)
    prefill = rng.lognormal(-2, 1, n)
    return pd.DataFrame({
        "request_id": np.arange(n), "session_id": np.arange(n) // 10, "depth": 0, "arrival_s": np.linspace(0, 100, n),
        "gap_before_s": rng.lognormal(2, 2, n), "gap_kind": "tool", "prompt_tokens": 10_000,
        "hit_tokens": 8_000, "recomputed_tokens": 2_000, "queue_wait_s": queue, "load_wait_s": load,
        "prefill_s": prefill, "ttft_s": queue + load + prefill, "e2e_s": queue + load + prefill + 5.0,
        "rejected": False, "output_tokens": 100,
    })


def test_latency_cdf_marks_p99_and_p999_at_numpy_percentiles():
    requests = _requests()
    requests["policy"] = np.where(requests.request_id % 2 == 0, "lru", "fifo")
    fig = plots.latency_cdf(requests, hue="policy")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "logit"
    lru = np.sort(requests.ttft_s[requests.policy == "lru"].to_numpy())
    markers = [(line.get_xdata()[0], line.get_ydata()[0]) for line in ax.lines
               if len(line.get_xdata()) == 1 and line.get_marker() in ("o", "X")]
    for q in (0.99, 0.999):
        expected = np.percentile(lru, q * 100)
        assert any(abs(x - expected) < 1e-12 and y == q for x, y in markers)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(text.startswith("lru: p99") for text in legend) and any(text.startswith("fifo: p99") for text in legend)
    plt.close(fig)


def test_slowest_requests_and_breakdown_parts_sum_to_ttft():
    requests = _requests()
    slow = plots.slowest_requests(requests, quantile=0.999, min_requests=20)
    assert len(slow) == 20 and slow.ttft_s.is_monotonic_decreasing
    assert slow.ttft_s.min() >= requests.ttft_s.nlargest(20).min()
    assert np.allclose(slow.other_s, 0.0, atol=1e-12)
    fig = plots.ttft_breakdown(requests)
    bars = fig.axes[0].patches
    widths = np.array([b.get_width() for b in bars]).reshape(3, -1)   # queue, load, prefill stacks
    assert np.allclose(widths.sum(axis=0), slow.head(30).ttft_s.to_numpy()[::-1])
    plt.close(fig)


def test_breakdown_of_old_runs_without_load_columns():
    requests = _requests().drop(columns=["load_wait_s", "prefill_s"])
    fig = plots.ttft_breakdown(requests)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["queue wait", "service (load + prefill)"]
    plt.close(fig)


def test_evictions_over_time_rates_from_cumulative_samples():
    # Cumulative: capacity 0,10,30 at t=0,10,20; ttl_expiry appears at t=20 with 5.
    evictions = pd.DataFrame({"time_s": [10.0, 20.0, 20.0], "instance": 0, "tier": "hbm",
                              "reason": ["capacity", "capacity", "ttl_expiry"], "evicted_blocks": [10, 30, 5]})
    evictions = pd.concat([pd.DataFrame({"time_s": [0.0], "instance": [0], "tier": ["hbm"], "reason": ["capacity"],
                                         "evicted_blocks": [0]}), evictions], ignore_index=True)
    diffs = plots._interval_diffs(evictions, ["instance", "tier", "reason"], ["evicted_blocks"])
    cap = diffs[diffs.reason == "capacity"].set_index("time_s").evicted_blocks
    ttl = diffs[diffs.reason == "ttl_expiry"].set_index("time_s").evicted_blocks
    assert cap.tolist() == [0, 10, 20] and ttl.tolist() == [0, 0, 5]
    fig = plots.evictions_over_time(evictions)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["capacity (30 blocks)", "ttl_expiry (5 blocks)"]
    plt.close(fig)


def test_hit_ratio_vs_capacity_draws_policies_the_upper_bound_and_the_belady_heuristic():
    # Both references are cache-only block replays: drawn against the policies' own replay
    table = pd.DataFrame({"kv_capacity_bytes": [10e9, 10e9, 40e9, 40e9], "policy": ["lru", "fifo"] * 2,
                          "policy_replay_hit_ratio": [0.5, 0.4, 0.8, 0.7], "belady_replay_hit_ratio": [0.6, 0.6, 0.85, 0.85],
                          "upper_bound_replay_hit_ratio": [0.65, 0.65, 0.9, 0.9]})
    fig = plots.hit_ratio_vs_capacity(table, hit="policy_replay_hit_ratio")
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.lines}
    bound = lines["upper bound (no policy exceeds it)"]
    assert list(bound.get_ydata()) == [0.65, 0.9] and list(bound.get_xdata()) == [10, 40]
    assert list(lines["Belady heuristic (offline, not a bound)"].get_ydata()) == [0.6, 0.85]
    assert not any("optimum" in name for name in lines)  # never called the optimum
    plt.close(fig)
    fig = plots.hit_ratio_vs_capacity(table.drop(columns=["upper_bound_replay_hit_ratio"]), hit="policy_replay_hit_ratio")
    assert any("no upper bound" in t.get_text() for t in fig.axes[0].texts)
    plt.close(fig)


def test_cost_vs_sla_one_point_per_cell():
    table = pd.DataFrame({"label": ["a", "a", "b", "b"], "seed": [1, 2, 1, 2], "status": "ok", "policy": ["lru", "lru", "fifo", "fifo"],
                          "sla_attainment": [0.9, 1.0, 0.5, 0.7], "cost_per_million_tokens_usd": [1.0, 1.2, 0.5, 0.7]})
    means = plots.cell_means(table, ["sla_attainment", "cost_per_million_tokens_usd"])
    assert means.sla_attainment.tolist() == pytest.approx([0.95, 0.6])
    fig = plots.cost_vs_sla(table, hue="policy")
    assert {t.get_text() for t in fig.axes[0].texts} == {"a", "b"}
    plt.close(fig)


def test_gap_buckets_match_summary_buckets():
    requests = pd.DataFrame({"gap_before_s": [np.nan, 0.5, 5, 30, 120, 600, 7200], "gap_kind": ["first"] + ["tool"] * 6})
    assert list(plots.gap_bucket(requests)) == ["first_call", "lt_1s", "1_10s", "10_60s", "1_5min", "5_60min", "gt_1h"]


def test_real_tiered_run_tables_plot(tiered_run):
    tables = tiered_run.tables
    assert {"evictions", "link_samples", "links"} <= set(tables)
    samples = tables["link_samples"]
    # Cumulative samples never decrease, and the last one matches the whole-run link totals.
    for _link, group in samples.groupby("link"):
        assert group.bytes.is_monotonic_increasing and group.busy_s.is_monotonic_increasing
    last = samples[samples.time_s == samples.time_s.max()].set_index("link")
    totals = tables["links"].set_index("link")
    assert np.allclose(last.bytes, totals.bytes.loc[last.index], rtol=1e-6, atol=1.0)
    ev = tables["evictions"]
    final = ev[ev.time_s == ev.time_s.max()].groupby("reason").evicted_blocks.sum()
    hbm_reasons = tiered_run.summary["evictions_by_reason_blocks"]
    hbm_final = ev[(ev.time_s == ev.time_s.max()) & (ev.tier == "hbm")].set_index("reason").evicted_blocks
    for reason, blocks in hbm_final.items():
        assert blocks == hbm_reasons[reason]
    assert final.sum() > 0
    requests = tables["requests"].assign(policy="lru")
    for fig in (plots.latency_cdf(requests, hue="policy"), plots.ttft_breakdown(requests),
                plots.tier_occupancy(tables["occupancy"]), plots.evictions_over_time(ev),
                plots.link_utilisation(samples), plots.link_utilisation(links=tables["links"]),
                plots.recompute_by_gap(requests)):
        assert fig.axes
        plt.close(fig)
    tiers = {line.get_label().split(" ")[0] for line in plots.tier_occupancy(tables["occupancy"]).axes[0].lines}
    assert {"hbm", "dram", "disk"} <= tiers
    plt.close("all")


def test_missing_data_raises_plot_skipped():
    with pytest.raises(plots.PlotSkipped, match="no links"):
        plots.link_utilisation(None, None)
    with pytest.raises(plots.PlotSkipped, match="no rows"):
        plots.evictions_over_time(pd.DataFrame(columns=["time_s", "instance", "tier", "reason", "evicted_blocks"]))
    with pytest.raises(plots.PlotSkipped, match="nothing was evicted"):
        plots.evictions_by_reason_bars({"evictions_by_reason_blocks": {"capacity": 0}})
