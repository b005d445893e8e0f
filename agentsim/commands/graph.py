"""``agentsim graph SCENARIO --out DIR``: the prefix-sharing graph of a scenario's prompts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from agentsim.commands.common import console


def collect_prompts(scenario):
    """Run ``scenario`` and return the prompt paths of every LLM call it issued."""
    from agentsim.engine.simulation import Simulation
    from agentsim.workload.prefix_graph import PromptPath

    prompts: list[PromptPath] = []
    sim = Simulation(scenario)
    sim.request_observers.append(lambda r: prompts.append(
        PromptPath(tuple(r.prompt_keys), r.session_id, r.agent_class, r.depth, r.mutations > 0)))
    sim.run()
    return prompts


def register(app: typer.Typer) -> None:
    @app.command("graph")
    def graph_command(
        scenario_file: Path = typer.Argument(..., help="scenario YAML file"),
        out: Path = typer.Option(..., "--out", "-o", help="output directory"),
        duration: str = typer.Option("10m", "--duration", help="simulated time to collect prompts over (shorter = smaller graph)"),
        set_: Optional[list[str]] = typer.Option(None, "--set", help="override a field: PATH=VALUE (repeatable)"),
        seed: Optional[int] = typer.Option(None, "--seed", min=0, help="override the scenario's seed"),
    ) -> None:
        """Write the prefix-sharing graph (GraphML), a drawing (PNG) and sharing statistics."""
        from rich.table import Table

        from agentsim.engine.loading import load_scenario
        from agentsim.errors import InputError
        from agentsim.workload.prefix_graph import build_prefix_graph, draw_prefix_graph, sharing_statistics

        import networkx as nx

        from agentsim.config.units import UnitError, parse_duration

        try:  # blamed on --duration, not on the --set it becomes
            duration_s = parse_duration(duration)
        except UnitError as exc:
            raise InputError(str(exc), "--duration") from None
        if not 0 < duration_s < float("inf"):
            raise InputError(f"the duration must be positive and finite, got {duration!r}", "--duration")
        scenario = load_scenario(scenario_file, list(set_ or []) + [f"duration_s={duration_s!r}"], seed)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create output directory ({exc.strerror})", str(out)) from None
        prompts = collect_prompts(scenario)
        graph = build_prefix_graph(prompts, scenario.cache.block_tokens)
        stats = sharing_statistics(graph)
        nx.write_graphml(graph, out / "prefix_graph.graphml")
        draw_prefix_graph(graph, out / "prefix_graph.png", title=f"prefix-sharing graph: {scenario.name} ({len(prompts)} prompts)")
        (out / "sharing.json").write_text(json.dumps(stats, indent=2) + "\n")
        table = Table(title=f"prefix sharing: {scenario.name}", header_style="bold")
        table.add_column("segment kind")
        table.add_column("distinct tokens", justify="right")
        table.add_column("prompt tokens through it", justify="right")
        for kind, tokens in stats["tokens_by_kind"].items():
            table.add_row(kind.replace("_", " "), f"{tokens:,}", f"{stats['prompt_tokens_by_kind'][kind]:,}")
        console.print(table)
        console.print(f"prompts: {stats['prompts']:,}  segments: {stats['segments']:,}  "
                      f"mean fan-out at branch points: {stats['mean_fanout']:.2f}")
        console.print(f"prompt tokens shared across sessions: {stats['shared_prompt_fraction']:.1%}  "
                      f"reused from an earlier prompt (unbounded-cache hit ratio): {stats['reused_prompt_fraction']:.1%}")
        console.print(f"wrote {out}/prefix_graph.graphml, prefix_graph.png, sharing.json")
