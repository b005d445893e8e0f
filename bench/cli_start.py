"""Whole-process start-up of the command line (issue 21, target 4).

Rows:
1. ``agentsim replay TRACE --mode cache-only --policy lru --capacity-fraction 0.1 --json`` as its
   own process against ``bench/naive_replay.py`` (stdlib ``json`` + ``gzip``, ``OrderedDict``
   prefix LRU) as its own process, same trace and capacity: <= 3x. Both wall time and CPU
   time (user + system of the child, from ``getrusage``) are best of ``--repeat``, the two
   processes alternating so that both see the same machine load; the ratio is judged on CPU
   time (the steadier figure on a shared machine), wall is in the note. The hit counts must agree.
2. ``agentsim --help`` wall time, best of ``--repeat``, against a bar of 0.3 s.

    .venv/bin/python bench/cli_start.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import time
from pathlib import Path

from _common import AGENTSIM_PYTHON, MOONCAKE, ROOT, Row, print_table

NAIVE = Path(__file__).resolve().parent / "naive_replay.py"
AGENTSIM = AGENTSIM_PYTHON.parent / "agentsim"
HELP_BAR_S = 0.3


def timed_process(command: list[str]) -> tuple[float, float, str]:
    """(wall s, CPU s of the child, stdout) of one process run to completion."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def rows(repeat: int = 7) -> list[Row]:
    if not MOONCAKE.exists():
        return [Row("CLI replay process vs naive script", "-", "absent", None, None, f"needs {MOONCAKE}")]
    ours_cmd = [str(AGENTSIM), "replay", str(MOONCAKE), "--mode", "cache-only", "--policy", "lru",
                "--capacity-fraction", "0.1", "--json"]
    naive_cmd = [str(AGENTSIM_PYTHON), str(NAIVE), str(MOONCAKE), "--capacity-fraction", "0.1"]
    best = {"ours": [float("inf"), float("inf")], "naive": [float("inf"), float("inf")]}
    outputs = {}
    for _ in range(max(1, repeat)):
        for name, command in (("naive", naive_cmd), ("ours", ours_cmd)):
            wall, cpu, out = timed_process(command)
            best[name] = [min(best[name][0], wall), min(best[name][1], cpu)]
            outputs[name] = json.loads(out.strip().splitlines()[-1])
    (ours_wall, ours_cpu), (naive_wall, naive_cpu) = best["ours"], best["naive"]
    row = Row("CLI replay cache-only process vs naive script (CPU)", f"{ours_cpu:.3f} s", f"{naive_cpu:.3f} s",
              ours_cpu / naive_cpu, ("<=", 3.0),
              f"wall {ours_wall:.3f} s vs {naive_wall:.3f} s ({ours_wall / naive_wall:.2f}x)")
    if outputs["ours"]["hit_blocks"] != outputs["naive"]["hit_blocks"]:
        row.note += f"; hit mismatch: {outputs['ours']['hit_blocks']} vs {outputs['naive']['hit_blocks']}"
    help_wall = min(timed_process([str(AGENTSIM), "--help"])[0] for _ in range(max(1, repeat)))
    return [row, Row("agentsim --help process (wall)", f"{help_wall:.3f} s", f"{HELP_BAR_S} s (bar)",
                     help_wall / HELP_BAR_S, ("<=", 1.0))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print_table(rows(args.repeat))


if __name__ == "__main__":
    main()
