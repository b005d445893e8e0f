"""Write the per-deployment prefill host times (``agentsim/data/prefill_host_by_deployment.csv``).

Emulates every aggregated row of at most 4 clients of a measured-runs file without host time and
tabulates, per (engine, model, system), the median of (measured - predicted TTFT) / layers
(:mod:`agentsim.experiments.host_calibration`; about half a minute on two processes):

    python scripts/calibrate_prefill_host.py ../shared/data/serving-benchmarks/measured_runs.csv
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from agentsim.errors import InputError
from agentsim.experiments.benchmark_rows import read_rows
from agentsim.experiments.host_calibration import calibrate
from agentsim.hardware.timing.prefill_host import CALIBRATION_FILE


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("measured", type=Path, help="a file in the format of measured_runs.csv")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "agentsim" / CALIBRATION_FILE)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    try:
        frame = read_rows(args.measured)   # a clear message (file, line) for a bad file
    except InputError as exc:
        print(f"error: {exc.render()}", file=sys.stderr)
        return 2
    with ProcessPoolExecutor(args.workers) as pool:
        table = calibrate(frame, map_rows=lambda fn, rows: pool.map(fn, rows, chunksize=4))
    if table.empty:  # keep the table there is rather than write an empty one
        print(f"error: {args.measured}: no aggregated row of at most 4 clients could be emulated; "
              f"{args.out} left as it was", file=sys.stderr)
        return 2
    args.out.write_text(table.to_csv(index=False))
    print(table.to_string(index=False))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
