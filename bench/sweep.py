"""Speed-up of a sweep on 2 local workers over 1 (target >= 1.7x on a 2-core machine).

    .venv/bin/python bench/sweep.py [--runs 12] [--duration 30m] [--dask]

Runs the same sweep (the default coding-agent scenario, ``--runs`` seeds of one cell) through
``run_sweep`` twice in this process, into fresh directories: once with one worker (in-process,
no pool) and once with a two-process pool, and prints both wall times and their ratio. The
2-worker time includes starting the pool and persisting every run, as a user would see it. With
``--dask`` a third pass uses a 2-worker Dask LocalCluster (cluster start-up excluded, reported
separately). Results of the passes are checked to be identical. Machines are noisy (and this one
is shared): read the ratio, not the absolute times, and compare it with the printed control
ratio (a pure CPU loop on 2 processes over 1, measured at the same time), which shows how much
parallelism the machine offered during the benchmark.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentsim.experiments.executors import DaskExecutor, LocalExecutor  # noqa: E402
from agentsim.experiments.spec import load_sweep  # noqa: E402
from agentsim.experiments.sweep import run_sweep  # noqa: E402
from agentsim.results import WALL_CLOCK_KEYS  # noqa: E402


def _burn(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


def control_ratio(chunks: int = 4, n: int = 6_000_000) -> float:
    """The same pure-Python CPU work on 1 process vs a 2-process pool: the parallelism this
    machine offers right now (about 2.0 on 2 idle cores, about 1.0 if other jobs fill them)."""
    import multiprocessing

    started = time.perf_counter()
    for _ in range(chunks):
        _burn(n)
    one = time.perf_counter() - started
    started = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pool.map(_burn, [n] * chunks)
    return one / (time.perf_counter() - started)


def timed(sweep, out: Path, executor) -> tuple[float, object]:
    started = time.perf_counter()
    report = run_sweep(sweep, out, executor)
    return time.perf_counter() - started, report


def comparable(report):
    table = report.table.drop(columns=[c for c in WALL_CLOCK_KEYS if c in report.table])
    return table.sort_values(["cell_index", "seed"]).reset_index(drop=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=12, help="runs (seeds) in the sweep")
    parser.add_argument("--duration", default="30m", help="simulated duration of each run")
    parser.add_argument("--dask", action="store_true", help="also time a 2-worker Dask LocalCluster")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        spec = tmp_path / "bench.yaml"
        spec.write_text(f"name: bench\nbase: {ROOT / 'scenarios' / 'coding-agents.yaml'}\n"
                        f"set: {{duration_s: {args.duration}}}\nseeds: {args.runs}\n")
        sweep = load_sweep(spec)
        one_s, one = timed(sweep, tmp_path / "w1", LocalExecutor(workers=1))
        two_s, two = timed(sweep, tmp_path / "w2", LocalExecutor(workers=2))
        assert comparable(one).equals(comparable(two)), "1-worker and 2-worker results differ"
        simulated = float(one.table.simulated_s.sum())
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
        print(f"sweep: {args.runs} runs of coding-agents x {args.duration} ({simulated:,.0f} simulated s in all)")
        print(f"1 worker : {one_s:7.2f} s")
        print(f"2 workers: {two_s:7.2f} s")
        control = control_ratio()
        print(f"speed-up of 2 workers over 1: {one_s / two_s:.2f}x (target >= 1.7x on 2 idle cores)")
        print(f"control (pure CPU loop, 2 processes over 1, measured now): {control:.2f}x; "
              f"sweep efficiency relative to it: {one_s / two_s / control:.0%}")
        if args.dask:
            started = time.perf_counter()
            executor = DaskExecutor("local", workers=2)
            startup_s = time.perf_counter() - started
            try:
                dask_s, dask = timed(sweep, tmp_path / "dask", executor)
            finally:
                executor.close()
            assert comparable(one).equals(comparable(dask)), "Dask results differ from the local ones"
            print(f"dask LocalCluster, 2 workers: {dask_s:7.2f} s (+{startup_s:.1f} s cluster start), "
                  f"speed-up {one_s / dask_s:.2f}x; results identical to the local pool")


if __name__ == "__main__":
    main()
