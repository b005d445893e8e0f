"""``agentsim run SCENARIO.yaml``: simulate one scenario and write its results."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from agentsim.commands.common import console, simulated_time_progress, summary_table


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_command(
        scenario_file: Path = typer.Argument(..., help="scenario YAML file"),
        out: Path = typer.Option(None, "--out", "-o", help="output directory (default runs/<scenario name>)"),
        set_: Optional[list[str]] = typer.Option(None, "--set", help="override a field: PATH=VALUE (repeatable)"),
        seed: Optional[int] = typer.Option(None, "--seed", help="override the scenario's seed"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar and no summary table"),
        force: bool = typer.Option(False, "--force", help="overwrite results already in --out"),
        check_invariants: bool = typer.Option(False, "--check-invariants", help="verify cache invariants after every event (slow)"),
    ) -> None:
        """Simulate a scenario; write summary.json, requests.parquet and scenario.resolved.yaml."""
        from agentsim.config.loader import load_scenario
        from agentsim.engine.simulation import run_scenario
        from agentsim.results import prepare_out_dir, write_run

        overrides = list(set_ or [])
        if check_invariants:
            overrides.append("run.check_invariants=true")
        scenario = load_scenario(scenario_file, overrides, seed)
        out_dir = out or Path("runs") / scenario.name
        prepare_out_dir(out_dir, force)
        with simulated_time_progress(not quiet) as progress:
            result = run_scenario(scenario, progress=progress)
        write_run(result, out_dir)
        if not quiet:
            console.print(summary_table(result.summary, title=f"{scenario.name} (seed {scenario.seed})"))
            console.print(f"results written to {out_dir}/")
