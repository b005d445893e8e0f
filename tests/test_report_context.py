"""The report states what was simulated and reads in units: the deployment header (run and
sweep), the per-agent-class figures of a mixed workload, and every summary figure in its unit."""

from __future__ import annotations

import html as html_lib
import re

import matplotlib

matplotlib.use("Agg")

import pytest

from agentsim.experiments.executors import LocalExecutor
from agentsim.experiments.spec import load_sweep
from agentsim.experiments.sweep import run_sweep
from agentsim.metrics.catalogue import CATALOGUE
from agentsim.metrics.deployment import deployment_lines
from agentsim.metrics.summary_rows import summary_rows
from agentsim.report import build_report
from tests.conftest import run_cli
from tests.test_metrics_explain import MIXED

#: A value carries its unit when it ends in one of these (format_value of seconds and bytes).
TIME_UNITS = re.compile(r"^-?[\d.,]+ (ms|s|min|h)$")
BYTE_UNITS = re.compile(r"^-?[\d.,]+ (GB|TB)$")


def _section(page: str, heading: str) -> str:
    """The first table after ``<h2>heading</h2>``."""
    start = page.index(f"<h2>{heading}</h2>")
    end = page.index("</table>", start)
    assert page.find("<h2>", start + 1) in (-1,) or page.find("<h2>", start + 1) > end, f"{heading}: no table"
    return page[start:end]


def _rows(table_html: str) -> list[list[str]]:
    rows = [[html_lib.unescape(re.sub("<[^>]+>", "", cell)) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", table_html)]
    return [row for row in rows if row]     # the header row has no <td>


def _header(table_html: str) -> list[str]:
    return [html_lib.unescape(h) for h in re.findall(r"<th(?: [^>]*)?>(.*?)</th>", table_html)]


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mixed-report")
    scenario = tmp / "mixed.yaml"
    scenario.write_text(MIXED)
    run_dir = tmp / "run"
    proc = run_cli("run", str(scenario), "--out", str(run_dir), "--quiet", "--set", "duration_s=2m")
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("report", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    return scenario, run_dir, (run_dir / "report.html").read_text()


def test_run_report_states_the_deployment(mixed_run):
    _scenario, _run_dir, page = mixed_run
    rows = dict(_rows(_section(page, "Deployment")))
    assert rows["hardware"] == "gb300_nvl72 (gb300), 4 GPUs"
    assert rows["engine"].startswith("vllm tp4") and "admission vllm" in rows["engine"]
    assert rows["precision"] == "the model's published formats"
    assert rows["KV capacity"] == "3 GB HBM"
    # Which step timing the instance used, and why when it is the roofline fallback.
    assert rows["step timing"].split(":")[0].split(" (")[0] in ("measured", "roofline")
    if rows["step timing"].startswith("roofline"):
        assert "measured timing unavailable" in rows["step timing"]


def test_run_report_has_per_agent_class_figures(mixed_run):
    _scenario, run_dir, page = mixed_run
    import json
    summary = json.loads((run_dir / "summary.json").read_text())
    table = _section(page, "By agent class")
    assert _header(table) == ["metric", "chat", "coding"]
    rows = {row[0]: row[1:] for row in _rows(table)}
    assert [int(v) for v in rows["requests (measured)"]] == [summary["by_agent_class"][c]["requests_measured"]
                                                             for c in ("chat", "coding")]
    assert all(TIME_UNITS.match(v) for v in rows["TTFT p99"] + rows["E2E p99"]), rows
    # The figure of each class's latency distribution is drawn.
    assert (run_dir / "figures" / "latency_cdf_by_agent_class.png").exists()
    assert "<h2>Latency distribution by agent class</h2>" in page


def test_every_summary_figure_has_its_unit(mixed_run):
    _scenario, _run_dir, page = mixed_run
    rows = _rows(_section(page, "Summary"))
    labels = {label for label, _ in rows}
    by_label = dict(rows)
    seconds = [m for m in CATALOGUE.values() if m.unit == "s" and m.label.endswith(" (s)")]
    checked = 0
    for metric in seconds:
        label = metric.label[: -len(" (s)")]
        if label in labels:
            assert TIME_UNITS.match(by_label[label]), (label, by_label[label])
            checked += 1
    assert checked >= 10
    # No label repeats "(s)" beside a value in ms.
    assert not any(label.endswith("(s)") for label in labels)
    # The breakdowns name the unit of their entries.
    assert "evictions by reason (blocks)" in labels and "recomputed tokens by gap (tokens)" in labels


def test_summary_rows_format_each_unit():
    summary = {"ttft_p50_s": 0.04551, "simulated_s": 600.0, "requests": 1234, "hit_ratio": 0.878,
               "kv_transfer_bytes": 2.5e11, "recomputed_tokens_by_gap": {"first_call": 12000},
               "wall_s": 1.5}
    rows = dict(summary_rows(summary))
    assert rows["TTFT p50"] == "45.5 ms" and rows["simulated"] == "10 min"
    assert rows["requests"] == "1,234" and rows["hit ratio (tokens)"] == "0.878"
    assert rows["KV handed over (bytes)"] == "250 GB"
    assert rows["recomputed tokens by gap (tokens)"] == "first_call=12,000"
    assert "wall" not in rows and dict(summary_rows(summary, hidden=()))["wall"] == "1.5 s"


def test_disaggregated_deployment_names_each_pools_timing():
    lines = dict(deployment_lines({
        "hardware": "gb300_nvl72", "instances": 7, "gpus_per_instance": 8, "engine": "sglang", "parallelism": "tp8",
        "kv_admission": "sglang", "kv_capacity_bytes_per_instance": 1e11, "tiers": [],
        "timing_source": "measured", "timing_deployment": "decode dep",
        "timing_by_pool": {"prefill": {"source": "roofline", "deployment": "p"},
                           "decode": {"source": "measured", "deployment": "decode dep"}}}))
    assert lines["step timing"] == "prefill workers roofline; decode workers measured (decode dep)"
    assert lines["hardware"] == "gb300_nvl72, 7 x 8 GPUs" and lines["KV capacity"] == "100 GB HBM per instance"


def test_sweep_report_states_deployment_classes_and_units(mixed_run, tmp_path):
    scenario, _run_dir, _page = mixed_run
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(f"""
name: mixed-capacity
base: {scenario}
set: {{duration_s: 1m}}
seeds: 2
axes:
  grid:
    hardware.kv_capacity_bytes: [2GB, 6GB]
""")
    out = tmp_path / "sweep"
    run_sweep(load_sweep(sweep_file), out, LocalExecutor(workers=1))
    page = build_report(out, tmp_path / "rep").html_path.read_text()
    # Deployment: one column per cell, since the cells differ in KV capacity.
    deployment = _section(page, "Deployment")
    assert _header(deployment) == ["", "2GB", "6GB"]
    rows = {row[0]: row[1:] for row in _rows(deployment)}
    assert rows["KV capacity"] == ["2 GB HBM", "6 GB HBM"]
    assert rows["hardware"] == ["gb300_nvl72 (gb300), 4 GPUs"] * 2
    assert "step timing" in rows and "precision" in rows
    # Per-cell statistics in units, headed by the metrics' labels.
    stats = _section(page, "Cells: mean ± 95% CI over seeds")
    header = _header(stats)
    assert "TTFT p99" in header and "ttft_p99_s" not in header
    column = header.index("TTFT p99")
    for row in _rows(stats):
        mean, _, half = row[column].partition(" ± ")
        assert TIME_UNITS.match(mean) and TIME_UNITS.match(half), row[column]
    # Per-agent-class figures per cell.
    classes = _section(page, "By agent class: mean over seeds")
    header = _header(classes)
    assert header[:2] == ["cell", "agent class"] and "TTFT p99" in header
    body = _rows(classes)
    assert sorted((r[0], r[1]) for r in body) == [("2GB", "chat"), ("2GB", "coding"), ("6GB", "chat"), ("6GB", "coding")]
    assert all(TIME_UNITS.match(r[header.index("TTFT p99")]) for r in body)


def test_sweep_deployment_collapses_when_cells_share_it(small_scenario_yaml, tmp_path):
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(f"""
name: policies
base: {small_scenario_yaml}
set: {{duration_s: 1m}}
seeds: 1
axes:
  grid:
    cache.eviction.name: [lru, fifo]
""")
    out = tmp_path / "sweep"
    run_sweep(load_sweep(sweep_file), out, LocalExecutor(workers=1))
    page = build_report(out, tmp_path / "rep").html_path.read_text()
    deployment = _section(page, "Deployment")
    assert _header(deployment) == ["", "every cell"]
    assert dict(_rows(deployment))["KV capacity"] == "6 GB HBM"
    assert "By agent class" not in page     # one class: nothing to split


def test_cli_sweep_tables_print_times_in_their_units():
    import pandas as pd
    from rich.console import Console

    from agentsim.commands.sweep import paired_tables, stats_tables

    stats = pd.DataFrame([{"cell_index": i, "metric": m, "mean": v, "ci_half_width": h}
                          for i in (0, 1) for m, v, h in (("ttft_p99_s", 0.04551 * (i + 1), 0.0021),
                                                           ("hit_ratio", 0.878, 0.01))])
    paired = pd.DataFrame([{"cell_index": 1, "baseline_index": 0, "metric": "ttft_p99_s", "mean_diff": 0.04551,
                            "ci_low": -0.002, "ci_high": 0.09, "significant": False}])
    console = Console(width=120, record=True, file=open("/dev/null", "w"))
    for table in [*stats_tables(stats, ["ttft_p99_s", "hit_ratio"], "t", width=120),
                  *paired_tables(paired, ["ttft_p99_s"], width=120)]:
        console.print(table)
    text = console.export_text()
    assert "45.5 ms ± 2.1 ms" in text and "91 ms ± 2.1 ms" in text and "0.878 ± 0.01" in text
    assert "+45.5 ms [-2 ms, +90 ms]" in text
