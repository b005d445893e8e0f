"""``agentsim policies``: registered eviction policies, routers and prefill-ahead mechanisms, with their parameters."""

from __future__ import annotations

import json

import typer

from agentsim.commands.common import console


def register(app: typer.Typer) -> None:
    @app.command("policies")
    def policies_command(as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
        """List the registered eviction policies and routers with their parameters and defaults."""
        from rich.table import Table

        from agentsim.cache.policies import EVICTION_POLICIES
        from agentsim.cluster.routers import ROUTERS
        from agentsim.engine.prefill_ahead import PREFILL_AHEAD
        from agentsim.registry import describe_params

        rows = []
        for registry in (EVICTION_POLICIES, ROUTERS, PREFILL_AHEAD):
            for name in registry.names():
                cls = registry.get(name)
                doc = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
                params = describe_params(registry.params_model(name))
                rows.append({"kind": registry.kind, "name": name, "description": doc,
                             "params": [{"name": p, "default": d, "description": desc} for p, d, desc in params]})
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        for kind, title in ((EVICTION_POLICIES.kind, "eviction policies"), (ROUTERS.kind, "routers"),
                            (PREFILL_AHEAD.kind, "prefill-ahead mechanisms")):
            table = Table(title=title, header_style="bold")
            table.add_column("name")
            table.add_column("description")
            table.add_column("parameters (default)")
            for row in rows:
                if row["kind"] == kind:
                    table.add_row(row["name"], row["description"],
                                  "\n".join(f"{p['name']}={p['default']}" for p in row["params"]) or "-")
            console.print(table)
