"""Load a scenario: the composition root's entry point for every caller (CLI, sweeps, replays,
notebooks, tests).

``config/`` parses and validates the pydantic models and imports nothing above it; this module
adds the two steps that need the layers above: hardware and model profiles come from
:mod:`agentsim.hardware.profiles`, and every registered name (eviction and admission policies,
tier policies, load rule, router) plus the hardware-dependent tier checks are verified by
:mod:`agentsim.engine.checks`. So a misspelt policy is still reported with its YAML line at
load time, not as a KeyError deep in a run; so are the names that select measured timing
(:mod:`agentsim.engine.timing_name_checks`). A ``fit:`` file not found next to the scenario is
looked up among the packaged fits (:mod:`agentsim.examples`).
"""

from __future__ import annotations

from pathlib import Path

from agentsim.config.loader import read_scenario, validate_scenario
from agentsim.config.scenario import Scenario
from agentsim.engine.checks import check_components, check_policies
from agentsim.engine.timing_name_checks import check_timing_names
from agentsim.examples import packaged_fits_dir
from agentsim.hardware.profiles import load_catalogue


def load_scenario(path: str | Path, overrides: list[str] | None = None, seed: int | None = None) -> Scenario:
    """Read, override, resolve, validate and check a scenario. Raises InputError on any problem."""
    path = Path(path)
    data, lines = read_scenario(path, overrides, seed)
    return scenario_from_dict(data, source=str(path), lines=lines, base_dir=path.parent)


def scenario_from_dict(data: dict, source: str = "<scenario>", lines: dict | None = None,
                       base_dir: Path | None = None) -> Scenario:
    """Validate and check an already-parsed scenario mapping (profiles and fit references resolved)."""
    lines = lines or {}
    fits = packaged_fits_dir()
    scenario = validate_scenario(data, source, lines, base_dir, load_catalogue, [fits] if fits else [])
    check_policies(scenario, source, lines)
    check_components(scenario, source, lines)
    check_timing_names(scenario, source, lines)
    return scenario
