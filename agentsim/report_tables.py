"""The HTML tables of ``agentsim report``: the deployment, the summary with every figure in
its unit, the per-agent-class figures, the slowest requests, and a sweep's per-cell statistics.

Run and sweep reports (:mod:`agentsim.report`) share these; the run's rows are the CLI's
(:mod:`agentsim.metrics.summary_rows`), so a figure reads the same in the terminal and in the
report. Values go through :func:`agentsim.metrics.catalogue.format_value` with the catalogue
unit of their metric: ``45.5 ms``, ``2.38 s``, ``80 GB``.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np
import pandas as pd

from agentsim.metrics.catalogue import CATALOGUE, display_label, format_value, unit_of
from agentsim.metrics.deployment import deployment_lines
from agentsim.metrics.summary import CLASS_METRICS
from agentsim.metrics.summary_rows import agent_class_rows, summary_rows
from agentsim.result_files import read_json_object


def fmt_cell(value) -> str:
    """A table cell for a value of unknown unit (counts with separators, floats to 4 digits)."""
    if value is None:
        return "-"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if not math.isfinite(value):
            return "-"
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.3e}"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.4g}"
    return str(value)


def html_table(frame: pd.DataFrame, left: int = 1) -> str:
    """A plain HTML table (first ``left`` columns left-aligned); values through :func:`fmt_cell`."""
    head = "".join(f'<th class="{"l" if i < left else ""}">{html.escape(str(c))}</th>' for i, c in enumerate(frame.columns))
    body = []
    for row in frame.itertuples(index=False):
        cells = "".join(f'<td class="{"l" if i < left else ""}">{html.escape(fmt_cell(v))}</td>' for i, v in enumerate(row))
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def summary_html(summary: dict) -> str:
    """The run's summary rows (label, value in its unit) as an HTML table."""
    return html_table(pd.DataFrame(summary_rows(summary), columns=["metric", "value"]))


def deployment_html(summary: dict) -> str:
    """The run's deployment (hardware, model, engine, parallelism, precision, KV, tiers, timing),
    or ``""`` for a summary written before it was recorded."""
    rows = deployment_lines(summary.get("deployment"))
    return html_table(pd.DataFrame(rows, columns=["", "simulated"])) if rows else ""


def agent_class_html(summary: dict) -> str:
    """The per-agent-class figures of a mixed workload, one column per class; ``""`` for one class."""
    names, rows = agent_class_rows(summary)
    if not names:
        return ""
    return html_table(pd.DataFrame([[label, *texts] for label, texts in rows], columns=["metric", *names]))


#: The slowest-requests table: column -> header (words, so a header wraps) and whether it is a
#: duration. Durations print in ms or s and token counts in K, so 14 columns fit a 1280 px page.
SLOW_REQUEST_COLUMNS = {
    "request_id": ("request", False), "session_id": ("session", False), "depth": ("depth", False),
    "gap_kind": ("gap", False), "gap_before_s": ("gap before", True), "prompt_tokens": ("prompt tokens", False),
    "hit_tokens": ("hit tokens", False), "recomputed_tokens": ("recomputed tokens", False),
    "queue_wait_s": ("queue", True), "load_wait_s": ("load", True), "prefill_s": ("prefill", True),
    "ttft_s": ("TTFT", True), "e2e_s": ("E2E", True), "instance": ("instance", False),
}


def _short_tokens(value) -> str:
    if value is None or value != value:
        return "-"
    return f"{value / 1e3:.1f}K" if abs(value) >= 10_000 else f"{int(value):,}"


def slowest_requests_table(slow: pd.DataFrame) -> str:
    """The slowest requests as a compact HTML table (see :data:`SLOW_REQUEST_COLUMNS`)."""
    from agentsim.config.units import format_duration

    cols = [c for c in SLOW_REQUEST_COLUMNS if c in slow]
    shown = pd.DataFrame(index=slow.index)
    for col in cols:
        header, duration = SLOW_REQUEST_COLUMNS[col]
        if duration:
            shown[header] = [format_duration(v) if v == v else "-" for v in slow[col].astype(float)]
        elif col.endswith("_tokens"):
            shown[header] = [_short_tokens(v) for v in slow[col]]
        else:
            shown[header] = slow[col].astype(str)
    return '<div class="wide">' + html_table(shown, left=0) + "</div>"


# --- sweeps -----------------------------------------------------------------------------------------

def metric_header(key: str) -> str:
    """A column header for a metric: its catalogue label, unit in the values (seconds, bytes)
    or in the label (tokens, fractions, USD); the key itself for an uncatalogued metric."""
    metric = CATALOGUE.get(key)
    return display_label(key, metric.label) if metric is not None else key


def mean_ci_text(mean: float, half: float, unit: str) -> str:
    """``2.38 s ± 120 ms``: a mean and its 95% CI half-width, both in ``unit``."""
    if not (isinstance(mean, float) and math.isfinite(mean)):
        return "-"
    text = format_value(mean, unit)
    if isinstance(half, float) and math.isfinite(half):
        text += f" ± {format_value(half, unit)}"
    return text


def stats_frame(table: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """Per cell: seeds and ``mean ± CI`` of each metric in its unit, headed by its label."""
    from agentsim.sweep_plots import cell_means

    by = "cell" if "cell" in table else "label"
    means = cell_means(table, metrics, [by])
    out = pd.DataFrame({"cell": means[by], "seeds": means.seeds})
    for metric in metrics:
        out[metric_header(metric)] = [mean_ci_text(m, h, unit_of(metric))
                                      for m, h in zip(means[metric], means[f"{metric}_ci"])]
    return out


def sweep_class_frame(table: pd.DataFrame) -> pd.DataFrame:
    """Per cell and agent class of a mixed workload: the mean over seeds of
    :data:`~agentsim.metrics.summary.CLASS_METRICS`, in their units. Empty without classes
    (the flattened ``by_agent_class.<class>.<metric>`` columns of the runs' summaries)."""
    prefix = "by_agent_class."
    classes = list(dict.fromkeys(c[len(prefix):].rsplit(".", 1)[0] for c in table.columns if c.startswith(prefix)))
    if not classes:
        return pd.DataFrame()
    from agentsim.sweep_plots import cell_means

    by = "cell" if "cell" in table else "label"
    rows = []
    for name in classes:
        columns = {f"{prefix}{name}.{m}": m for m in CLASS_METRICS if f"{prefix}{name}.{m}" in table}
        means = cell_means(table, list(columns), [by])
        for _, row in means.iterrows():
            shown = {"cell": row[by], "agent class": name}
            for column, metric in columns.items():
                header = "requests measured (per seed)" if metric == "requests_measured" else metric_header(metric)
                shown[header] = mean_ci_text(float(row[column]), math.nan, unit_of(metric))
            rows.append(shown)
    return pd.DataFrame(rows).sort_values(["cell", "agent class"], kind="stable")


def sweep_deployment_frame(table: pd.DataFrame) -> pd.DataFrame:
    """The deployment of each cell (first seed's ``summary.json``), one column per cell; one
    column, ``every cell``, when all cells simulated the same deployment. Empty when no run
    recorded one."""
    by = "cell" if "cell" in table else "label"
    ok = table[(table.status == "ok") & table.run_dir.notna()] if "run_dir" in table else table.iloc[0:0]
    columns: dict[str, dict[str, str]] = {}
    for name, runs in ok.groupby(by, sort=False):
        path = Path(runs.run_dir.iloc[0]) / "summary.json"
        if path.exists():
            rows = deployment_lines(read_json_object(path, "summary").get("deployment"))
            if rows:
                columns[str(name)] = dict(rows)
    if not columns:
        return pd.DataFrame()
    labels = list(dict.fromkeys(label for rows in columns.values() for label in rows))
    distinct = {tuple(rows.get(label, "-") for label in labels) for rows in columns.values()}
    if len(distinct) == 1:
        columns = {"every cell": next(iter(columns.values()))}
    return pd.DataFrame({"": labels, **{name: [rows.get(label, "-") for label in labels]
                                         for name, rows in columns.items()}})
