"""One simulated hour of 1,000 concurrent coding agents on a GB300 NVL72 rack with three tiers.

The scenario is ``scenarios/gb300-nvl72-tiers.yaml`` (18 four-GPU instances, HBM + Grace DRAM +
NVMe, prefix-affinity routing) with ``concurrent: 1000`` and ``duration_s: 1h``. Targets: at
most 60 s of wall time and 2 GB peak resident memory (the child process's ``ru_maxrss``), and
time linear in the number of requests: the same rack for 15, 30 and 60 simulated minutes
(1x, 2x, 4x the requests) must cost about the same CPU time per request (per-request cost at
2x and 4x <= 1.25x the cost at 1x; CPU rather than wall because the machine is shared, and the
least of ``--repeat`` runs per duration). Each run is its own process so peak memory is that run's alone.

Measured step timing (the scenario's default, aiconfigurator-core's tables) must cost at most
1.3x the CPU time of the roofline on the same rack hour (``serving.timing=roofline``), both run
here; the one-off table build (cached on disk) is timed apart and left out of the ratio.

    .venv/bin/python bench/bench_rack.py [--agents 1000] [--skip-scaling]
    .venv/bin/python bench/bench_rack.py --child 1000 1h [auto|roofline]   # one run, prints JSON
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

from _common import AGENTSIM_PYTHON, ROOT, Row, print_table

SCENARIO = ROOT / "scenarios" / "gb300-nvl72-tiers.yaml"
WALL_TARGET_S = 60.0
RSS_TARGET_MB = 2048.0
#: Measured timing may cost at most this much more simulation CPU than the roofline.
MEASURED_VS_ROOFLINE_TARGET = 1.3


def child(agents: int, duration: str, timing: str = "auto") -> None:
    from agentsim.engine.loading import load_scenario
    from agentsim.engine.simulation import Simulation
    from agentsim.hardware.timing.select import build_timer

    scenario = load_scenario(SCENARIO, [f"workload.agent_classes.coding.arrival.concurrent={agents}",
                                        f"duration_s={duration}", f"serving.timing={timing}"])
    build_started = time.perf_counter()
    _, choice = build_timer(scenario)  # builds (or loads) the step tables; the run reuses them
    build_s = time.perf_counter() - build_started
    started = time.perf_counter()
    cpu_started = time.process_time()
    result = Simulation(scenario).run()
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"requests": result.summary["requests"], "wall_s": wall, "cpu_s": cpu, "max_rss_mb": rss_mb,
                      "timing_source": choice.source, "timer_build_s": build_s}))


def run(agents: int, duration: str, timing: str = "auto") -> dict:
    done = subprocess.run([str(AGENTSIM_PYTHON), __file__, "--child", str(agents), duration, timing],
                          capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"rack run failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def best_of(agents: int, duration: str, repeat: int, first: dict | None = None) -> dict:
    """The run with the least CPU time of ``repeat`` (``first``, if given, counts as one): CPU
    seconds still move by 30% or more when another job shares the machine's two cores."""
    runs = [first] if first is not None else []
    while len(runs) < max(1, repeat):
        runs.append(run(agents, duration))
    return min(runs, key=lambda r: r["cpu_s"])


def rows(agents: int = 1000, scaling: bool = True, repeat: int = 2) -> list[Row]:
    full = run(agents, "1h")
    out = [
        Row(f"rack 1h, {agents} agents, 3 tiers: wall", f"{full['wall_s']:.1f} s ({full['requests']:,} req)",
            f"{WALL_TARGET_S:.0f} s (bar)", full["wall_s"] / WALL_TARGET_S, ("<=", 1.0),
            f"CPU {full['cpu_s']:.1f} s; {full['requests'] / full['wall_s']:,.0f} sim req per wall s"),
        Row(f"rack 1h, {agents} agents, 3 tiers: peak RSS", f"{full['max_rss_mb']:.0f} MB",
            f"{RSS_TARGET_MB:.0f} MB (bar)", full["max_rss_mb"] / RSS_TARGET_MB, ("<=", 1.0)),
    ]
    roofline = run(agents, "1h", "roofline")
    out.append(Row(f"rack 1h, {agents} agents: CPU with {full['timing_source']} / roofline timing",
                   f"{full['cpu_s']:.1f} s ({full['requests']:,} req)", f"{roofline['cpu_s']:.1f} s ({roofline['requests']:,} req)",
                   full["cpu_s"] / roofline["cpu_s"], ("<=", MEASURED_VS_ROOFLINE_TARGET),
                   f"wall {full['wall_s']:.1f} s vs {roofline['wall_s']:.1f} s; per request "
                   f"{full['cpu_s'] / full['requests'] * 1e3:.2f} vs {roofline['cpu_s'] / roofline['requests'] * 1e3:.2f} ms "
                   f"(measured steps are longer than the roofline's, so fewer requests finish); table build {full['timer_build_s']:.1f} s apart"))
    if scaling:
        # Linearity is judged on CPU seconds per request: wall time on a shared machine also
        # counts other jobs' time slices, which differ from one run to the next.
        quarter = best_of(agents, "15m", repeat)
        half = best_of(agents, "30m", repeat)
        full = best_of(agents, "1h", repeat, first=full)
        per = [r["cpu_s"] / r["requests"] for r in (quarter, half, full)]
        for label, r, p in (("2x", half, per[1]), ("4x", full, per[2])):
            out.append(Row(f"rack CPU per request at {label} / 1x requests",
                           f"{p * 1e3:.2f} ms ({r['requests']:,})", f"{per[0] * 1e3:.2f} ms ({quarter['requests']:,})",
                           p / per[0], ("<=", 1.25)))
        out.append(Row("rack CPU per request at 4x / 2x requests", f"{per[2] * 1e3:.2f} ms",
                       f"{per[1] * 1e3:.2f} ms", per[2] / per[1], ("<=", 1.25)))
    return out


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] == "--child":
        child(int(sys.argv[2]), sys.argv[3], *sys.argv[4:5])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--repeat", type=int, default=2, help="runs per duration for the scaling rows (least CPU kept)")
    args = parser.parse_args()
    print_table(rows(args.agents, not args.skip_scaling, args.repeat))


if __name__ == "__main__":
    main()
