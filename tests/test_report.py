"""`agentsim report` on real run and sweep directories: HTML with every figure embedded, PNGs, tables."""

from __future__ import annotations

import base64
import re

import matplotlib

matplotlib.use("Agg")

import pytest

from agentsim.errors import InputError
from agentsim.experiments.executors import LocalExecutor
from agentsim.experiments.spec import load_sweep
from agentsim.experiments.sweep import run_sweep
from agentsim.report import axis_numbers, build_report
from tests.conftest import run_cli

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _embedded_pngs(html: str) -> list[bytes]:
    return [base64.b64decode(data) for data in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)]


def test_run_report_from_the_command_line(small_scenario_yaml, tmp_path):
    run_dir = tmp_path / "run"
    proc = run_cli("run", str(small_scenario_yaml), "--out", str(run_dir), "--quiet")
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("report", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    html = (run_dir / "report.html").read_text()
    pngs = _embedded_pngs(html)
    files = sorted((run_dir / "figures").glob("*.png"))
    names = {p.stem for p in files}
    assert {"latency_cdf", "ttft_breakdown", "recompute_by_gap", "tier_occupancy"} <= names
    # Every PNG written is embedded byte for byte (the HTML is self-contained).
    assert sorted(pngs) == sorted(p.read_bytes() for p in files)
    assert all(png.startswith(PNG_MAGIC) for png in pngs)
    # HBM-only run: no links, said in the report and on the console.
    assert "no links" in html and "not drawn" in proc.stdout
    assert "<td class=\"l\">TTFT p99.9</td>" in html and "Slowest requests by TTFT" in html


def test_sweep_report_has_capacity_curve_cost_and_stats(small_scenario_yaml, tmp_path):
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(f"""
name: tiny
base: {small_scenario_yaml}
set: {{duration_s: 2m}}
seeds: 1
axes:
  grid:
    cache.eviction.name: [lru, fifo]
    hardware.kv_capacity_bytes: [3GB, 12GB]
""")
    out = tmp_path / "sweep"
    run_sweep(load_sweep(sweep_file), out, LocalExecutor(workers=1))
    report = build_report(out, tmp_path / "rep")
    assert report.kind == "sweep"
    names = {f.name for f in report.figures}
    assert {"latency_cdf", "hit_ratio_vs_capacity", "cost_vs_sla", "metrics_vs_hardware_kv_capacity_bytes",
            "recompute_by_gap"} <= names
    html = report.html_path.read_text()
    assert len(_embedded_pngs(html)) == len(report.figures)
    assert "mean ± 95% CI" in html and "lru, 3GB" in html   # stats table with compact cell names


def test_axis_values_with_units_become_numbers():
    import pandas as pd

    assert axis_numbers(pd.Series(["10GB", "5m", 3, "x"])).tolist()[:3] == [1e10, 300.0, 3.0]
    assert pd.isna(axis_numbers(pd.Series(["x"]))[0])


def test_not_a_result_directory_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="not a run, sweep or plan"):
        build_report(tmp_path)
    proc = run_cli("report", str(tmp_path / "missing"))
    assert proc.returncode == 2 and "no such directory" in proc.stderr and "Traceback" not in proc.stderr
