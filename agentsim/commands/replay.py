"""``agentsim replay TRACE``: replay a real trace, cache-only or timed.

Cache-only mode prints hit ratios (hit blocks / requested blocks, longest resident prefix;
``token_hit_ratio`` is the token-weighted variant) for one eviction policy and capacity. The
timed modes (``open-loop``, ``closed-loop``) run the trace through the serving and cache model
(:func:`agentsim.replay.timed.run_timed_replay`) and also report latencies.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

MODES = ("cache-only", "open-loop", "closed-loop")


def format_choices() -> tuple[str, ...]:
    """``--format`` values: ``auto`` and every trace format the readers know."""
    from agentsim.workload.traces import FORMATS

    return ("auto", *FORMATS)


def _choice(value: str, choices: tuple[str, ...], option: str) -> str:
    from agentsim.errors import InputError, did_you_mean

    if value not in choices:
        raise InputError(f"unknown value {value!r}{did_you_mean(value, choices)}; choose from {', '.join(choices)}", option)
    return value


def print_warnings(notes: list[str]) -> None:
    for note in notes:
        sys.stderr.write(f"warning: {note}\n")


def replay_table(summary: dict, title: str):
    from rich.table import Table

    from agentsim.metrics.catalogue import format_value

    rows = [
        ("requests", "requests"), ("policy", "policy"), ("capacity_blocks", "capacity (blocks)"),
        ("capacity_fraction", "capacity / unique blocks"), ("block_tokens", "block size (tokens)"),
        ("unique_blocks", "unique blocks"), ("requested_blocks", "requested blocks"),
        ("hit_ratio", "hit ratio (blocks)"), ("upper_bound_hit_ratio", "upper bound: no policy exceeds (blocks)"),
        ("ideal_hit_ratio", "ideal hit ratio (unbounded)"),
        ("token_hit_ratio", "token hit ratio"), ("evicted_blocks", "evicted blocks"),
        ("load_time_s", "load time"), ("replay_time_s", "replay time"),
    ]
    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, label in rows:
        if summary.get(key) is not None:
            table.add_row(label, format_value(summary[key], "s" if key.endswith("_s") else ""))
    return table


def register(app: typer.Typer) -> None:
    @app.command("replay")
    def replay_command(
        trace: Path = typer.Argument(..., help="trace file (.jsonl/.json, gzip or plain) or a directory of WEKA sessions"),
        fmt: str = typer.Option("auto", "--format", help="auto | mooncake | weka | bailian"),
        mode: str = typer.Option("cache-only", "--mode", help="cache-only | open-loop | closed-loop"),
        policy: Optional[str] = typer.Option(
            None, "--policy", help="any registered eviction policy (see `agentsim policies`); default lru, or the "
            "--scenario's policy in the timed modes"),
        param: Optional[list[str]] = typer.Option(
            None, "--param", help="a policy parameter KEY=VALUE, with units where the name has one (tau_s=5m); repeatable"),
        capacity_blocks: Optional[int] = typer.Option(None, "--capacity-blocks", help="cache capacity in blocks"),
        capacity_fraction: Optional[float] = typer.Option(
            None, "--capacity-fraction", help="cache capacity as a fraction of the trace's unique blocks (default 0.1)"),
        block_size: Optional[int] = typer.Option(
            None, "--block-size", help="re-block to this many tokens per block (a multiple of the trace's)"),
        clock: str = typer.Option("auto", "--clock", help="cache-only clock: auto | logical (request number) | trace (timestamps); auto = trace for TTL policies"),
        session_offset: float = typer.Option(
            0.0, "--session-offset", help="WEKA: the k-th session starts at k * this many seconds"),
        scenario: Optional[Path] = typer.Option(
            None, "--scenario", help="timed modes: scenario YAML whose hardware, model and serving to use"),
        set_: Optional[list[str]] = typer.Option(
            None, "--set", help="timed modes: override a field PATH=VALUE of the --scenario (or of the default one)"),
        bound: bool = typer.Option(
            False, "--bound", help="cache-only: also compute the hit ratio no policy can exceed on this trace at "
            "this capacity (a proven upper bound, docs/policies.md)"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of a table"),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="write summary.json and requests.parquet here"),
        force: bool = typer.Option(False, "--force", help="overwrite results already in --out"),
    ) -> None:
        """Replay a trace through a KV cache and report hit ratios."""
        from agentsim.errors import InputError

        _choice(fmt, format_choices(), "--format")
        _choice(mode, MODES, "--mode")
        if capacity_blocks is not None and capacity_fraction is not None:
            raise InputError("give either --capacity-blocks or --capacity-fraction, not both", "command line")
        if capacity_blocks is not None and mode == "cache-only":
            from agentsim.replay.cache_only import check_capacity_blocks

            check_capacity_blocks(capacity_blocks)  # before the trace is read (timed modes: the scenario's limit)
        if out is not None:
            from agentsim.results import prepare_out_dir

            prepare_out_dir(out, force)  # refuse another run's results before any work
        from agentsim.replay.params import parse_param_options

        param_items = list(param or [])
        policy_params = parse_param_options(param_items)
        if mode != "cache-only":
            if bound:
                raise InputError("--bound applies to the cache-only mode (timed runs report "
                                 "upper_bound_replay_hit_ratio in their summary)", "--bound")
            _timed(trace, fmt, mode, policy, capacity_blocks, capacity_fraction, block_size, session_offset, as_json, out,
                   scenario, list(set_ or []), policy_params, param_items)
            return
        if scenario is not None or set_:
            raise InputError("--scenario and --set apply to the timed modes (open-loop, closed-loop) only", "command line")
        from agentsim.replay.cache_only import make_policy, replay_cache_only, signal_warnings
        from agentsim.replay.load import load_trace

        policy = policy or "lru"
        make_policy(policy, policy_params, param_items)  # fail fast on a bad policy, before reading a large trace
        loaded = load_trace(trace, fmt, block_tokens=block_size, session_offset_s=session_offset)
        print_warnings(loaded.warnings)
        result = replay_cache_only(loaded.requests, capacity_blocks=capacity_blocks, capacity_fraction=capacity_fraction,
                                   policy=policy, policy_params=policy_params, clock=clock,
                                   record_requests=out is not None, bound=bound)
        summary = {"trace": loaded.path, "format": loaded.fmt, **result.summary(), "load_time_s": loaded.load_time_s}
        print_warnings(signal_warnings(summary))
        if out is not None:
            _write(out, summary, loaded.requests, result.request_hit_blocks)
        if as_json:
            sys.stdout.write(json.dumps(summary) + "\n")
        else:
            from agentsim.commands.common import console
            console.print(replay_table(summary, f"cache-only replay of {Path(loaded.path).name} ({loaded.fmt})"))
            if out is not None:
                console.print(f"results written to {out}/")


def _write(out: Path, summary: dict, requests, hits: list[int]) -> None:
    import pandas as pd

    from agentsim.errors import InputError
    from agentsim.results import summary_json

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create output directory ({exc.strerror})", str(out)) from None
    (out / "summary.json").write_text(summary_json(summary))
    table = pd.DataFrame({
        "index": [r.index for r in requests],
        "timestamp_s": [r.timestamp_s for r in requests],
        "session_id": [r.session_id for r in requests],
        "agent_id": [r.agent_id for r in requests],
        "input_tokens": [r.input_tokens for r in requests],
        "requested_blocks": [len(r.block_keys) for r in requests],
        "hit_blocks": hits,
    })
    table.to_parquet(out / "requests.parquet", index=False)


def _timed(trace, fmt, mode, policy, capacity_blocks, capacity_fraction, block_size, session_offset, as_json, out,
           scenario=None, overrides=None, policy_params=None, param_items=None):
    """Run a timed mode through ``agentsim.replay.timed.run_timed_replay``."""
    from agentsim.replay.timed import run_timed_replay

    extra = {}
    if scenario is not None:
        extra["scenario_file"] = scenario
    if overrides:
        extra["overrides"] = overrides
    result = run_timed_replay(trace=trace, fmt=fmt, mode=mode, policy=policy, capacity_blocks=capacity_blocks,
                              capacity_fraction=capacity_fraction, block_tokens=block_size,
                              session_offset_s=session_offset, out_dir=out, policy_params=policy_params,
                              param_items=param_items, **extra)
    summary = result if isinstance(result, dict) else getattr(result, "summary", {})
    from agentsim.replay.cache_only import signal_warnings

    print_warnings(signal_warnings(summary))
    if as_json:
        sys.stdout.write(json.dumps(summary, default=float) + "\n")
    else:
        from agentsim.commands.common import console, summary_table
        console.print(summary_table(summary, title=f"{mode} replay of {Path(str(trace)).name}"))
