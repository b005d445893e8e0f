"""A sweep's ``metrics:`` checked against the summary keys its runs will have, before any run.

A misspelt metric (``hit_ratioo``) used to be found only after the whole sweep ran, as a
warning. The keys of a run's summary depend on the scenario (tiers, TTL policies, costs,
disaggregation), not on how long it runs, so a run of one simulated millisecond of a cell
(well under a second of wall time, most of it building the cluster; the same probe ``plan``
uses for ``--slo``) tells them. Cells differ in their keys (an axis may turn tiers on), so up to
:data:`MAX_PROBED_CELLS` cells spread over the sweep are probed, stopping as soon as every
requested metric is found.

A metric is refused when neither it nor its first dotted component (``by_agent_class`` of
``by_agent_class.coding.hit_ratio``) is a key of any probed summary: a nested name under a
known key may still appear in a cell that was not probed, and stays a warning after the runs.
Two keys need requests to appear, which a millisecond does not have: ``by_agent_class``
(counted as known when the cell has more than one agent class) and the wall time of the
headroom replay (every wall-clock key counts as known).
"""

from __future__ import annotations

from agentsim.errors import InputError, did_you_mean
from agentsim.experiments.spec import Cell, LoadedSweep
from agentsim.results import WALL_CLOCK_KEYS
from agentsim.config.yaml_paths import locate

#: At most this many cells are run for one simulated millisecond to learn the summary keys.
MAX_PROBED_CELLS = 8

#: The probe's overrides: one simulated millisecond, nothing of it warm-up.
PROBE_OVERRIDES = [("duration_s", "1ms"), ("run.warmup_s", "0s")]


def summary_keys(summary: dict, prefix: str = "") -> set[str]:
    """Every key of ``summary``, nested mappings flattened with dots (as the sweep's table)."""
    keys: set[str] = set()
    for key, value in summary.items():
        name = f"{prefix}{key}"
        keys.add(name)
        if isinstance(value, dict):
            keys |= summary_keys(value, name + ".")
    return keys


def _spread(cells: list[Cell], count: int) -> list[Cell]:
    """``count`` cells evenly spread over ``cells`` (first and last included), in order."""
    if len(cells) <= count:
        return list(cells)
    step = (len(cells) - 1) / (count - 1)
    return [cells[round(i * step)] for i in range(count)]


def check_sweep_metrics(sweep: LoadedSweep, builder, cells: list[Cell], valid: set[int]) -> None:
    """Raise InputError at the sweep file's ``metrics[i]`` line for a requested metric no run of
    this sweep can report (see the module docstring). ``valid``: indices of the cells whose
    scenario is valid (only those are probed); nothing is checked when there is none."""
    from agentsim.engine.simulation import run_scenario

    wanted = list(dict.fromkeys(sweep.spec.metrics))
    known: set[str] = set()
    for cell in _spread([c for c in cells if c.index in valid], MAX_PROBED_CELLS):
        scenario = builder.resolved(list(cell.assignments) + PROBE_OVERRIDES)
        known |= summary_keys(run_scenario(scenario).summary) | set(WALL_CLOCK_KEYS)
        if len(scenario.workload.agent_classes) > 1:
            known.add("by_agent_class")
        if all(metric in known for metric in wanted):
            return
    if not known:
        return
    for index, metric in enumerate(sweep.spec.metrics):
        if metric in known or metric.split(".", 1)[0] in known:
            continue
        raise InputError(f"unknown metric {metric!r}{did_you_mean(metric, sorted(known))}: no summary of this "
                         "sweep's runs has this key (see docs/metrics.md; a run's summary.json lists them)",
                         sweep.source, locate(sweep.lines, ("metrics", index)))
