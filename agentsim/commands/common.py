"""Helpers shared by CLI commands: summary tables and progress display."""

from __future__ import annotations

import sys
from contextlib import contextmanager

from rich.console import Console
from rich.table import Table

from agentsim.metrics.catalogue import display_label, format_value, table_rows, unit_of
from agentsim.metrics.deployment import deployment_lines

console = Console()
err_console = Console(stderr=True)


def _fmt(value) -> str:
    if isinstance(value, float):
        if value != value:
            return "-"
        if abs(value) >= 1000 or value == int(value):
            return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:g}"
        return f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def summary_table(summary: dict, title: str = "summary") -> Table:
    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    deployment = deployment_lines(summary.get("deployment"))
    for label, text in deployment:
        table.add_row(label, text)
    if deployment:
        table.add_section()
    for key, label in table_rows("summary") + table_rows("hierarchy"):
        if key in summary and summary[key] is not None:
            table.add_row(display_label(key, label), format_value(summary[key], unit_of(key)))
    if isinstance(summary.get("hit_ratio_by_tier"), dict):
        table.add_row("hit ratio by tier", ", ".join(f"{k}={_fmt(v)}" for k, v in summary["hit_ratio_by_tier"].items()))
    if isinstance(summary.get("link_kinds"), dict):
        for kind, stats in summary["link_kinds"].items():
            table.add_row(f"link {kind}", f"{stats['bytes'] / 1e9:,.1f} GB, max utilisation {stats['max_utilisation']:.3g}")
    by_reason = "evictions_by_reason_blocks" if "evictions_by_reason_blocks" in summary else "evicted_blocks_by_reason"
    for key in ("regime_by_tier", by_reason, "recomputed_tokens_by_gap", "recomputed_tokens_evicted_by_tier",
                "queue_wait_share_by_cause", "kv_transfer_bytes_by_link_kind"):
        if isinstance(summary.get(key), dict) and summary[key]:
            table.add_row(key.replace("_", " "), ", ".join(f"{k}={_fmt(v)}" for k, v in summary[key].items()))
    if summary.get("ttl_warning"):
        table.add_row("[bold yellow]TTL warning[/]", summary["ttl_warning"])
    return table


def agent_class_table(summary: dict) -> Table | None:
    """The figures of each agent class of a mixed workload (``summary["by_agent_class"]``), one
    column per class and one row per metric (catalogue labels), or None for one class."""
    by_class = summary.get("by_agent_class")
    if not isinstance(by_class, dict) or not by_class:
        return None
    table = Table(title="by agent class", show_header=True, header_style="bold")
    table.add_column("metric")
    for name in by_class:
        table.add_column(name, justify="right")
    labels = dict(table_rows("summary"))
    labels["requests_measured"] = "requests (measured)"
    for key in next(iter(by_class.values())):
        table.add_row(display_label(key, labels.get(key, key.replace("_", " "))),
                      *(format_value(figures.get(key), unit_of(key)) for figures in by_class.values()))
    return table


@contextmanager
def simulated_time_progress(enabled: bool, description: str = "simulating"):
    """Yields a callback(now_s, total_s) that drives a rich progress bar (or does nothing)."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                  TextColumn("{task.completed:,.0f}/{task.total:,.0f} simulated s"), TimeElapsedColumn(),
                  console=err_console, transient=True) as progress:
        task = progress.add_task(description, total=1.0)

        def update(now_s: float, total_s: float) -> None:
            progress.update(task, completed=now_s, total=total_s)

        yield update
