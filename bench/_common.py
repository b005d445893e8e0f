"""Shared pieces of the benchmarks: result rows, the one table, best-of timing, paths.

Every benchmark returns :class:`Row` objects: a figure measured now, the reference measured in
the same run (same process where possible, else whole processes started one after the other),
their ratio and the target on that ratio. Machines here are shared and noisy, so figures are the
best of several repeats and only ratios are judged.
"""

from __future__ import annotations

import gzip
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MOONCAKE = ROOT.parent / "shared" / "data" / "mooncake" / "conversation_trace.jsonl.gz"
DYNAMO_PYTHON = ROOT / ".peers" / "dynamo" / "bin" / "python"
AGENTSIM_PYTHON = Path(sys.executable)


@dataclass
class Row:
    """One line of the benchmark table.

    ``ratio`` is ``figure / reference`` in the units given; ``target`` is ``("<=", x)`` or
    ``(">=", x)`` on the ratio, or None for an informational row (a comparison without a bar).
    """

    benchmark: str
    figure: str
    reference: str
    ratio: float | None
    target: tuple[str, float] | None
    note: str = ""

    @property
    def met(self) -> str:
        if self.target is None or self.ratio is None:
            return "-"
        op, bound = self.target
        ok = self.ratio <= bound if op == "<=" else self.ratio >= bound
        return "yes" if ok else "NO"

    @property
    def target_text(self) -> str:
        if self.target is None:
            return "(info)"
        op, bound = self.target
        return f"{op} {bound:g}"


def print_table(rows: list[Row], out=sys.stdout) -> None:
    """The one table: benchmark, figure, reference, ratio, target, met?"""
    header = ("benchmark", "figure", "reference", "ratio", "target", "met?")
    lines = [(r.benchmark, r.figure, r.reference, "-" if r.ratio is None else f"{r.ratio:.3g}", r.target_text, r.met)
             for r in rows]
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(header)]

    def fmt(cells):
        return "  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    print(fmt(header), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for line in lines:
        print(fmt(line), file=out)
    notes = [r for r in rows if r.note]
    for r in notes:
        print(f"  note ({r.benchmark}): {r.note}", file=out)
    out.flush()


def best_time(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    """Best wall time (s) of ``repeat`` calls of ``fn`` and the last call's result."""
    best = float("inf")
    result = None
    for _ in range(max(1, repeat)):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def plain_mooncake(directory: Path | None = None) -> Path:
    """The Mooncake trace gunzipped to a plain JSONL file (Dynamo's reader wants plain text)."""
    directory = Path(directory or tempfile.gettempdir()) / "agentsim-bench"
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "conversation_trace.jsonl"
    if not target.exists() or target.stat().st_size == 0:
        with gzip.open(MOONCAKE, "rb") as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return target
