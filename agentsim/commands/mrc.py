"""``agentsim mrc TRACE``: the LRU hit-ratio curve at every capacity, in one pass.

Stack distances give, for the prefix LRU of ``agentsim replay --mode cache-only --policy lru``,
the exact hit ratio (hit blocks / requested blocks) at all capacities at once; the command
prints it at the requested fractions of the trace's unique blocks.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

DEFAULT_FRACTIONS = "0.01,0.05,0.1,0.25,0.5"


def parse_fractions(text: str) -> list[float]:
    from agentsim.errors import InputError

    fractions = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = float(part)
        except ValueError:
            raise InputError(f"not a number: {part!r}", "--fractions") from None
        if not value > 0 or value != value:
            raise InputError(f"fractions must be positive, got {part}", "--fractions")
        fractions.append(value)
    if not fractions:
        raise InputError("no fractions given", "--fractions")
    return fractions


def curve_points(unique_blocks: int, max_points: int = 256) -> list[int]:
    """Geometrically spaced capacities from 1 to ``unique_blocks`` (for the written curve)."""
    import numpy as np

    if unique_blocks <= 0:
        return []
    points = np.unique(np.round(np.geomspace(1, unique_blocks, num=min(max_points, unique_blocks))).astype(np.int64))
    return [int(p) for p in points]


def register(app: typer.Typer) -> None:
    @app.command("mrc")
    def mrc_command(
        trace: Path = typer.Argument(..., help="trace file (.jsonl/.json, gzip or plain) or a directory of WEKA sessions"),
        fmt: str = typer.Option("auto", "--format", help="auto | mooncake | weka | bailian"),
        fractions: str = typer.Option(DEFAULT_FRACTIONS, "--fractions", help="capacities as fractions of the unique blocks"),
        block_size: Optional[int] = typer.Option(
            None, "--block-size", help="re-block to this many tokens per block (a multiple of the trace's)"),
        session_offset: float = typer.Option(
            0.0, "--session-offset", help="WEKA: the k-th session starts at k * this many seconds"),
        as_json: bool = typer.Option(False, "--json", help="print a JSON list instead of a table"),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="write mrc.json and curve.csv (256 capacities) here"),
    ) -> None:
        """LRU hit ratio at every capacity from stack distances (exact for prefix LRU)."""
        from agentsim.commands.replay import _choice, format_choices, print_warnings
        from agentsim.replay import canonicalize, hit_ratio_curve, resolve_capacity
        from agentsim.replay.load import load_trace

        _choice(fmt, format_choices(), "--format")
        wanted = parse_fractions(fractions)
        loaded = load_trace(trace, fmt, block_tokens=block_size, session_offset_s=session_offset)
        print_warnings(loaded.warnings)
        curve = hit_ratio_curve(canonicalize(loaded.requests))
        rows = []
        for fraction in wanted:
            capacity = resolve_capacity(curve.unique_blocks, None, fraction)
            rows.append({"fraction": fraction, "capacity_blocks": capacity, "hit_ratio": curve.hit_ratio(capacity)})
        if out is not None:
            from agentsim.errors import InputError
            try:
                out.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise InputError(f"cannot create output directory ({exc.strerror})", str(out)) from None
            meta = {"trace": loaded.path, "format": loaded.fmt, "block_tokens": loaded.block_tokens,
                    "requests": curve.requests, "requested_blocks": curve.requested_blocks,
                    "unique_blocks": curve.unique_blocks, "ideal_hit_ratio": curve.ideal_hit_ratio, "points": rows}
            (out / "mrc.json").write_text(json.dumps(meta, indent=2) + "\n")
            lines = ["capacity_blocks,capacity_fraction,hit_ratio"]
            for capacity in curve_points(curve.unique_blocks):
                lines.append(f"{capacity},{capacity / curve.unique_blocks:.6g},{curve.hit_ratio(capacity):.6f}")
            (out / "curve.csv").write_text("\n".join(lines) + "\n")
        if as_json:
            sys.stdout.write(json.dumps(rows) + "\n")
            return
        from rich.table import Table

        from agentsim.commands.common import console

        table = Table(title=(f"LRU hit ratio of {Path(loaded.path).name} ({loaded.fmt}, {curve.requests:,} requests, "
                             f"{curve.unique_blocks:,} unique blocks of {loaded.block_tokens} tokens)"),
                      header_style="bold")
        table.add_column("fraction", justify="right")
        table.add_column("capacity (blocks)", justify="right")
        table.add_column("hit ratio", justify="right")
        for row in rows:
            table.add_row(f"{row['fraction']:g}", f"{row['capacity_blocks']:,}", f"{row['hit_ratio']:.4f}")
        table.add_row("ideal", f"{curve.unique_blocks:,}", f"{curve.ideal_hit_ratio:.4f}")
        console.print(table)
