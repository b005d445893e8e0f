"""``agentsim validate SCENARIO.yaml``: check a scenario without running it."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from agentsim.commands.common import console


def register(app: typer.Typer) -> None:
    @app.command("validate")
    def validate_command(
        scenario_file: Path = typer.Argument(..., help="scenario YAML file"),
        set_: Optional[list[str]] = typer.Option(None, "--set", help="override a field: PATH=VALUE (repeatable)"),
        show: bool = typer.Option(False, "--show", help="print the resolved scenario"),
    ) -> None:
        """Validate a scenario file (exit 0 if valid, 2 with one message if not)."""
        from agentsim.config.loader import scenario_to_yaml
        from agentsim.engine.loading import load_scenario

        scenario = load_scenario(scenario_file, list(set_ or []))
        blocks = scenario.kv_capacity_blocks_per_instance()
        console.print(f"{scenario_file}: valid ({len(scenario.workload.agent_classes)} agent classes, "
                      f"{blocks:,} KV blocks of {scenario.cache.block_tokens} tokens per instance, "
                      f"eviction {scenario.cache.eviction.name})")
        if show:
            console.print(scenario_to_yaml(scenario), markup=False, highlight=False)
