"""``agentsim policies``: every registered component a scenario can name, with its parameters."""

from __future__ import annotations

import json

import typer

from agentsim.commands.common import console


def registries() -> list[tuple[str, object, str]]:
    """(section title, registry, scenario field that names one) of every pluggable component."""
    from agentsim.cache.registries import ADMISSION_FILTERS, EVICTION_POLICIES
    from agentsim.cluster.routers import ROUTERS
    from agentsim.cluster.serving.kv_admission import KV_ADMISSION
    from agentsim.cluster.serving.load_rules import LOAD_RULES
    from agentsim.cluster.serving.prefetch import PREFETCH_POLICIES
    from agentsim.engine.prefill_ahead import PREFILL_AHEAD

    return [("eviction policies", EVICTION_POLICIES, "cache.eviction, cache.tiers.*.eviction"),
            ("admission filters", ADMISSION_FILTERS, "cache.admission"),
            ("routers", ROUTERS, "serving.router"),
            ("load rules", LOAD_RULES, "cache.tiers.load_rule"),
            ("prefetch policies", PREFETCH_POLICIES, "cache.tiers.prefetch.policy"),
            ("KV admission rules", KV_ADMISSION, "serving.kv_admission"),
            ("prefill-ahead mechanisms", PREFILL_AHEAD, "serving.prefill_ahead.name")]


def rows() -> list[dict]:
    """One row per registered component: kind, name, one-line description and parameters."""
    from agentsim.registry import describe_params, summary_line

    out = []
    for _, registry, _ in registries():
        for name in registry.names():
            params = describe_params(registry.params_model(name))
            out.append({"kind": registry.kind, "name": name, "description": summary_line(registry.get(name)),
                        "params": [{"name": p, "default": d, "description": desc} for p, d, desc in params]})
    return out


def register(app: typer.Typer) -> None:
    @app.command("policies")
    def policies_command(as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
        """List every registered eviction policy, admission filter, router, load rule, prefetch
        policy, KV admission rule and prefill-ahead mechanism with its parameters and defaults."""
        from rich.table import Table
        from rich.text import Text

        listed = rows()
        if as_json:
            typer.echo(json.dumps(listed, indent=2))
            return
        for title, registry, field in registries():
            # fold, never cut: a default or a description is read in full
            table = Table(title=f"{title} ({field})", header_style="bold")
            table.add_column("name", overflow="fold", no_wrap=True)
            table.add_column("description", overflow="fold", ratio=3)
            table.add_column("parameters (default)", overflow="fold", ratio=2)
            for row in listed:
                if row["kind"] == registry.kind:
                    # Text, not markup: a default such as [tool] is a value, not a style tag
                    table.add_row(Text(row["name"]), Text(row["description"] or "-"),
                                  Text("\n".join(f"{p['name']}={p['default']}" for p in row["params"]) or "-"))
            console.print(table)
