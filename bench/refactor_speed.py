"""Benchmark: the architecture refactor (issue 16) costs no simulation speed, measured step
by step in one run.

Each step of the refactor is a pair of commits on ``main`` (:data:`STEPS`: the merge and its
first parent, or the branch point and the branch's last commit for the host-tier step); both are extracted
with ``git archive`` into a temporary directory and run with this checkout's environment, as
``bench/reference_runs.py --src`` does. Each scenario runs as its own process, alternately
before and after so that both see the same machine load, each side with its own scenario file.
The figure is CPU seconds (user + system of the child) per simulated request, best of
``--repeat`` (whole process: start-up included); the event loop's own rate
(``simulated_requests_per_wall_s``) is in the note. Target per step: no slower, with 10% for
the noise of a shared machine. A last, informational row compares this checkout with the code
from before the refactor: features that landed since (engine-style KV admission as the default,
KV events for the routers, ...) change what is simulated, so it has no target; nor has the row
per scenario that compares this checkout with the same scenario on the roofline step timer
(``serving.timing=roofline``), which says how much of that is the measured step model (the rack
hour's whole-run figure with a target is in ``bench_rack.py``).

Skipped with a note when git or a commit is not available (an sdist, a shallow clone).

    .venv/bin/python bench/refactor_speed.py [--repeat 3] [--only default,tiers]
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

#: (step, before, after): commits of ``main``; None is this checkout.
STEPS = [
    ("config layering, metric catalogue, registries, tiered-cache split", "760c142", "e1149d3"),
    ("serving split into collaborators", "e1149d3", "2a8c3c9"),
    ("tier kinds as data under hardware/", "4cf8c5d", "bed8810"),
    ("long-form per-tier hit records", "8ce0424", "ab92703"),
    ("host tier as a tier-kind flag", "d5a5ff0", "b7da9f0"),
    ("module-size split: radix tree walk, run merge, KV loader, step timer", "607c6c9", "9d2eddf"),
]
#: This checkout against the code from before the refactor (informational).
BEFORE_REFACTOR = "760c142"
CLI = "import sys; from agentsim.cli import main; sys.exit(main())"
#: name -> (scenario file relative to a checkout, --set overrides)
SCENARIOS = {
    "default": ("scenarios/coding-agents.yaml", []),
    "tiers": ("scenarios/gb300-nvl72-tiers.yaml", ["duration_s=2m"]),
}
TOLERANCE = 1.10
#: ``--set`` of the roofline side of the timing row.
ROOFLINE = ("serving.timing=roofline",)


def extract(commit: str, into: Path) -> Path | None:
    """``git archive`` of ``commit`` unpacked under ``into`` (once); None if git or the commit
    is missing."""
    target = into / commit
    if target.exists():
        return target
    archive = into / f"{commit}.tar"
    try:
        with open(archive, "wb") as out:
            subprocess.run(["git", "archive", commit], cwd=ROOT, stdout=out, stderr=subprocess.PIPE, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
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


def compare(before: Path, after: Path, scenario: str, repeat: int, tmp: Path,
            before_overrides: tuple[str, ...] = ()) -> tuple[float, dict, float, dict]:
    """(CPU s per request, summary) after, then before: best of ``repeat``, alternating;
    ``before_overrides`` are further ``--set`` items of the before side."""
    path, overrides = SCENARIOS[scenario]
    best = {"after": (float("inf"), {}), "before": (float("inf"), {})}
    sides = (("before", before, [*overrides, *before_overrides]), ("after", after, overrides))
    for _ in range(max(1, repeat)):
        for side, src, side_overrides in sides:
            cpu, summary = timed_run(src, path, side_overrides, tmp / f"run-{side}")
            per_request = cpu / max(1, summary["requests"])
            if per_request < best[side][0]:
                best[side] = (per_request, summary)
    return (*best["after"], *best["before"])


def _row(label: str, scenario: str, measured, repeat: int, target) -> Row:
    after_s, after, before_s, before = measured
    return Row(f"{label} [{scenario}]: sim CPU per request", f"{after_s * 1e3:.3f} ms", f"{before_s * 1e3:.3f} ms",
               after_s / before_s, target,
               f"best of {max(1, repeat)}; {after['requests']:,} vs {before['requests']:,} requests; event loop "
               f"{after['simulated_requests_per_wall_s']:,.0f} vs {before['simulated_requests_per_wall_s']:,.0f} req/s")


def rows(repeat: int = 3, only: list[str] | None = None) -> list[Row]:
    scenarios = only or list(SCENARIOS)
    out = []
    with tempfile.TemporaryDirectory(prefix="agentsim-refactor-bench-") as tmp:
        tmp_path = Path(tmp)
        steps = STEPS + [("this checkout vs before the refactor", BEFORE_REFACTOR, None)]
        for label, before_commit, after_commit in steps:
            before = extract(before_commit, tmp_path)
            after = ROOT if after_commit is None else extract(after_commit, tmp_path)
            if before is None or after is None:
                out.append(Row(f"{label}: sim CPU per request", "-", "-", None, None,
                               "skipped: the commits are not available here (needs the git repository)"))
                continue
            target = None if label.startswith("this checkout vs") else ("<=", TOLERANCE)
            for scenario in scenarios:
                out.append(_row(label, scenario, compare(before, after, scenario, repeat, tmp_path), repeat, target))
        for scenario in scenarios:
            out.append(_timing_row(scenario, compare(ROOT, ROOT, scenario, repeat, tmp_path, ROOFLINE), repeat))
    return out


def _timing_row(scenario: str, measured, repeat: int) -> Row:
    """This checkout with its scenario's timing (``auto``: measured where the databases cover
    it) against the same scenario with ``serving.timing=roofline``: what the step model itself
    costs per request (longer measured steps finish fewer requests in the same span)."""
    after_s, after, before_s, before = measured
    return Row(f"this checkout, {after.get('timing_source')} vs roofline timing [{scenario}]: sim CPU per request",
               f"{after_s * 1e3:.3f} ms", f"{before_s * 1e3:.3f} ms", after_s / before_s, None,
               f"best of {max(1, repeat)}; {after['requests']:,} vs {before['requests']:,} requests; event loop "
               f"{after['wall_s'] / after['requests'] * 1e3:.3f} vs {before['wall_s'] / before['requests'] * 1e3:.3f} "
               f"ms wall per request")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios: " + ", ".join(SCENARIOS))
    args = parser.parse_args()
    started = time.perf_counter()
    print_table(rows(args.repeat, [s.strip() for s in args.only.split(",") if s.strip()]))
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
