"""Benchmark: this checkout's simulation speed against the code from before the architecture
refactor (serving collaborators, tier kinds as data, the tiered-cache split), in one run.

The reference is the commit :data:`BASELINE` (the last one on ``main`` before the refactor's
first merge), extracted with ``git archive`` into a temporary directory and run with this
checkout's environment, as ``bench/reference_runs.py --src`` does. Each scenario runs as its
own process, alternately under the old and the new code so that both see the same machine load,
each side with its own scenario file. The figure is CPU seconds (user + system of the child) per
simulated request, best of ``--repeat``, since the two versions do not simulate exactly the
same requests (features landed since: engine-style KV admission, the recompute record, ...);
the event loop's own rate (``simulated_requests_per_wall_s``) is in the note. Target: no
slower than the reference, with 10% for the noise of a shared machine.

Skipped with a note when git or the baseline commit is not available (an sdist, a shallow clone).

    .venv/bin/python bench/refactor_speed.py [--repeat 3] [--baseline COMMIT]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from _common import AGENTSIM_PYTHON, ROOT, Row, print_table

#: ``Merge branch 'work/22'``: main right before "Merge the architecture refactor".
BASELINE = "760c142"
CLI = "import sys; from agentsim.cli import main; sys.exit(main())"
#: (row label, scenario file relative to a checkout, --set overrides)
SCENARIOS = [
    ("default scenario (coding-agents)", "scenarios/coding-agents.yaml", []),
    ("GB300 tiers, 18 instances, 3 min", "scenarios/gb300-nvl72-tiers.yaml", ["duration_s=3m"]),
]
TOLERANCE = 1.10


def extract(commit: str, into: Path) -> Path | None:
    """``git archive`` of ``commit`` unpacked under ``into``; None if git or the commit is missing."""
    archive = into / "baseline.tar"
    try:
        with open(archive, "wb") as out:
            subprocess.run(["git", "archive", commit], cwd=ROOT, stdout=out, stderr=subprocess.PIPE, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    target = into / "baseline"
    with tarfile.open(archive) as tar:
        tar.extractall(target, filter="data")
    return target


def timed_run(src: Path, scenario: str, overrides: list[str], out: Path) -> tuple[float, dict]:
    """(CPU s of the child, summary) of one ``agentsim run`` of ``src``'s code and scenario."""
    command = [str(AGENTSIM_PYTHON), "-c", CLI, "run", scenario, "--out", str(out), "--force", "--quiet"]
    for item in overrides:
        command += ["--set", item]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, cwd=src, env={**os.environ, "PYTHONPATH": str(src)}, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} in {src} failed: {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, json.loads((out / "summary.json").read_text())


def rows(repeat: int = 3, baseline: str = BASELINE) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="agentsim-refactor-bench-") as tmp:
        tmp_path = Path(tmp)
        old = extract(baseline, tmp_path)
        if old is None:
            return [Row("sim CPU per request vs pre-refactor code", "-", "-", None, None,
                        f"skipped: commit {baseline} not available here (needs the git repository)")]
        out = []
        for label, scenario, overrides in SCENARIOS:
            best = {"new": (float("inf"), None), "old": (float("inf"), None)}
            for _ in range(max(1, repeat)):
                for side, src in (("old", old), ("new", ROOT)):
                    cpu, summary = timed_run(src, scenario, overrides, tmp_path / f"run-{side}")
                    per_request = cpu / max(1, summary["requests"])
                    if per_request < best[side][0]:
                        best[side] = (per_request, summary)
            (new_s, new_summary), (old_s, old_summary) = best["new"], best["old"]
            out.append(Row(f"sim CPU per request vs pre-refactor code: {label}", f"{new_s * 1e3:.3f} ms",
                           f"{old_s * 1e3:.3f} ms", new_s / old_s, ("<=", TOLERANCE),
                           f"whole process, best of {max(1, repeat)}; {new_summary['requests']:,} vs "
                           f"{old_summary['requests']:,} requests; event loop "
                           f"{new_summary['simulated_requests_per_wall_s']:,.0f} vs "
                           f"{old_summary['simulated_requests_per_wall_s']:,.0f} req/s (reference: {baseline})"))
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", default=BASELINE, help="commit of the reference code")
    args = parser.parse_args()
    started = time.perf_counter()
    print_table(rows(args.repeat, args.baseline))
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
