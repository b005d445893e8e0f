"""What a user reads: `agentsim policies`, policy parameters with units, sizes and times in
human units."""

from __future__ import annotations

import json

import pytest

from agentsim.config.units import format_bytes, format_duration, parse_by_name
from agentsim.errors import InputError
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def policies_text() -> str:
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    # 80 columns: the narrowest common terminal, where cells used to be cut with an ellipsis
    proc = subprocess.run([sys.executable, "-m", "agentsim.cli", "policies"], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "COLUMNS": "80"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_policies_lists_every_registry(policies_text):
    for title, name in [("eviction policies", "belady_oracle"), ("admission filters", "second_hit"),
                        ("routers", "kv_aware"), ("load rules", "cost_model"),
                        ("prefetch policies", "wait_complete"), ("KV admission rules", "sglang")]:
        assert title in policies_text and name in policies_text, (title, name)


def test_policies_shows_values_not_internals(policies_text):
    assert "PydanticUndefined" not in policies_text        # factory defaults shown as their value
    assert "``" not in policies_text                       # reST literals rendered as text
    assert "…" not in policies_text and "..." not in policies_text   # folded, never cut
    # a list default survives rich markup, units come from the name
    flat = "".join(policies_text.split())
    assert "pin_tools=[tool]" in flat and "ttl_s=5m" in flat and "prefill_flops_per_s=7PFLOPS" in flat


def test_policies_json_covers_every_kind():
    rows = json.loads(run_cli("policies", "--json").stdout)
    kinds = {row["kind"] for row in rows}
    assert {"eviction policy", "admission filter", "router", "load rule", "prefetch policy",
            "KV admission rule"} <= kinds
    assert all(row["description"] for row in rows), [r["name"] for r in rows if not r["description"]]


def test_policy_parameters_take_unit_strings():
    from agentsim.cache.registries import EVICTION_POLICIES

    assert EVICTION_POLICIES.validate_params("ttl_expiry", {"ttl_s": "20m"}).ttl_s == 1200.0
    assert EVICTION_POLICIES.validate_params("ttl_pin", {"tau_s": "90s"}).tau_s == 90.0
    # a rate is not a duration: "_per_" names stay plain numbers
    assert parse_by_name("mem_cost_per_block_s", "3e-5") == "3e-5"


def test_policy_parameter_units_in_a_scenario(small_scenario_yaml):
    from agentsim.engine.loading import load_scenario

    text = small_scenario_yaml.read_text().replace("eviction: lru", "eviction: {name: ttl_expiry, params: {ttl_s: 20m}}")
    small_scenario_yaml.write_text(text)
    scenario = load_scenario(small_scenario_yaml)
    from agentsim.cache.registries import EVICTION_POLICIES

    ref = scenario.cache.eviction
    assert EVICTION_POLICIES.validate_params(ref.name, ref.params).ttl_s == 1200.0
    small_scenario_yaml.write_text(text.replace("20m", "20parsecs"))
    with pytest.raises(InputError) as error:
        load_scenario(small_scenario_yaml)
    message = error.value.render()
    assert "cache.eviction.params.ttl_s" in message and "20parsecs" in message and "line 7" in message


def test_human_units():
    assert format_bytes(2.16509e11) == "216.5GB"
    assert format_duration(0.04551) == "45.51ms" and format_duration(300) == "5m"
    assert format_duration(float("inf")) == "inf"


def test_version_option():
    import agentsim

    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"agentsim {agentsim.__version__}"


def _render(tables, width: int = 80) -> str:
    from rich.console import Console

    console = Console(width=width, record=True, file=open("/dev/null", "w"))
    for table in tables:
        console.print(table)
    return console.export_text()


def test_sweep_tables_label_cells_by_values_and_never_cut():
    import pandas as pd

    from agentsim.commands.sweep import cell_headers, paired_tables, stats_tables
    from agentsim.experiments.spec import Cell

    cells = [Cell(i, (("cache.eviction.name", policy), ("hardware.kv_capacity_bytes", capacity)))
             for i, (policy, capacity) in enumerate((p, c) for p in ("lru", "fifo") for c in (40e9, 80e9))]
    metrics = ["hit_ratio", "cost_per_million_input_tokens_usd"]
    stats = pd.DataFrame([{"cell_index": c.index, "metric": m, "mean": 0.5 + c.index / 10, "ci_half_width": 0.01}
                          for c in cells for m in metrics])
    paired = pd.DataFrame([{"cell_index": c.index, "baseline_index": c.index - 2, "metric": m, "mean_diff": 0.001,
                            "ci_low": -0.002, "ci_high": 0.004, "significant": False}
                           for c in cells[2:] for m in metrics])
    headers = cell_headers(cells)
    assert headers[3] == ["fifo", "80GB"]
    text = _render(stats_tables(stats, metrics, "t", headers, 80)) + _render(paired_tables(paired, metrics, headers, 80))
    assert "#0" not in text and "#3" not in text
    assert "…" not in text
    flat = "".join(text.split())
    assert "cost_per_million_input_tokens_usd" in flat.replace("│", "").replace("┃", "")
    assert "fifo" in text and "80GB" in text and "-lru" in flat


def test_sweep_dry_run_prints_sizes_in_units():
    from tests.conftest import ROOT

    proc = run_cli("sweep", str(ROOT / "sweeps" / "load-random.yaml"), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "e+" not in proc.stdout and "GB" in proc.stdout


def _sweep_like(policies, hits):
    import pandas as pd

    rows = []
    for policy, per_capacity in zip(policies, hits):
        for capacity, hit in zip((20e9, 40e9), per_capacity):
            rows.append({"policy": policy, "kv_capacity_bytes": capacity, "hit_ratio": hit,
                         "policy_replay_hit_ratio": hit - 0.01, "belady_replay_hit_ratio": 0.97,
                         "upper_bound_replay_hit_ratio": 0.975})
    return pd.DataFrame(rows)


def _line_colors(fig):
    from matplotlib.colors import to_hex

    return {line.get_label(): to_hex(line.get_color()) for ax in fig.axes for line in ax.get_lines()
            if not line.get_label().startswith("_")}


def test_one_colour_per_policy_across_figures():
    import matplotlib

    matplotlib.use("Agg")
    from agentsim import plots

    both = plots.hit_ratio_vs_capacity(_sweep_like(["lru", "fifo"], [(0.93, 0.94), (0.92, 0.94)]), bound=None)
    alone = plots.hit_ratio_vs_capacity(_sweep_like(["fifo"], [(0.92, 0.94)]), bound=None)
    legend_colors = lambda fig: {t.get_text(): h.get_color() for ax in fig.axes if ax.get_legend()
                                 for t, h in zip(ax.get_legend().get_texts(), ax.get_legend().legend_handles)}
    from matplotlib.colors import to_hex

    assert to_hex(legend_colors(both)["fifo"]) == to_hex(legend_colors(alone)["fifo"]) == plots.policy_color("fifo")
    assert plots.policy_color("lru") != plots.policy_color("fifo")


def test_hit_ratio_axis_is_zoomed_to_the_data():
    from agentsim import plots

    fig = plots.hit_ratio_vs_capacity(_sweep_like(["lru", "fifo"], [(0.93, 0.94), (0.935, 0.94)]), bound=None)
    low, high = fig.axes[0].get_ylim()
    assert 0.85 < low < 0.93 and 0.94 < high <= 1.002      # 0.93 and 0.94 are far apart on the axis


def test_replay_references_only_in_their_own_units():
    from agentsim import plots

    table = _sweep_like(["lru"], [(0.93, 0.94)])
    timed = plots.hit_ratio_vs_capacity(table, hit="hit_ratio")        # tokens, timed: no block bound
    assert not any("Belady" in label or "bound" in label for label in _line_colors(timed))
    assert any("not comparable" in t.get_text() for t in timed.axes[0].texts)
    replay = plots.hit_ratio_vs_capacity(table, hit="policy_replay_hit_ratio")
    assert any("Belady" in label for label in _line_colors(replay))
    assert any("upper bound" in label for label in _line_colors(replay))


def test_queue_causes_are_columns_that_add_up(small_scenario_yaml):
    from agentsim.engine.loading import load_scenario
    from agentsim.engine.simulation import run_scenario

    requests = run_scenario(load_scenario(small_scenario_yaml, ["duration_s=1m"])).tables["requests"]
    done = requests[~requests.rejected]
    causes = done[["queue_slot_s", "queue_kv_s", "queue_load_s", "queue_step_s"]].sum(axis=1)
    assert len(done) > 20 and (causes - done.queue_wait_s).abs().max() < 1e-9
    assert (done.queue_chunk_s >= 0).all() and (done.queue_chunk_s <= done.prefill_s + 1e-12).all()


def _table_width_px(html_text: str, char_px: float = 7.6, cell_padding_px: float = 19.0) -> float:
    """Estimated rendered width of an HTML table at the report's .85rem font: per column, the
    longest unbreakable piece (headers wrap at spaces, cells do not wrap) plus padding."""
    import re

    head = re.findall(r"<th[^>]*>(.*?)</th>", html_text)
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", html_text)]
    rows = [r for r in rows if r]
    widths = []
    for i, header in enumerate(head):
        longest = max([len(word) for word in header.split()] + [len(r[i]) for r in rows if i < len(r)])
        widths.append(longest * char_px + cell_padding_px)
    return sum(widths)


def test_report_slowest_requests_table_fits_1280_px(small_scenario_yaml):
    from agentsim import plots
    from agentsim.engine.loading import load_scenario
    from agentsim.engine.simulation import run_scenario
    from agentsim.report_tables import slowest_requests_table

    requests = run_scenario(load_scenario(small_scenario_yaml, ["duration_s=1m"])).tables["requests"]
    slow = plots.slowest_requests(requests).head(15)
    text = slowest_requests_table(slow)
    assert text.count("<tr>") == len(slow) + 1 and "TTFT" in text
    # the page body is at most 1200 px wide (1280 px window less margins)
    assert _table_width_px(text) <= 1200, _table_width_px(text)
    assert "e-0" not in text and "ms" in text
