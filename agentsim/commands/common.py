"""Helpers shared by CLI commands: summary tables and progress display."""

from __future__ import annotations

import sys
from contextlib import contextmanager

from rich.console import Console
from rich.table import Table

from agentsim.metrics.catalogue import format_value
from agentsim.metrics.deployment import deployment_lines
from agentsim.metrics.summary_rows import agent_class_rows, summary_rows

console = Console()
err_console = Console(stderr=True)


def summary_table(summary: dict, title: str = "summary") -> Table:
    """The run summary: the deployment, then every figure in its unit
    (:func:`agentsim.metrics.summary_rows.summary_rows`) and the link totals."""
    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    deployment = deployment_lines(summary.get("deployment"))
    for label, text in deployment:
        table.add_row(label, text)
    if deployment:
        table.add_section()
    for label, text in summary_rows(summary, hidden=()):
        table.add_row(f"[bold yellow]{label}[/]" if label in ("TTL warning", "KV warning") else label, text)
    if isinstance(summary.get("link_kinds"), dict):
        for kind, stats in summary["link_kinds"].items():
            table.add_row(f"link {kind}", f"{format_value(stats['bytes'], 'bytes')}, "
                                          f"max utilisation {stats['max_utilisation']:.3g}")
    return table


def agent_class_table(summary: dict) -> Table | None:
    """The figures of each agent class of a mixed workload (``summary["by_agent_class"]``), one
    column per class and one row per metric (catalogue labels and units), or None for one class."""
    names, rows = agent_class_rows(summary)
    if not names:
        return None
    table = Table(title="by agent class", show_header=True, header_style="bold")
    table.add_column("metric")
    for name in names:
        table.add_column(name, justify="right")
    for label, texts in rows:
        table.add_row(label, *texts)
    return table


#: Wall seconds between two progress lines when stderr is not a terminal (a log file, a batch
#: job, a Dask worker's output): a long run says how far it is without flooding the log.
PLAIN_PROGRESS_EVERY_S = 30.0


def _clock(seconds: float) -> str:
    """``seconds`` as ``1h02m03s`` / ``2m03s`` / ``3s`` (simulated or wall time)."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _plain_lines():
    """``(write, elapsed)``: ``write(text)`` prints ``text`` to stderr unless one was printed, or
    the clock started, less than :data:`PLAIN_PROGRESS_EVERY_S` wall seconds ago; ``elapsed()``
    is the wall time since the start, as text."""
    import time

    started = time.monotonic()
    last = [started]

    def write(text: str) -> None:
        now = time.monotonic()
        if now - last[0] < PLAIN_PROGRESS_EVERY_S:
            return
        last[0] = now
        print(text, file=sys.stderr, flush=True)

    def elapsed() -> str:
        return _clock(time.monotonic() - started)

    return write, elapsed


def _plain_progress(description: str):
    """A callback(now_s, total_s) that writes one line to stderr at most every
    :data:`PLAIN_PROGRESS_EVERY_S` wall seconds (none for a run shorter than that)."""
    write, elapsed = _plain_lines()

    def update(now_s: float, total_s: float) -> None:
        share = now_s / total_s if total_s > 0 else 1.0
        write(f"{description}: {_clock(now_s)} of {_clock(total_s)} simulated ({share:.0%}), {elapsed()} elapsed")

    return update


def plain_count_progress(description: str, total: int):
    """A callback(_) counting finished items that writes ``description: N of TOTAL, ... elapsed``
    to stderr at most every :data:`PLAIN_PROGRESS_EVERY_S` wall seconds (stderr not a terminal:
    ``check-timing`` over a whole measured file runs for hours)."""
    write, elapsed = _plain_lines()
    done = [0]

    def advance(_item=None) -> None:
        done[0] += 1
        write(f"{description}: {done[0]} of {total}, {elapsed()} elapsed")

    return advance


@contextmanager
def simulated_time_progress(enabled: bool, description: str = "simulating"):
    """Yields a callback(now_s, total_s) that drives a rich progress bar on a terminal, writes a
    plain line every :data:`PLAIN_PROGRESS_EVERY_S` wall seconds to any other stderr, or is None
    when not ``enabled``."""
    if not enabled:
        yield None
        return
    if not sys.stderr.isatty():
        yield _plain_progress(description)
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                  TextColumn("{task.completed:,.0f}/{task.total:,.0f} simulated s"), TimeElapsedColumn(),
                  console=err_console, transient=True) as progress:
        task = progress.add_task(description, total=1.0)

        def update(now_s: float, total_s: float) -> None:
            progress.update(task, completed=now_s, total=total_s)

        yield update
