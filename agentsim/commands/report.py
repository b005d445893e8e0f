"""``agentsim report DIR``: figures and a self-contained HTML report for a run, sweep or plan."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report_command(
        directory: Path = typer.Argument(..., help="a run directory (agentsim run --out), a sweep or a plan directory"),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="where report.html and figures/ go (default: DIR)"),
        dpi: int = typer.Option(110, "--dpi", min=40, max=400, help="resolution of the PNG figures"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="print only the report's path"),
    ) -> None:
        """Write DIR/report.html (figures embedded as PNG) and DIR/figures/*.png with the summary tables."""
        import matplotlib

        matplotlib.use("Agg")  # files only: never open a window, work without a display
        from agentsim.commands.common import console
        from agentsim.report import build_report

        report = build_report(directory, out, dpi=dpi)
        if quiet:
            console.print(str(report.html_path), highlight=False)
            return
        console.print(f"{report.kind} report: {report.html_path}", highlight=False)
        for entry in report.figures:
            console.print(f"  {entry.png_path}", highlight=False)
        for note in report.skipped:
            console.print(f"  [yellow]not drawn[/yellow] {note}", highlight=False)
