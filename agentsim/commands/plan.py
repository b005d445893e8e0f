"""``agentsim plan SCENARIO --slo ... --vary PATH=LOW..HIGH``: smallest configuration meeting SLOs."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Optional

import typer

from agentsim.commands.common import console, err_console


def frontier_table(report):
    from rich.table import Table

    table = Table(title=f"frontier: {report.axis.path} ({len(report.seeds)} seeds per point, criterion: {report.criterion})",
                  header_style="bold")
    table.add_column("value", justify="right")
    for slo in report.slos:
        table.add_column(f"{slo.metric}\nmean ± 95% CI\n(seeds {slo.op} {slo.threshold:g})", justify="right")
    table.add_column("pass")
    table.add_column("$/h", justify="right")
    table.add_column("$/M tokens", justify="right")
    table.add_column("GPU-h", justify="right")
    for row in report.frontier.to_dict(orient="records"):
        cells = [row["value_label"]]
        for slo in report.slos:
            mean, half = row[f"{slo.metric}_mean"], row[f"{slo.metric}_ci_half_width"]
            text = "-" if mean != mean else f"{mean:.4g}" + (f" ± {half:.2g}" if half == half else "")
            cells.append(f"{text} ({row[f'{slo}_passes']}/{len(report.seeds)})")
        cells.append("[green]yes[/green]" if row["passed"] else "[red]no[/red]")
        per_hour = row.get("cost_usd_per_hour", math.nan)
        cost = row.get("total_cost_per_million_tokens_usd", row["cost_per_million_tokens_usd"])
        cells += ["-" if per_hour != per_hour else f"{per_hour:,.4g}", "-" if cost != cost else f"{cost:.4g}",
                  f"{row['gpu_hours']:.3g}"]
        table.add_row(*cells)
    return table


def register(app: typer.Typer) -> None:
    @app.command("plan")
    def plan_command(
        scenario_file: Path = typer.Argument(..., help="scenario YAML file"),
        slo: list[str] = typer.Option(..., "--slo", help="a target on a summary metric, e.g. 'ttft_p99_s<=2' (repeatable)"),
        vary: str = typer.Option(..., "--vary", help="the monotone axis: PATH=LOW..HIGH, e.g. hardware.kv_capacity_bytes=20GB..200GB"),
        seeds: int = typer.Option(3, "--seeds", min=1, help="seeds per point (from the scenario's seed)"),
        resolution: Optional[str] = typer.Option(None, "--resolution", help="grid step of the search, e.g. 4GB (default: 1 for integers, range/32)"),
        criterion: str = typer.Option("all", "--criterion", help="a point passes if every seed meets each SLO ('all') or the mean does ('mean')"),
        set_: Optional[list[str]] = typer.Option(None, "--set", help="override a field: PATH=VALUE (repeatable)"),
        out: Path = typer.Option(None, "--out", "-o", help="directory for runs and the frontier (default runs/plans/<scenario name>); reused on rerun"),
        workers: Optional[int] = typer.Option(None, "--workers", "-w", min=1, help="local worker processes (default: all cores)"),
        dask: Optional[str] = typer.Option(None, "--dask", help="run on Dask: 'local' or tcp://HOST:PORT"),
    ) -> None:
        """Find the smallest value of one axis that meets every SLO (bisection with seeds) and print the frontier."""
        from agentsim.config.loader import read_yaml
        from agentsim.errors import InputError
        from agentsim.experiments.executors import make_executor
        from agentsim.experiments.plan import Planner, check_plan_options, check_slo_metrics, parse_slo, parse_vary
        from agentsim.experiments.store import SweepStore
        from agentsim.experiments.sweep import ScenarioBuilder

        # Every option is checked before anything is written under --out or any run starts.
        check_plan_options(criterion, seeds)
        slos = [parse_slo(text) for text in slo]
        data, lines = read_yaml(scenario_file)
        if not isinstance(data, dict):
            raise InputError("a scenario must be a mapping of sections", str(scenario_file), "line 1")
        builder = ScenarioBuilder(data, str(scenario_file), lines, scenario_file.parent, fixed_texts=list(set_ or []))
        base = builder.resolved([])
        axis = parse_vary(vary, builder, resolution)
        check_slo_metrics(builder, slos)  # before anything is written or run
        seed_list = [base.seed + i for i in range(seeds)]
        out_dir = out or Path("runs") / "plans" / base.name
        executor = make_executor(workers or (min(seeds, os.cpu_count() or 1) if not dask else None), dask)
        store = SweepStore(out_dir)

        def on_point(point):
            status = "[green]pass[/green]" if point.passed else "[red]fail[/red]"
            err_console.print(f"  {axis.path} = {axis.label(point.value)}: {status}  "
                              + "  ".join(f"{k} {v}/{len(seed_list)}" for k, v in point.slo_passes.items()))

        from agentsim.commands.sweep import sigterm_as_interrupt

        err_console.print(f"planning {axis.path} in [{axis.label(axis.low)}, {axis.label(axis.high)}] "
                          f"with {len(seed_list)} seeds per point on {executor.description}")
        try:
            with sigterm_as_interrupt():
                report = Planner(builder, axis, slos, seed_list, executor, store, criterion, on_point=on_point).run()
        finally:
            executor.close()
        console.print(frontier_table(report))
        for warning in report.warnings:
            err_console.print(f"[yellow]warning[/yellow]: {warning}")
        console.print(report.message)
        console.print(f"{report.runs_made} runs made, {report.runs_reused} reused; results in {out_dir}/")
        frontier_path = out_dir / "frontier.parquet"
        report.frontier.to_parquet(frontier_path, index=False)
        (out_dir / "plan.json").write_text(json.dumps({
            "axis": report.axis.path, "low": report.axis.low, "high": report.axis.high, "step": report.axis.step,
            "slos": [str(s) for s in report.slos], "seeds": report.seeds, "criterion": report.criterion,
            "direction": report.direction, "answer": report.answer,
            "answer_label": report.axis.label(report.answer) if report.answer is not None else None,
            "message": report.message, "warnings": report.warnings,
            "frontier": json.loads(report.frontier.to_json(orient="records")),
        }, indent=2, default=lambda v: None if isinstance(v, float) and math.isnan(v) else str(v)) + "\n")
        if report.answer is None:
            raise typer.Exit(1)
