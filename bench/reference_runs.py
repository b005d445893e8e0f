"""Reference runs for behaviour-identical refactors: run a fixed set of short scenarios and
replays into a directory, then compare two such directories result by result.

    .venv/bin/python bench/reference_runs.py run OUT_DIR [--only NAME,...] [--src CHECKOUT]
    .venv/bin/python bench/reference_runs.py compare BEFORE_DIR AFTER_DIR

``run`` writes one sub-directory per reference run (the default scenario, the GB300 tiers
scenario, both TTL scenarios, a Mooncake open-loop and a WEKA closed-loop replay, all shortened
with ``--set`` or trace options, and a cache-only Mooncake replay of every registered eviction
policy at one capacity). ``compare`` checks that ``summary.json`` (minus wall-clock keys) and
every Parquet table are identical in both directories and exits 1 listing the differences.
A refactor that changes nothing must leave ``compare`` silent; rerun ``run`` after each step.

The runs go through the ``agentsim`` command line (one process each) so that the comparison
covers exactly what a user gets, start-up and persistence included. ``--src`` runs another
checkout's code and scenarios with this checkout's environment (for the "before" side, e.g. a
``git archive`` of the commit before a refactor).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
MOONCAKE = DATA / "mooncake" / "conversation_trace.jsonl.gz"
WEKA = DATA / "weka-claude-code"

# Keys that measure the machine rather than the simulation.
WALL_KEY_PARTS = ("wall", "elapsed", "load_time_s", "replay_time_s", "runtime_s", "events_per_s", "trace")

SCENARIO_RUNS = {
    "coding-agents": ["run", "scenarios/coding-agents.yaml"],
    "gb300-tiers": ["run", "scenarios/gb300-nvl72-tiers.yaml", "--set", "duration_s=5m"],
    "ttl-bound": ["run", "scenarios/ttl-bound.yaml"],
    "ttl-capacity-bound": ["run", "scenarios/ttl-capacity-bound.yaml"],
}
REPLAY_RUNS = {
    "mooncake-open-loop": ["replay", str(MOONCAKE), "--mode", "open-loop", "--capacity-fraction", "0.1",
                           "--set", "duration_s=5m"],
    "weka-closed-loop": ["replay", str(WEKA), "--mode", "closed-loop", "--session-offset", "30",
                         "--set", "duration_s=5m"],
}


PYTHON = str(ROOT / ".venv" / "bin" / "python")
CLI = "import sys; from agentsim.cli import main; sys.exit(main())"


def _env(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src)}


def _policies(src: Path) -> list[str]:
    out = subprocess.run([PYTHON, "-c", "from agentsim.cache.policies import EVICTION_POLICIES;"
                          "print('\\n'.join(EVICTION_POLICIES.names()))"],
                         cwd=src, env=_env(src), check=True, capture_output=True, text=True)
    return out.stdout.split()


def all_runs(src: Path) -> dict[str, list[str]]:
    runs = {**SCENARIO_RUNS, **REPLAY_RUNS}
    for policy in _policies(src):
        runs[f"cache-only-{policy}"] = ["replay", str(MOONCAKE), "--policy", policy, "--capacity-fraction", "0.1",
                                        "--json"]
    return runs


def run(out_dir: Path, only: list[str] | None, src: Path = ROOT) -> None:
    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, args in all_runs(src).items():
        if only and name not in only:
            continue
        target = out_dir / name
        cmd = [PYTHON, "-c", CLI, *args, "--out", str(target), "--force"]
        print(f"[ref] {name}", file=sys.stderr, flush=True)
        proc = subprocess.run(cmd, cwd=src, env=_env(src), capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"{name} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")


def _strip_wall(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if not any(part in k for part in WALL_KEY_PARTS)}


def compare(before: Path, after: Path) -> list[str]:
    problems: list[str] = []
    names = sorted({p.name for p in before.iterdir() if p.is_dir()} | {p.name for p in after.iterdir() if p.is_dir()})
    for name in names:
        a, b = before / name, after / name
        if not a.is_dir() or not b.is_dir():
            problems.append(f"{name}: present in only one directory")
            continue
        sa = _strip_wall(json.loads((a / "summary.json").read_text()))
        sb = _strip_wall(json.loads((b / "summary.json").read_text()))
        for key in sorted(set(sa) | set(sb)):
            if sa.get(key, "<absent>") != sb.get(key, "<absent>"):
                problems.append(f"{name}/summary.json: {key}: {sa.get(key, '<absent>')!r} != {sb.get(key, '<absent>')!r}")
        tables = sorted({p.name for p in a.glob("*.parquet")} | {p.name for p in b.glob("*.parquet")})
        for table in tables:
            if not (a / table).exists() or not (b / table).exists():
                problems.append(f"{name}/{table}: present in only one run")
                continue
            ta, tb = pd.read_parquet(a / table), pd.read_parquet(b / table)
            if not ta.equals(tb):
                detail = f"shape {ta.shape} vs {tb.shape}" if ta.shape != tb.shape else "values differ"
                if list(ta.columns) != list(tb.columns):
                    detail = f"columns {list(ta.columns)} vs {list(tb.columns)}"
                problems.append(f"{name}/{table}: {detail}")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run")
    p_run.add_argument("out_dir", type=Path)
    p_run.add_argument("--only", default="", help="comma-separated run names")
    p_run.add_argument("--src", type=Path, default=ROOT, help="checkout whose code and scenarios to run")
    p_cmp = sub.add_parser("compare")
    p_cmp.add_argument("before", type=Path)
    p_cmp.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "run":
        run(args.out_dir, [n for n in args.only.split(",") if n] or None, args.src.resolve())
    else:
        problems = compare(args.before, args.after)
        for line in problems:
            print(line)
        runs = len([p for p in args.before.iterdir() if p.is_dir()])
        print(f"{runs} reference runs compared: {'identical' if not problems else f'{len(problems)} differences'}")
        sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
