"""``agentsim policies``: registered eviction policies and their parameters."""

from __future__ import annotations

import json

import typer

from agentsim.commands.common import console


def register(app: typer.Typer) -> None:
    @app.command("policies")
    def policies_command(as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
        """List the registered eviction policies with their parameters and defaults."""
        from rich.table import Table

        from agentsim.cache.policies import EVICTION_POLICIES
        from agentsim.registry import describe_params

        rows = []
        for name in EVICTION_POLICIES.names():
            cls = EVICTION_POLICIES.get(name)
            doc = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
            params = describe_params(EVICTION_POLICIES.params_model(name))
            rows.append({"name": name, "description": doc,
                         "params": [{"name": p, "default": d, "description": desc} for p, d, desc in params]})
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        table = Table(title="eviction policies", header_style="bold")
        table.add_column("name")
        table.add_column("description")
        table.add_column("parameters (default)")
        for row in rows:
            table.add_row(row["name"], row["description"],
                          "\n".join(f"{p['name']}={p['default']}" for p in row["params"]) or "-")
        console.print(table)
