"""``make bench``: every benchmark of ``bench/``, one table (benchmark, figure, reference, ratio,
target, met?).

Sections: cache-only replay and the hit-ratio curve (replay.py), timed simulation speed
(bench_simulation.py), whole-process start-up of the command line (cli_start.py), whole-process comparison with Dynamo's offline replay (vs_dynamo.py,
skipped with a note when ``.peers/dynamo`` is absent), the GB300 NVL72 rack hour
(bench_rack.py), memory per request and CPU per request from one rack to four and from ten
minutes to a day (bench_scale.py), and the architecture refactor's steps, each against the code
before it (refactor_speed.py). The sweep speed-up (bench/sweep.py) is separate (it measures the machine's
parallelism as much as agentsim's), and so is the whole fleet day (bench_fleet.py, hours of CPU:
``--only fleet`` runs it). Progress goes to stderr; the table to stdout.

    .venv/bin/python bench/run_all.py [--repeat 3] [--only replay,simulation,dynamo,rack] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time

from _common import Row, print_table

SECTIONS = ("replay", "cli", "simulation", "dynamo", "rack", "scale", "refactor")
#: Sections run only when named in ``--only`` (hours each).
OPT_IN_SECTIONS = ("fleet",)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="repeats of in-process benchmarks (best taken)")
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    parser.add_argument("--quick", action="store_true", help="rack: skip the 1x/2x scaling runs")
    args = parser.parse_args()
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    rows: list[Row] = []
    for section in wanted:
        started = time.perf_counter()
        print(f"[bench] {section} ...", file=sys.stderr, flush=True)
        if section == "replay":
            import replay as bench_replay
            rows += bench_replay.rows(args.repeat)
        elif section == "cli":
            import cli_start
            rows += cli_start.rows(max(5, args.repeat))
        elif section == "simulation":
            import bench_simulation
            rows += bench_simulation.rows(args.repeat)
        elif section == "dynamo":
            import vs_dynamo
            rows += vs_dynamo.rows(2)
        elif section == "rack":
            import bench_rack
            rows += bench_rack.rows(scaling=not args.quick)
        elif section == "scale":
            import bench_scale
            rows += bench_scale.rows(args.repeat)
        elif section == "refactor":
            import refactor_speed
            rows += refactor_speed.rows(args.repeat)
        elif section == "fleet":
            import bench_fleet
            rows += bench_fleet.rows()
        else:
            parser.error(f"unknown section {section!r}; known: {', '.join(SECTIONS + OPT_IN_SECTIONS)}")
        print(f"[bench] {section} done in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    print_table(rows)
    if any(r.met == "NO" for r in rows):
        print("some targets not met", file=sys.stderr)


if __name__ == "__main__":
    main()
