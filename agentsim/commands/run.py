"""``agentsim run SCENARIO.yaml``: simulate one scenario and write its results."""

from __future__ import annotations

import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer

from agentsim.commands.common import agent_class_table, console, simulated_time_progress, summary_table

#: Exit codes of a run stopped by a signal (128 + signal number, as shells report them).
SIGNAL_EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


@contextmanager
def stop_on_signals(stop):
    """While active, SIGINT and SIGTERM ask the simulation to stop (``stop.set(reason)``) instead
    of killing it, so the requests finished so far can be written. A second signal of either
    kind falls back to the usual behaviour (KeyboardInterrupt / termination). Yields a list that
    receives the numbers of the signals caught."""
    caught: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in SIGNAL_EXIT_CODES}

    def handler(signum, frame):
        caught.append(signum)
        stop.set(f"interrupted by {signal.Signals(signum).name}")
        for sig in SIGNAL_EXIT_CODES:  # a second signal stops for real
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)

    for sig in SIGNAL_EXIT_CODES:
        signal.signal(sig, handler)
    try:
        yield caught
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_command(
        scenario_file: Path = typer.Argument(..., help="scenario YAML file"),
        out: Path = typer.Option(None, "--out", "-o", help="output directory (default runs/<scenario name>)"),
        set_: Optional[list[str]] = typer.Option(None, "--set", help="override a field: PATH=VALUE (repeatable)"),
        seed: Optional[int] = typer.Option(None, "--seed", min=0, help="override the scenario's seed"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar and no summary table"),
        force: bool = typer.Option(False, "--force", help="replace the results already in --out (the whole directory)"),
        check_invariants: bool = typer.Option(False, "--check-invariants", help="verify cache invariants after every event (slow)"),
    ) -> None:
        """Simulate a scenario; write summary.json, requests.parquet and scenario.resolved.yaml."""
        from agentsim.engine.loading import load_scenario
        from agentsim.engine.run_warnings import result_warnings, scenario_warnings
        from agentsim.engine.simulation import StopRequest, run_scenario
        from agentsim.errors import InputError
        from agentsim.results import write_run_files
        from agentsim.run_directory import StagedDirectory

        overrides = list(set_ or [])
        if check_invariants:
            overrides.append("run.check_invariants=true")
        scenario = load_scenario(scenario_file, overrides, seed)
        out_dir = out or Path("runs") / scenario.name
        warned = scenario_warnings(scenario)
        stop = StopRequest()
        # --out is checked, locked and staged before the simulation: a read-only or busy
        # directory is found at once, and the results replace it whole (run_directory).
        with StagedDirectory(out_dir, force) as target:
            for note in warned:   # after --out is accepted: a refused run prints only its error
                sys.stderr.write(f"warning: {note}\n")
            with stop_on_signals(stop) as caught:
                if not quiet:
                    sys.stderr.write(f"simulating {scenario.name}: {scenario.duration_s:g} simulated s "
                                     "(Ctrl-C stops and keeps the requests finished so far)\n")
                    sys.stderr.flush()
                with simulated_time_progress(not quiet) as progress:
                    result = run_scenario(scenario, progress=progress, stop=stop)
            try:
                write_run_files(result, target.staging)
            except OSError as exc:  # disk full, quota: the staging directory goes, --out stays as it was
                raise InputError(f"cannot write results ({exc.strerror or exc}); the previous contents are unchanged",
                                 str(out_dir)) from None
            target.commit()
        ttl_warned = any("TTL" in note for note in warned)  # said before the run: not again
        for note in result_warnings(result.summary):
            if note in warned or (ttl_warned and note == result.summary.get("ttl_warning")):
                continue
            sys.stderr.write(f"warning: {note}\n")
        if not quiet:
            console.print(summary_table(result.summary, title=f"{scenario.name} (seed {scenario.seed})"))
            by_class = agent_class_table(result.summary)
            if by_class is not None:
                console.print(by_class)
            console.print(f"results written to {out_dir}/")
        if result.summary.get("complete") is False:
            summary = result.summary
            reason = summary.get("incomplete_reason") or stop.reason
            written = (f"at t={summary.get('simulated_s', 0.0):.1f} simulated s: {summary.get('requests', 0)} "
                       f"finished requests written to {out_dir}/ (summary.json: complete false)")
            if not caught:
                # The simulation stopped itself (its key allocator ran out): too big a run for
                # one process, so a bad input, said after the partial results are safe.
                sys.stderr.write(f"error: {scenario_file}: {reason}; {written}\n")
                raise typer.Exit(2)
            sys.stderr.write(f"{reason} {written}\n")
            raise typer.Exit(SIGNAL_EXIT_CODES[signal.Signals(caught[0])])
