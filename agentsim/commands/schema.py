"""``agentsim schema``: the scenario JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command("schema")
    def schema_command(out: Path = typer.Option(None, "--out", "-o", help="write to a file instead of stdout")) -> None:
        """Print (or write) the JSON Schema of scenario files."""
        from agentsim.config.scenario import Scenario
        from agentsim.errors import InputError

        text = json.dumps(Scenario.model_json_schema(), indent=2) + "\n"
        if out:
            if out.is_dir():
                raise InputError("is a directory; --out names the schema file to write", str(out))
            try:
                out.write_text(text)
            except OSError as exc:
                raise InputError(f"cannot write the schema ({exc.strerror or exc})", str(out)) from None
        else:
            typer.echo(text, nl=False)
