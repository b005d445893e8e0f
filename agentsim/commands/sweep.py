"""``agentsim sweep SWEEP.yaml``: run a sweep (cells x seeds) in parallel, resumably."""

from __future__ import annotations

import math
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer

from agentsim.commands.common import console, err_console
from agentsim.metrics.catalogue import unit_of


@contextmanager
def sigterm_as_interrupt():
    """SIGTERM behaves like Ctrl-C, so executors stop their workers before the process exits."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def cell_progress(enabled: bool, description: str = "sweep"):
    """Yields on_progress(runs_done, runs_total, cells_done, cells_total) driving a rich bar over cells."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                  TextColumn("{task.fields[cells]}/{task.fields[cells_total]} cells, {task.completed:.0f}/{task.total:.0f} runs"),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=err_console, transient=True,
                  auto_refresh=False) as progress:  # no refresh thread: lets the pool fork (see executors)
        task = progress.add_task(description, total=None, cells=0, cells_total=0)

        def update(runs_done: int, runs_total: int, cells_done: int, cells_total: int) -> None:
            progress.update(task, completed=runs_done, total=runs_total, cells=cells_done, cells_total=cells_total)
            progress.refresh()

        yield update


def fmt_ci(mean: float, half: float, unit: str = "") -> str:
    """``2.38 s ± 120 ms``: a mean and its 95% CI half-width in the metric's unit (seconds in
    ms/s/min, bytes in GB; plain numbers otherwise)."""
    from agentsim.metrics.catalogue import format_value

    if mean != mean:
        return "-"
    if unit in ("s", "bytes"):
        text = format_value(float(mean), unit)
        return text + (f" ± {format_value(float(half), unit)}" if half == half and not math.isinf(half) else "")
    text = f"{mean:.4g}"
    if half == half and not math.isinf(half):
        text += f" ± {half:.2g}"
    return text


def fmt_diff(value: float, unit: str = "") -> str:
    """A signed difference in the metric's unit (``+45.5 ms``, ``-0.012``)."""
    from agentsim.metrics.catalogue import format_value

    if unit in ("s", "bytes"):
        return ("-" if value < 0 else "+") + format_value(abs(float(value)), unit)
    return f"{value:+.3g}"


#: Width of one cell's column (a "mean ± CI" or "+diff [low, high]*" entry) and of the metric column.
CELL_COLUMN_CHARS = 24
METRIC_COLUMN_CHARS = 30


def cells_per_table(width: int) -> int:
    """How many cell columns fit beside the metric column in ``width`` characters."""
    return max(1, (width - METRIC_COLUMN_CHARS) // CELL_COLUMN_CHARS)


def cell_legend(cells) -> str:
    return "\n".join(f"  #{cell.index}: {cell.label}" for cell in cells)


def cell_headers(cells) -> dict[int, list[str]]:
    """Per cell index, the values of the axes that vary between cells, in axis order
    (``["lru", "40GB"]``): a column headed by them says what it is without a legend."""
    from agentsim.experiments.spec import format_value

    paths = [path for path, _ in cells[0].assignments] if cells else []
    varying = [path for path in paths if len({format_value(cell.as_dict().get(path), path) for cell in cells}) > 1]
    headers = {}
    for cell in cells:
        values = cell.as_dict()
        shown = [format_value(values[path], path) for path in varying if path in values]
        headers[cell.index] = shown or [cell.label]
    return headers


def _header(values: list[str] | None, index: int) -> str:
    return "\n".join(values) if values else f"#{index}"


def _pair_header(cell: list[str] | None, base: list[str] | None, index: int, base_index: int) -> str:
    """``fifo / 40GB / - lru``: the cell's values, then the baseline's values that differ."""
    if not cell or not base:
        return f"#{index} - #{base_index}"
    differ = [b for c, b in zip(cell, base) if c != b] or base
    return "\n".join(cell) + "\n- " + ", ".join(differ)


def _table(title):
    from rich.table import Table

    table = Table(title=title, header_style="bold")
    # fold, never cut: metric names and values are read in full at any terminal width
    table.add_column("metric", overflow="fold", min_width=12)
    return table


def stats_tables(stats, metrics: list[str], title: str, headers: dict[int, list[str]] | None = None,
                 width: int = 80, regimes: dict[int, str] | None = None):
    """Rows = metrics, columns = cells (headed by their axis values), mean ± 95% CI half-width
    (times and sizes in their units: :func:`fmt_ci`);
    as many cells per table as fit in ``width``. ``regimes`` (cell index -> eviction regime over
    its seeds) adds a first row saying whether the cell evicted at all: a difference of 0
    between cells that never evict is no finding."""
    headers = headers or {}
    shown = [m for m in metrics if m in set(stats.metric)]
    indices = sorted(set(stats.cell_index))
    by_cell = {index: group.set_index("metric") for index, group in stats.groupby("cell_index")}
    per_table = cells_per_table(width)
    for start in range(0, len(indices), per_table):
        chunk = indices[start:start + per_table]
        table = _table(title if start == 0 else None)
        for index in chunk:
            table.add_column(_header(headers.get(index), index), justify="right", overflow="fold")
        if regimes:
            table.add_row("regime", *(regimes.get(index, "-") for index in chunk))
        for metric in shown:
            row = []
            for index in chunk:
                frame = by_cell[index]
                row.append(fmt_ci(frame.loc[metric, "mean"], frame.loc[metric, "ci_half_width"], unit_of(metric))
                           if metric in frame.index else "-")
            table.add_row(metric, *row)
        yield table


def paired_tables(paired, metrics: list[str], headers: dict[int, list[str]] | None = None, width: int = 80):
    """Rows = metrics, columns = 'cell - baseline' (headed by their axis values), mean difference
    [95% CI] (* = CI excludes 0)."""
    headers = headers or {}
    shown = [m for m in metrics if m in set(paired.metric)]
    pairs = sorted(set(zip(paired.cell_index, paired.baseline_index)))
    by_pair = {key: group.set_index("metric") for key, group in paired.groupby(["cell_index", "baseline_index"])}
    per_table = cells_per_table(width)
    for start in range(0, len(pairs), per_table):
        chunk = pairs[start:start + per_table]
        table = _table("paired differences, cell - baseline on the same seeds: mean [95% CI], * = CI excludes 0"
                       if start == 0 else None)
        for cell, base in chunk:
            table.add_column(_pair_header(headers.get(cell), headers.get(base), cell, base),
                             justify="right", overflow="fold")
        for metric in shown:
            row = []
            for key in chunk:
                frame = by_pair[key]
                if metric not in frame.index or frame.loc[metric, "mean_diff"] != frame.loc[metric, "mean_diff"]:
                    row.append("-")
                    continue
                r = frame.loc[metric]
                unit = unit_of(metric)
                text = fmt_diff(r.mean_diff, unit)
                if r.ci_low == r.ci_low:
                    low, high = ((fmt_diff(r.ci_low, unit), fmt_diff(r.ci_high, unit)) if unit in ("s", "bytes")
                                 else (f"{r.ci_low:+.2g}", f"{r.ci_high:+.2g}"))
                    text += f" [{low}, {high}]" + ("*" if r.significant else "")
                row.append(text)
            table.add_row(metric, *row)
        yield table


def register(app: typer.Typer) -> None:
    @app.command("sweep")
    def sweep_command(
        sweep_file: Path = typer.Argument(..., help="sweep YAML file (base scenario, axes, seeds)"),
        out: Path = typer.Option(None, "--out", "-o", help="output directory (default runs/sweeps/<sweep name>); rerun to resume"),
        workers: Optional[int] = typer.Option(None, "--workers", "-w", min=1, help="local worker processes (default: all cores)"),
        dask: Optional[str] = typer.Option(None, "--dask", help="run on Dask: 'local' starts a LocalCluster, or a scheduler address tcp://HOST:PORT"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar and no tables"),
        dry_run: bool = typer.Option(False, "--dry-run", help="list the cells and exit"),
    ) -> None:
        """Run every cell of a sweep with every seed; persist each run at once; print statistics.

        Rerunning with the same --out skips finished runs (failed runs are retried).
        """
        from agentsim.experiments.executors import check_dask_address, make_executor
        from agentsim.experiments.metric_names import check_sweep_metrics
        from agentsim.experiments.spec import check_baseline, expand_cells, load_sweep
        from agentsim.experiments.stats import cell_regimes
        from agentsim.experiments.sweep import ScenarioBuilder, no_valid_cell, plan_runs, run_sweep

        sweep = load_sweep(sweep_file)
        if dask is not None:
            check_dask_address(dask)
        if dry_run:
            # Each cell is validated as a run would (cheap beside a run): a dry run that lists
            # cells every run of which would fail is no check of the sweep file.
            builder = ScenarioBuilder.for_sweep(sweep)
            cells = expand_cells(sweep, builder.to_number)
            check_baseline(sweep, cells)
            planned, _ = plan_runs(builder, cells, sweep.seeds()[:1])
            errors = {run.cell_index: run.error for run in planned if run.task is None}
            if cells and len(errors) == len(cells):
                raise no_valid_cell(sweep, errors[cells[0].index])
            check_sweep_metrics(sweep, builder, cells, {c.index for c in cells if c.index not in errors})
            for cell in cells:
                console.print(f"{cell.index:4d}  {cell.label}", overflow="fold", soft_wrap=False)
                if cell.index in errors:
                    err_console.print(f"      [red]invalid[/red]: {errors[cell.index].removeprefix('InputError: ')}",
                                      overflow="fold", soft_wrap=False)
            console.print(f"{len(cells)} cells x {len(sweep.seeds())} seeds {sweep.seeds()}"
                          + (f"; {len(errors)} invalid (their runs would fail)" if errors else ""))
            return
        out_dir = out or Path("runs") / "sweeps" / sweep.spec.name
        executor = make_executor(workers, dask)
        try:
            with sigterm_as_interrupt():
                with cell_progress(not quiet, sweep.spec.name) as progress:
                    report = run_sweep(sweep, out_dir, executor, on_progress=progress)
        finally:
            executor.close()
        counts = report.counts
        console.print(f"{len(report.cells)} cells x {len(report.seeds)} seeds on {report.executor}: "
                      f"{counts.ran} run, {counts.skipped} already done, {counts.failed} failed")
        for label, seed, error in report.failures[:10]:
            err_console.print(f"[red]failed[/red] {label} seed {seed}: {error}")
        for metric, close in report.unknown_metrics.items():
            hint = f" (did you mean {close!r}?)" if close else ""
            err_console.print(f"[yellow]warning[/yellow]: {sweep.source}: {sweep.location('metrics')}: metric {metric!r} "
                              f"is not a numeric summary key of any run{hint}; every metric is in results.parquet")
        if not quiet:
            console.print("cells:\n" + cell_legend(report.cells))
            headers = cell_headers(report.cells)
            title = f"{sweep.spec.name}: mean ± 95% CI over {len(report.seeds)} seeds"
            for table in stats_tables(report.stats, report.metrics, title, headers, console.width,
                                      regimes=cell_regimes(report.table)):
                console.print(table)
            if len(report.paired):
                for table in paired_tables(report.paired, report.metrics, headers, console.width):
                    console.print(table)
        console.print(f"results written to {report.out_dir}/ (results.parquet, stats.parquet, paired.parquet, cells/)")
        if counts.failed:
            raise typer.Exit(1)
