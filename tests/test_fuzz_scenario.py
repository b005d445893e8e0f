"""Fuzzing the scenario loader: any document gives a Scenario or an InputError, never another
exception (a traceback in the CLI). Inputs: random YAML documents, random edits of the shipped
scenarios (values replaced, keys renamed or dropped), random line-level damage to their text,
and random ``--set`` overrides."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentsim.config.loader import apply_overrides, read_yaml
from agentsim.engine.loading import load_scenario, scenario_from_dict
from agentsim.config.scenario import Scenario
from agentsim.errors import InputError
from tests.conftest import ROOT

SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
FUZZ = settings(max_examples=int(__import__("os").environ.get("AGENTSIM_FUZZ_EXAMPLES", "80")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])

# Leaves a scenario might plausibly hold, and the kinds of garbage a user might write instead.
UNITS = ["", "GB", "GiB", "TB", "MB", "s", "ms", "us", "m", "h", "GB/s", "parsecs", "%"]
numbers = st.one_of(st.integers(-10**12, 10**12), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0, -1, 1, 0.5, 1e-9, 1e30]))
unit_strings = st.builds(lambda n, u: f"{n}{u}", st.one_of(st.integers(-1000, 10**6), st.floats(-1e6, 1e6)),
                         st.sampled_from(UNITS))
names = st.sampled_from(["lru", "fifo", "s3fifo", "ttl_5m", "lruu", "", "least_loaded", "poisson", "population",
                         "lognormal", "fit", "constant", "dram", "disk", "write_back", "cost_model"])
scalars = st.one_of(st.none(), st.booleans(), numbers, unit_strings, names, st.text(max_size=12))
KEYS = ["name", "seed", "duration_s", "hardware", "model", "cache", "serving", "workload", "slo", "run", "profile",
        "eviction", "params", "tiers", "dram", "disk", "agent_classes", "arrival", "kind", "concurrent", "dist",
        "median", "sigma", "fit", "min", "max", "round", "block_tokens", "kv_capacity_bytes", "instances"]
keys = st.one_of(st.sampled_from(KEYS), st.text(min_size=1, max_size=10))
documents = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(keys, inner, max_size=6)),
                         max_leaves=30)


def _load_text(path: Path, text: str):
    path.write_text(text)
    try:
        return load_scenario(path)
    except InputError as error:
        assert error.source and str(path) in error.render()
        return error


@given(doc=documents)
@FUZZ
def test_random_yaml_documents(tmp_path, doc):
    result = _load_text(tmp_path / "doc.yaml", yaml.safe_dump(doc))
    assert isinstance(result, (Scenario, InputError))


@given(text=st.text(alphabet=st.sampled_from(list("abc:-[]{}#&*!|>'\"%@`,? \n\t0123456789.")), max_size=200))
@FUZZ
def test_random_yaml_text(tmp_path, text):
    result = _load_text(tmp_path / "text.yaml", text)
    assert isinstance(result, (Scenario, InputError))


def _paths(node, path=()):
    """Every (path, value) in a parsed document."""
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, path + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, path + (index,))


def _parent(data, path):
    for part in path[:-1]:
        data = data[part]
    return data


@pytest.fixture(scope="module", params=SCENARIOS, ids=[p.stem for p in SCENARIOS])
def shipped(request):
    data, lines = read_yaml(request.param)
    return request.param, data, lines


@given(choice=st.data())
@FUZZ
def test_random_edits_of_shipped_scenarios(shipped, choice):
    path, data, lines = shipped
    data = copy.deepcopy(data)
    for _ in range(choice.draw(st.integers(1, 3), label="edits")):
        targets = [p for p, _ in _paths(data) if p]
        if not targets:
            break
        target = choice.draw(st.sampled_from(targets), label="path")
        parent = _parent(data, target)
        action = choice.draw(st.sampled_from(["replace", "delete", "rename"]), label="action")
        if action == "replace":
            parent[target[-1]] = choice.draw(documents, label="value")
        elif action == "delete":
            del parent[target[-1]]
        elif isinstance(parent, dict):
            parent[choice.draw(keys, label="new key")] = parent.pop(target[-1])
    try:
        scenario = scenario_from_dict(data, source=str(path), lines=lines, base_dir=path.parent)
    except InputError as error:
        assert str(path) in error.render()
        return
    assert isinstance(scenario, Scenario)
    # A scenario that validates has sane derived quantities.
    assert scenario.kv_capacity_blocks_per_instance() >= 1
    assert math.isfinite(scenario.duration_s) and scenario.duration_s > 0


@given(choice=st.data())
@FUZZ
def test_random_line_damage_of_shipped_scenarios(tmp_path, choice):
    source = choice.draw(st.sampled_from(SCENARIOS), label="scenario")
    lines = source.read_text().splitlines(keepends=True)
    for _ in range(choice.draw(st.integers(1, 3), label="edits")):
        if not lines:
            break
        i = choice.draw(st.integers(0, len(lines) - 1), label="line")
        action = choice.draw(st.sampled_from(["delete", "duplicate", "truncate", "indent", "dedent", "swap"]),
                             label="action")
        if action == "delete":
            del lines[i]
        elif action == "duplicate":
            lines.insert(i, lines[i])
        elif action == "truncate":
            lines[i] = lines[i][:choice.draw(st.integers(0, len(lines[i])), label="cut")] + "\n"
        elif action == "indent":
            lines[i] = "  " + lines[i]
        elif action == "dedent":
            lines[i] = lines[i].lstrip()
        elif i + 1 < len(lines):
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
    # Same directory depth as scenarios/, so the shipped fit references (../fits/...) resolve.
    (tmp_path / "scenarios").mkdir(exist_ok=True)
    fits = tmp_path / "fits"
    if not fits.exists():
        fits.symlink_to(ROOT / "fits")
    result = _load_text(tmp_path / "scenarios" / source.name, "".join(lines))
    assert isinstance(result, (Scenario, InputError))


override_paths = st.lists(st.one_of(st.sampled_from(KEYS), st.sampled_from(["0", "1", "-1", "x"])), min_size=1, max_size=5)
override_values = st.one_of(st.sampled_from(["", "1", "-1", "3GB", "lru", "[1, 2]", "{a: 1}", "null", "true", "[", "{{",
                                             "1e400", ".nan", "!!python/object:os.system x"]),
                            st.text(max_size=10))


@given(parts=override_paths, value=override_values, raw=st.text(max_size=20))
@FUZZ
def test_random_set_overrides(parts, value, raw):
    path = ROOT / "scenarios" / "coding-agents.yaml"
    for override in (".".join(parts) + "=" + value, raw):
        try:
            scenario = load_scenario(path, [override])
        except InputError as error:
            assert error.render()
            continue
        assert isinstance(scenario, Scenario)


def test_apply_overrides_never_mutates_the_input():
    data = {"cache": {"eviction": "lru"}}
    out = apply_overrides(data, ["cache.eviction.params.x=1"])
    assert data == {"cache": {"eviction": "lru"}} and out["cache"]["eviction"] == {"name": "lru", "params": {"x": 1}}
