"""``agentsim report DIR``: figures and a self-contained HTML report for a run or a sweep.

:func:`build_report` looks at ``DIR``:

* a **run** directory (``summary.json``; written by ``agentsim run`` or one seed of a sweep):
  the deployment, the summary table in units and, for a mixed workload, each agent class's
  figures (tables in :mod:`agentsim.report_tables`); latency CDFs (also per agent class), the TTFT breakdown of the slowest requests, recomputation by gap, tier
  occupancy, evictions by reason over time and link utilisation, plus the summary table and
  the slowest requests;
* a **sweep** directory (``sweep.json`` / ``results.parquet``) or a **plan** directory
  (``plan.json``; runs under ``cells/``): each cell's deployment, the cells' latency CDFs, hit ratio against capacity
  per policy with the upper bound, cost against SLA attainment, metrics against each numeric
  axis, recomputation by gap per cell, plus the per-cell statistics (mean ± 95% CI, in units),
  the per-agent-class figures per cell and paired differences.

It writes ``OUT/report.html`` (every figure embedded as a base64 PNG, so the file can be mailed
or opened anywhere) and ``OUT/figures/<name>.png``. A figure whose data are absent (an HBM-only
run has no links; a sweep without a capacity axis has no capacity curve) is not drawn; the report
lists why under "Figures not drawn" (:class:`agentsim.plots.PlotSkipped`).
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from agentsim.yaml_text import safe_load
from agentsim.errors import InputError
from agentsim.metrics.catalogue import KEY_METRICS, format_value
from agentsim.input_files import read_input_text, resolved_path
from agentsim.result_files import read_json_object, read_table
from agentsim.results import read_summary
from agentsim.report_tables import (agent_class_html, deployment_html, html_table, slowest_requests_table,
                                    stats_frame, summary_html, sweep_class_frame, sweep_deployment_frame)

#: Requests of at most this many cells are overlaid in a sweep's latency CDF (legibility).
MAX_CDF_CELLS = 8



@dataclass
class FigureEntry:
    name: str            # file stem
    title: str
    caption: str
    png_path: Path


@dataclass
class Report:
    """What :func:`build_report` made: ``kind`` is ``run``, ``sweep`` or ``plan``."""

    kind: str
    html_path: Path
    figures: list[FigureEntry] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


# --- loading ----------------------------------------------------------------------------------------

def detect_kind(directory: Path) -> str:
    if (directory / "summary.json").exists():
        return "run"
    if (directory / "sweep.json").exists() or (directory / "results.parquet").exists():
        return "sweep"
    if (directory / "plan.json").exists() or (directory / "frontier.parquet").exists():
        return "plan"
    if (directory / "cells").is_dir():
        return "sweep"
    raise InputError("not a run, sweep or plan directory (no summary.json, sweep.json, results.parquet or plan.json)",
                     str(directory))


def warmup_of(run_dir: Path) -> float:
    """``run.warmup_s`` of a run's resolved scenario (0 if unknown)."""
    path = run_dir / "scenario.resolved.yaml"
    if not path.exists():
        return 0.0
    import yaml

    try:
        data = safe_load(read_input_text(path, "resolved scenario")) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputError(f"resolved scenario is not valid YAML ({getattr(exc, 'problem', None) or exc.__class__.__name__})",
                         str(path), f"line {mark.line + 1}" if mark is not None else None) from None
    if not isinstance(data, dict) or not isinstance(data.get("run") or {}, dict):
        raise InputError("resolved scenario must be a mapping of sections (a run: mapping)", str(path))
    value = (data.get("run") or {}).get("warmup_s", 0.0)
    return float(value) if isinstance(value, (int, float)) else 0.0


def _flatten(summary: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in summary.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = math.nan if value is None else value
    return out


def runs_table(directory: str | Path) -> pd.DataFrame:
    """One row per run under ``directory/cells/<cell>/seed-<S>/`` (sweeps and plans): cell_id,
    label, the cell's assignments as columns, seed, status, run_dir and every summary key.

    A sweep's ``results.parquet`` has the same rows for its own cells; this also covers plans
    and sweeps interrupted before the table was written."""
    directory = Path(directory)
    rows = []
    for cell_dir in sorted((directory / "cells").glob("*")):
        if not cell_dir.is_dir():
            continue
        info = read_json_object(cell_dir / "cell.json", "cell.json") if (cell_dir / "cell.json").exists() else {}
        for run_dir in sorted(cell_dir.glob("seed-*"), key=lambda p: int(p.name.split("-", 1)[1]) if p.name.split("-", 1)[1].isdigit() else 0):
            row = {"cell_id": cell_dir.name, "label": info.get("label", cell_dir.name)}
            for path, value in info.get("assignments", []):
                row[path] = value if not isinstance(value, (dict, list)) else json.dumps(value, sort_keys=True)
            row["seed"] = int(run_dir.name.split("-", 1)[1]) if run_dir.name.split("-", 1)[1].isdigit() else run_dir.name
            row["run_dir"] = str(run_dir)
            if (run_dir / "summary.json").exists():
                row["status"] = "ok"
                for key, value in _flatten(read_summary(run_dir / "summary.json")).items():
                    row.setdefault(key, value)
            else:
                row["status"] = "error" if (run_dir / "error.json").exists() else "missing"
            rows.append(row)
    return pd.DataFrame(rows)


def sweep_table(directory: str | Path) -> tuple[pd.DataFrame, list[str]]:
    """(table, axis columns) of a sweep or plan directory; the table has ``run_dir`` per row."""
    directory = Path(directory)
    manifest = read_json_object(directory / "sweep.json", "sweep.json") if (directory / "sweep.json").exists() else None
    table = runs_table(directory)
    axes: list[str] = []
    if manifest:
        axes = list(dict.fromkeys(p for c in manifest.get("cells", []) for p, _v in c.get("assignments", [])))
        if (directory / "results.parquet").exists():
            results = read_table(directory / "results.parquet")
            # The combined table is authoritative for the sweep's own cells and order; keep run_dir.
            dirs = table[["cell_id", "seed", "run_dir"]] if len(table) else pd.DataFrame(columns=["cell_id", "seed", "run_dir"])
            table = results.merge(dirs, on=["cell_id", "seed"], how="left")
    elif len(table):
        axes = [c for c in table.columns if "." in c and c.split(".")[0] in
                ("hardware", "cache", "serving", "workload", "model", "slo", "run") and table[c].nunique() > 1]
    if len(table) == 0:
        raise InputError("no runs found under cells/", str(directory))
    table["cell"] = short_labels(table, axes)
    return table, axes


def short_labels(table: pd.DataFrame, axes: list[str]) -> pd.Series:
    """Compact cell names for legends: the values of the axes that vary, joined (``lru, 10GB``)."""
    varying = [a for a in axes if a in table and table[a].astype(str).nunique() > 1]
    if not varying:
        return table["label"].astype(str)
    return table[varying].astype(str).agg(", ".join, axis=1)


def load_requests(table: pd.DataFrame, cells: int | None = MAX_CDF_CELLS, first_seed_only: bool = True) -> pd.DataFrame:
    """Requests of the runs in ``table`` (ok runs with a ``run_dir``), with ``label``, ``seed``
    and ``policy`` columns added; at most ``cells`` cells (in table order), first seed only by
    default (one seed already has every request of the cell's workload)."""
    ok = table[(table.status == "ok") & table.run_dir.notna()] if "run_dir" in table else table.iloc[0:0]
    frames = []
    labels = list(dict.fromkeys(ok.label))[: cells if cells else None]
    for label in labels:
        runs = ok[ok.label == label]
        if first_seed_only:
            runs = runs.head(1)
        for row in runs.itertuples():
            path = Path(row.run_dir) / "requests.parquet"
            if path.exists():
                frame = read_table(path)
                frame["label"] = label
                frame["cell"] = getattr(row, "cell", label)
                frame["seed"] = row.seed
                frame["policy"] = getattr(row, "policy", None)
                frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


# --- HTML -------------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2rem auto;max-width:1200px;color:#222;padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem} h2{font-size:1.25rem;margin-top:2.2rem;border-bottom:1px solid #ddd}
.meta{color:#666;font-size:.9rem} figure{margin:1.2rem 0} figure img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.9rem;color:#444;margin-top:.3rem} table{border-collapse:collapse;font-size:.85rem;margin:.6rem 0}
th,td{border:1px solid #ddd;padding:.25rem .55rem;text-align:right} th{background:#f4f4f4} td.l,th.l{text-align:left}
.note{color:#7a5a00;background:#fff8e1;padding:.4rem .7rem;border-left:3px solid #e0b000;font-size:.9rem}
details{margin:.8rem 0} summary{cursor:pointer;color:#225}
td{white-space:nowrap} .wide{overflow-x:auto}
"""


class _Builder:
    def __init__(self, out_dir: Path, dpi: int):
        self.out_dir = out_dir
        self.fig_dir = out_dir / "figures"  # created with the first figure, after the inputs are read
        self.dpi = dpi
        self.figures: list[FigureEntry] = []
        self.skipped: list[str] = []
        self.sections: list[str] = []

    def figure(self, name: str, title: str, caption: str, make: Callable) -> None:
        from agentsim import plots

        try:
            fig = make()
        except plots.PlotSkipped as exc:
            self.skipped.append(str(exc))
            return
        self.fig_dir.mkdir(parents=True, exist_ok=True)
        path = self.fig_dir / f"{name}.png"
        plots.save_png(fig, path, dpi=self.dpi)
        entry = FigureEntry(name, title, caption, path)
        self.figures.append(entry)
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        self.sections.append(f'<h2>{html.escape(title)}</h2><figure><img alt="{html.escape(title)}" '
                             f'src="data:image/png;base64,{data}"><figcaption>{html.escape(caption)}</figcaption></figure>')

    def raw(self, text: str) -> None:
        self.sections.append(text)

    def write(self, kind: str, heading: str, meta: str) -> Report:
        skipped = ""
        if self.skipped:
            items = "".join(f"<li>{html.escape(s)}</li>" for s in self.skipped)
            skipped = f'<h2>Figures not drawn</h2><div class="note"><ul>{items}</ul></div>'
        stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
        page = (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(heading)}</title>"
                f"<style>{_CSS}</style></head><body><h1>{html.escape(heading)}</h1>"
                f"<p class=\"meta\">{meta} &middot; report made {stamp} by agentsim report</p>"
                + "".join(self.sections) + skipped + "</body></html>\n")
        path = self.out_dir / "report.html"
        tmp = path.with_name("report.html.tmp")
        tmp.write_text(page, encoding="utf-8")
        tmp.replace(path)
        return Report(kind=kind, html_path=path, figures=self.figures, skipped=self.skipped)


# --- run report -------------------------------------------------------------------------------------

def _run_report(run_dir: Path, b: _Builder) -> Report:
    from agentsim import plots
    from agentsim.results import load_run

    summary, tables = load_run(run_dir)
    warmup = warmup_of(run_dir)
    requests = tables.get("requests", pd.DataFrame())
    if len(requests):
        requests = requests.assign(policy=summary.get("policy", "?"))
    deployment = deployment_html(summary)
    if deployment:
        b.raw("<h2>Deployment</h2>" + deployment)
    b.raw("<h2>Summary</h2>" + summary_html(summary))
    by_class = agent_class_html(summary)
    if by_class:
        b.raw("<h2>By agent class</h2>" + by_class)
    b.figure("latency_cdf", "Latency distribution",
             "Empirical CDFs of TTFT and end-to-end latency (log x; logit y so the tail is readable). "
             "Dot: p99, cross: p99.9; their values are in the legend. Measured requests (after warm-up, not rejected).",
             lambda: plots.latency_cdf(requests, hue="policy", warmup_s=warmup))
    if by_class:
        b.figure("latency_cdf_by_agent_class", "Latency distribution by agent class",
                 "Empirical CDFs of TTFT and end-to-end latency of each agent class of the mixed workload "
                 "(same axes and markers as above; the per-class figures are in the table 'By agent class').",
                 lambda: plots.latency_cdf(requests, hue="agent_class", warmup_s=warmup))
    b.figure("ttft_breakdown", "Why the slowest requests were slow",
             "TTFT = queue wait + load from a lower tier + prefill, for the requests at or above p99.9 (at least 20). "
             "Labels: request id, the gap before it (first/tool/human/join, 'sub' for sub-agents), prompt size, "
             "share recomputed and share loaded from lower tiers. Right: mean composition per latency band.",
             lambda: plots.ttft_breakdown(requests, warmup_s=warmup))
    b.figure("recompute_by_gap", "Where recomputation comes from",
             "Recomputed prompt tokens and the hit ratio by the gap before the request (same buckets as "
             "recomputed_tokens_by_gap in summary.json).", lambda: plots.recompute_by_gap(requests, warmup_s=warmup))
    b.figure("tier_occupancy", "Cache occupancy per tier",
             "Used / capacity per tier summed over instances, the HBM share pinned by requests in flight, and the "
             "running and waiting requests.", lambda: plots.tier_occupancy(tables.get("occupancy")))
    if "evictions" in tables:
        b.figure("evictions", "Evictions by reason over time",
                 "Blocks evicted per second, stacked by reason, per tier (totals in the legend).",
                 lambda: plots.evictions_over_time(tables.get("evictions")))
    else:
        b.figure("evictions", "Evictions by reason",
                 "Totals from summary.json (this run has no eviction time series).",
                 lambda: plots.evictions_by_reason_bars(summary))
    b.figure("link_utilisation", "Link utilisation",
             "Busy fraction of each link kind over time (mean over links, shaded to the busiest) and throughput.",
             lambda: plots.link_utilisation(tables.get("link_samples"), tables.get("links")))
    if len(requests):
        slow = plots.slowest_requests(requests, warmup_s=warmup).head(15)
        b.raw("<h2>Slowest requests by TTFT</h2>" + slowest_requests_table(slow))
    if "links" in tables and len(tables["links"]):
        b.raw("<h2>Links (whole run)</h2>" + html_table(tables["links"]))
    b.raw("<details><summary>summary.json</summary><pre>" + html.escape(json.dumps(summary, indent=1)) + "</pre></details>")
    meta = html.escape(f"run {run_dir} · scenario {summary.get('scenario')} · policy {summary.get('policy')} · "
                       f"seed {summary.get('seed')} · {summary.get('requests', 0):,} requests over "
                       f"{format_value(summary.get('simulated_s'), 's')} simulated")
    return b.write("run", f"agentsim run report: {summary.get('scenario', run_dir.name)}", meta)


# --- sweep / plan report ----------------------------------------------------------------------------

def axis_numbers(values: pd.Series) -> pd.Series:
    """Axis values as numbers in SI units (``10GB`` -> 1e10, ``5m`` -> 300); NaN if not numeric."""
    from agentsim.config.units import UnitError, parse_bandwidth, parse_bytes, parse_duration

    def one(value):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            for parser in (float, parse_bytes, parse_duration, parse_bandwidth):
                try:
                    return float(parser(value))
                except (ValueError, UnitError):
                    continue
        return math.nan

    return values.map(one).astype(float)


def _numeric_axis(table: pd.DataFrame, axis: str) -> bool:
    values = axis_numbers(table[axis])
    return bool(values.notna().all() and values.nunique() > 1)


def _sweep_report(directory: Path, b: _Builder, kind: str) -> Report:
    from agentsim import plots

    table, axes = sweep_table(directory)
    ok = table[table.status == "ok"]
    metrics = [m for m in KEY_METRICS if m in ok and pd.to_numeric(ok[m], errors="coerce").notna().any()]
    name = directory.name
    if (directory / "sweep.json").exists():
        name = read_json_object(directory / "sweep.json", "sweep.json").get("name", name)
    deployment = sweep_deployment_frame(table)
    if len(deployment):
        b.raw("<h2>Deployment</h2>" + html_table(deployment))
    b.raw("<h2>Cells: mean ± 95% CI over seeds</h2>" + html_table(stats_frame(table, metrics), left=1))
    by_class = sweep_class_frame(ok)
    if len(by_class):
        b.raw("<h2>By agent class: mean over seeds</h2>" + html_table(by_class, left=2))
    if (directory / "paired.parquet").exists():
        paired = read_table(directory / "paired.parquet")
        if len(paired) and "metric" in paired:
            shown = paired[paired.metric.isin(metrics)]
            if len(shown):
                b.raw("<details><summary>Paired differences against the baseline cell (same seeds)</summary>"
                      + html_table(shown, left=2) + "</details>")
    if (directory / "plan.json").exists():
        plan = read_json_object(directory / "plan.json", "plan.json")
        message = plan.get("message") if isinstance(plan, dict) else None
        if message:
            b.raw(f"<h2>Plan</h2><p>{html.escape(str(message))}</p>")
    failed = table[table.status != "ok"]
    if len(failed):
        cols = [c for c in ("label", "seed", "status", "error") if c in failed]
        b.raw("<h2>Runs that failed or are missing</h2>" + html_table(failed[cols]))
    requests = load_requests(table)
    n_cells = table.label.nunique()
    more = f" (first {MAX_CDF_CELLS} of {n_cells} cells)" if n_cells > MAX_CDF_CELLS else ""
    b.figure("latency_cdf", "Latency distribution per cell",
             f"TTFT and end-to-end CDFs of each cell's first seed{more}; dot p99, cross p99.9.",
             lambda: plots.latency_cdf(requests, hue="cell") if len(requests) else _skip("latency CDF: no request tables found"))
    policies = ok.policy.nunique() if "policy" in ok else 0
    capacities = ok.kv_capacity_bytes.nunique() if "kv_capacity_bytes" in ok else 0
    if capacities > 1 or policies > 1:
        replay = "policy_replay_hit_ratio" in ok and pd.to_numeric(ok.policy_replay_hit_ratio, errors="coerce").notna().any()
        if replay:
            b.figure("hit_ratio_vs_capacity_replay", "Hit ratio against capacity, with the upper bound",
                     "Cache-only replay of each run's own request stream (blocks) with the run's policy; dashed, the "
                     "hit ratio no policy can exceed on the same stream (a proven bound), whose gap to a policy is "
                     "its headroom; dotted, the offline Belady heuristic, which is not a bound.",
                     lambda: plots.hit_ratio_vs_capacity(ok, hit="policy_replay_hit_ratio"))
        b.figure("hit_ratio_vs_capacity", "Hit ratio against capacity (timed runs)",
                 "Token hit ratio of the timed runs (mean and 95% CI over seeds) per policy. The replay's block "
                 "bounds are not comparable with it and are left out.",
                 lambda: plots.hit_ratio_vs_capacity(ok, hit="hit_ratio"))
    else:
        b.skipped.append("hit ratio vs capacity: the sweep varies neither the policy nor the HBM capacity")
    hue_axis = next((a for a in axes if a in ok and not _numeric_axis(ok, a)), None)
    target = None
    b.figure("cost_vs_sla", "Cost against SLA attainment",
             "One point per cell (mean over seeds, 95% CI bars). Bottom right: cheap and meeting the SLA.",
             lambda: plots.cost_vs_sla(ok.assign(label=ok.cell), hue=hue_axis, target=target))
    for axis in axes:
        if axis in ok and _numeric_axis(ok, axis):
            other = next((a for a in axes if a != axis and a in ok and not _numeric_axis(ok, a)), None)
            scale, xlabel = _axis_scale(axis)
            shown = [m for m in ("ttft_p99_s", "sla_attainment", "cost_per_million_tokens_usd", "hit_ratio") if m in metrics]
            safe = axis.replace(".", "_")
            b.figure(f"metrics_vs_{safe}", f"Metrics against {axis}",
                     "Mean over seeds with 95% CI" + (f", one line per {other}" if other else "") + ".",
                     lambda axis=axis, other=other, scale=scale, xlabel=xlabel, shown=shown:
                     plots.metric_vs_axis(ok.assign(**{axis: axis_numbers(ok[axis])}), axis, shown, hue=other,
                                          x_scale=scale, x_label=xlabel))
    b.figure("recompute_by_gap", "Where recomputation comes from, per cell",
             "Recomputed prompt tokens and hit ratio by the gap before the request, first seed of each cell.",
             lambda: plots.recompute_by_gap(requests, hue="cell") if len(requests) else _skip("recompute by gap: no request tables found"))
    meta = html.escape(f"{kind} {directory} · {n_cells} cells · {len(table)} runs ({len(ok)} ok)")
    return b.write(kind, f"agentsim {kind} report: {name}", meta)


def _axis_scale(axis: str) -> tuple[float, str]:
    if axis.endswith("bytes"):
        return 1e9, f"{axis} (GB)"
    if axis.endswith("_s"):
        return 1.0, f"{axis} (s)"
    return 1.0, axis


def _skip(reason: str):
    from agentsim.plots import PlotSkipped

    raise PlotSkipped(reason)


def build_report(directory: str | Path, out_dir: str | Path | None = None, dpi: int = 110) -> Report:
    """Write ``report.html`` and ``figures/*.png`` for the run, sweep or plan in ``directory``
    (into ``out_dir``, default ``directory`` itself). Raises InputError if ``directory`` is none
    of these."""
    directory = Path(directory)
    resolved_path(directory, "run directory")  # a symlink loop or a name too long: one error
    if not directory.is_dir():
        raise InputError("no such directory", str(directory))
    kind = detect_kind(directory)
    out = Path(out_dir) if out_dir is not None else directory
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create output directory ({exc.strerror})", str(out)) from None
    builder = _Builder(out, dpi)
    if kind == "run":
        return _run_report(directory, builder)
    return _sweep_report(directory, builder, kind)
