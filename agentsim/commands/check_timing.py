"""``agentsim check-timing MEASURED.csv``: predicted vs measured TTFT/TPOT of real benchmark runs.

Every row of a file in the format of ``measured_runs.csv`` is emulated through the simulator
(:mod:`agentsim.experiments.timing_check`); the command prints each row's prediction and error
factor, then the error table per (system, backend, mode). ``--json`` prints
``{"rows": [{"id", "predicted_ttft_ms", "predicted_tpot_ms", "skipped", "pools", "draft_tokens"}], "summary": {...}}``.
``--rows-file PATH`` appends each row's result to a JSON Lines file as it finishes and resumes
from it (:mod:`agentsim.experiments.row_log`).
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from agentsim.commands.common import console, err_console


class Mode(str, Enum):
    """Rows of one serving mode only (``--mode``)."""

    agg = "agg"
    disagg = "disagg"


def _fmt(value, digits: str = ".3g") -> str:
    return "-" if value is None else format(value, digits)


def _rows_table(results):
    from rich.table import Table

    table = Table(title="predicted vs measured (ms; error = exp(|log(pred/meas)|))", header_style="bold")
    for column in ("id", "source", "TTFT pred", "TTFT meas", "TTFT err", "TPOT pred", "TPOT meas", "TPOT err"):
        table.add_column(column, justify="left" if column in ("id", "source") else "right")
    for r in results:
        if r.skipped is not None:
            table.add_row(r.id, "skipped", r.skipped, "", "", "", "", "")
            continue
        table.add_row(r.id, r.timing_source or "", _fmt(r.predicted_ttft_ms), _fmt(r.measured_ttft_ms),
                      _fmt(r.ttft_error, ".2f"), _fmt(r.predicted_tpot_ms), _fmt(r.measured_tpot_ms),
                      _fmt(r.tpot_error, ".2f"))
    return table


def _groups_table(summary: dict):
    from rich.table import Table

    table = Table(title="error factor per (system, backend, mode)", header_style="bold")
    disaggregated = bool(summary["disaggregated"]["rows"])
    columns = ["system", "backend", "mode", "rows", "emulated", "TTFT median", "TTFT p90", "TPOT median", "TPOT p90"]
    if disaggregated:
        # Rows whose measurement computed prompts faster than the emulated prefill pool can
        # (agentsim.experiments.prefill_capacity): their prefill step times are too slow.
        columns.append("prefill > capacity")
    for column in columns:
        table.add_column(column, justify="left" if column in ("system", "backend", "mode") else "right")
    totals = [{"system": "all aggregated", "backend": "", "mode": "agg", **summary["aggregated"]}]
    if disaggregated:
        totals.append({"system": "all disaggregated", "backend": "", "mode": "disagg", **summary["disaggregated"]})
    for g in summary["groups"] + totals:
        cells = [g["system"], g["backend"], g["mode"], str(g["rows"]), str(g["emulated"]),
                 _fmt(g["ttft_error_median"], ".2f"), _fmt(g["ttft_error_p90"], ".2f"),
                 _fmt(g["tpot_error_median"], ".2f"), _fmt(g["tpot_error_p90"], ".2f")]
        if disaggregated:
            over = g["prefill_over_capacity"]
            cells.append("" if over is None else str(over))
        table.add_row(*cells)
    return table


def _pools_table(by_pools: dict):
    from rich.table import Table

    table = Table(title="disaggregated rows by where their pools come from", header_style="bold")
    for column in ("pools", "rows", "emulated", "TTFT median", "TTFT p90", "TPOT median", "TPOT p90"):
        table.add_column(column, justify="left" if column == "pools" else "right")
    for name, g in by_pools.items():
        table.add_row(name, str(g["rows"]), str(g["emulated"]), _fmt(g["ttft_error_median"], ".2f"),
                      _fmt(g["ttft_error_p90"], ".2f"), _fmt(g["tpot_error_median"], ".2f"),
                      _fmt(g["tpot_error_p90"], ".2f"))
    return table


def register(app: typer.Typer) -> None:
    @app.command("check-timing")
    def check_timing_command(
        measured: Path = typer.Argument(..., help="measured benchmark runs (CSV in the format of measured_runs.csv)"),
        as_json: bool = typer.Option(False, "--json", help="print JSON: per-row predictions and the summary"),
        sample: Optional[int] = typer.Option(None, "--sample", min=1,
                                             help="emulate a stratified sample of N rows (deterministic)"),
        set_: Optional[list[str]] = typer.Option(None, "--set", help="override a field of every row's scenario: PATH=VALUE"),
        mode: Optional[Mode] = typer.Option(None, "--mode", help="only the rows of this mode (before --sample)"),
        max_clients: Optional[int] = typer.Option(None, "--max-clients", min=1,
                                                  help="skip rows of more clients (their runs take minutes each)"),
        rows_file: Optional[Path] = typer.Option(None, "--rows-file",
                                                 help="append each row's result to this JSON Lines file as it "
                                                      "finishes; rows already in it are not run again (resume)"),
        client_lengths: bool = typer.Option(True, "--client-lengths/--fixed-lengths",
                                            help="draw each request's lengths as the row's benchmark client did (the "
                                                 "default), or give every request exactly isl/osl tokens, the clients "
                                                 "in lock-step (aggregated rows; docs/validation.md)"),
    ) -> None:
        """Emulate measured serving benchmarks and compare predicted with measured TTFT/TPOT."""
        from agentsim.experiments.benchmark_rows import read_rows
        from agentsim.experiments.timing_check import check_rows, stratified_sample, summarize
        from agentsim.experiments.twin_rows import with_twin_pools

        # A disaggregated row without its pools takes them from its twin (the same run in the
        # file's other export), before --mode and --sample pick rows.
        frame = with_twin_pools(read_rows(measured))
        if mode is not None:
            frame = frame[frame["mode"].astype(str).str.strip() == mode.value]
        if sample is not None:
            frame = stratified_sample(frame, sample)
        overrides = list(set_ or [])
        done, on_new_row, log = None, None, None
        if rows_file is not None:
            from agentsim.errors import InputError
            from agentsim.experiments.row_log import log_line, read_log, settings_of

            settings = settings_of(overrides, client_lengths, max_clients)
            done = read_log(rows_file, settings)
            try:
                log = rows_file.open("a", encoding="utf-8")
            except OSError as exc:
                raise InputError(f"cannot be written ({exc.strerror})", str(rows_file)) from None

            def on_new_row(result) -> None:
                log.write(log_line(result, settings))
                log.flush()
        rows = dict(done=done, on_new_row=on_new_row, client_lengths=client_lengths, max_clients=max_clients)
        try:
            if sys.stderr.isatty():
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

                with Progress(TextColumn("[bold]emulating rows"), BarColumn(), MofNCompleteColumn(),
                              TimeElapsedColumn(), console=err_console, transient=True) as progress:
                    task = progress.add_task("rows", total=len(frame))
                    results = check_rows(frame, overrides, on_row=lambda _: progress.advance(task), **rows)
            else:
                from agentsim.commands.common import plain_count_progress

                results = check_rows(frame, overrides, on_row=plain_count_progress("emulated rows", len(frame)),
                                     **rows)
        finally:   # the rows finished so far stay on disk whatever stops the run
            if log is not None:
                log.close()
        summary = summarize(results)
        if as_json:
            sys.stdout.write(json.dumps({"rows": [r.as_json() for r in results], "summary": summary}, indent=1) + "\n")
            return
        # Row ids are long: give the tables room when the output is not a terminal.
        out = console
        if not console.is_terminal:
            from rich.console import Console

            out = Console(width=220)
        out.print(_rows_table(results))
        out.print(_groups_table(summary))
        if summary["disaggregated_by_pools"]:
            out.print(_pools_table(summary["disaggregated_by_pools"]))
        if summary["skipped_reasons"]:
            out.print("skipped: " + "; ".join(f"{n} x {why}" for why, n in summary["skipped_reasons"].items()),
                          markup=False, highlight=False)
