"""The fleet day (issue 21's first target): ``scenarios/fleet-day.yaml`` (10,000 coding and chat
agents on four GB300 NVL72 racks with DRAM, NVMe and a shared remote tier, 24 simulated hours)
in one ``agentsim run`` process: its CPU time against 45 minutes and its peak RSS against 6 GB.

The whole day takes hours of CPU on this machine, so ``make bench`` leaves it out; run it with
``bench/run_all.py --only fleet`` or on its own. ``--duration`` runs a slice from midnight (the
night trough, so a slice says little about the day: the rows then carry no target).

    .venv/bin/python bench/bench_fleet.py [--duration 24h]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import tempfile
import time
from pathlib import Path

from _common import AGENTSIM_PYTHON, ROOT, Row, print_table

SCENARIO = ROOT / "scenarios" / "fleet-day.yaml"
CPU_MINUTES_TARGET = 45.0
PEAK_RSS_GB_TARGET = 6.0


def run(duration: str) -> dict:
    """One ``agentsim run`` of the fleet day (or a slice of it) in its own process: its CPU
    seconds (user + system), peak RSS, wall seconds and finished requests."""
    with tempfile.TemporaryDirectory(prefix="agentsim-fleet-") as tmp:
        out = Path(tmp) / "run"
        command = [str(AGENTSIM_PYTHON), "-m", "agentsim.cli", "run", str(SCENARIO), "--out", str(out), "--quiet"]
        if duration != "24h":
            command += ["--set", f"duration_s={duration}"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        # stderr is inherited: the run's progress lines show where a day-long run is.
        done = subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(f"fleet-day run failed with exit code {done.returncode}")
        summary = json.loads((out / "summary.json").read_text())
    return {"cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            # ru_maxrss of the children is the largest child's peak, in KiB on Linux; the bar is
            # read in SI gigabytes (10**9 bytes), the stricter of the two readings of "6 GB"
            "max_rss_gb": after.ru_maxrss * 1024 / 1e9, "wall_s": wall, "requests": summary["requests"]}


def rows(duration: str = "24h") -> list[Row]:
    result = run(duration)
    whole_day = duration == "24h"
    minutes = result["cpu_s"] / 60.0
    per_request_ms = result["cpu_s"] / max(1, result["requests"]) * 1e3
    note = (f"{result['requests']:,} requests, {per_request_ms:.2f} ms CPU per request, "
            f"wall {result['wall_s'] / 60.0:.2f} min" + ("" if whole_day else f"; a {duration} slice, no target"))
    return [
        Row(f"fleet day ({duration}), whole-process CPU", f"{minutes:.2f} min", f"{CPU_MINUTES_TARGET:g} min (bar)",
            minutes / CPU_MINUTES_TARGET if whole_day else None, ("<=", 1.0) if whole_day else None, note),
        Row(f"fleet day ({duration}), peak RSS", f"{result['max_rss_gb']:.2f} GB", f"{PEAK_RSS_GB_TARGET:g} GB (bar, 10^9 bytes)",
            result["max_rss_gb"] / PEAK_RSS_GB_TARGET if whole_day else None, ("<=", 1.0) if whole_day else None),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="24h", help="simulated span (default the whole day, 24h)")
    args = parser.parse_args()
    print_table(rows(args.duration))


if __name__ == "__main__":
    main()
