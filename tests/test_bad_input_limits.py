"""The bad-input catalogue, continued: limits, special files, non-finite and negative numbers.

Inputs that used to hang, exhaust memory or run silently with a clamped value. Same harness and
requirements as :mod:`tests.test_bad_input_catalogue` (exit 2, one ``error:`` line naming the file
and line, no traceback, nothing on disk changed), plus a wall-time bound: none of these may take
more than a few seconds, since each used to hang or allocate gigabytes. The ids are listed in
docs/errors.md like the others.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.test_bad_input_catalogue import case_registrar, check_refused, BASE, FITS, Case, _line_of, _mutated, _run, _scenario

CASES: list[Case] = []

#: Wall seconds a refused input may take (subprocess start included, on a loaded machine).
#: The inputs below used to take minutes or never finish.
MAX_WALL_S = 60.0
#: Address space each refusal runs in: a scenario whose state would need more than this must be
#: refused before it is allocated (issue #20), so an allocation past it fails the case with a
#: MemoryError traceback. A small run needs under 1 GB of address space.
MAX_MEMORY_BYTES = 2 * 2**30


case = case_registrar(CASES)


def _scenario_case(id: str, old: str, new: str, fragments: list[str], *marks):
    def build(tmp: Path):
        path, line = _mutated(tmp, old, new)
        return _run(tmp, path), [str(path), f"line {line}", *fragments]
    CASES.append(Case(id, build, list(marks)))


POISSON = "arrival: {kind: population, concurrent: 4, ramp_s: 10s}"

# --- sizes checked against limits before anything is allocated -----------------------------------
_scenario_case("scenario-too-many-instances", "instances: 1", "instances: 10000000",
               ["hardware.instances", "exceed the limit", "limits.max_instances"])
_scenario_case("scenario-too-many-sessions", "concurrent: 4,", "concurrent: 1000000000,",
               ["arrival.concurrent", "exceed the limit", "limits.max_concurrent_sessions"])
_scenario_case("scenario-poisson-rate-huge", POISSON, "arrival: {kind: poisson, rate_per_s: 1e308}",
               ["arrival.rate_per_s", "limits.max_expected_sessions"])
_scenario_case("scenario-disaggregated-workers-huge", "  router: least_loaded\n",
               "  disaggregation: {prefill: {workers: 10000000}, decode: {workers: 2}}\n  router: least_loaded\n",
               ["serving.disaggregation.prefill.workers", "10,000,000 prefill + 2 decode workers",
                "limits.max_instances"])


@case("scenario-sessions-of-classes-add-up")
def _classes_add_up(tmp):
    # Each class below the limit, both together above it: the limit is on the sum.
    text = BASE.replace("concurrent: 4,", "concurrent: 600000,", 1).replace(
        "    coding:\n", "    chat:\n      arrival: {kind: population, concurrent: 500000}\n    coding:\n", 1)
    path = _scenario(tmp, text)
    line = _line_of(text, "concurrent: 600000")
    return _run(tmp, path), [str(path), f"line {line}", "workload.agent_classes.coding.arrival.concurrent",
                             "1,100,000 concurrent sessions exceed the limit", "limits.max_concurrent_sessions"]

_scenario_case("scenario-duration-huge", "duration_s: 2m", "duration_s: 1e308",
               ["duration_s", "limits.max_duration_s"])
# --- numbers that must be finite -----------------------------------------------------------------
_scenario_case("scenario-rate-infinite", POISSON, "arrival: {kind: poisson, rate_per_s: .inf}",
               ["arrival.rate_per_s", "finite number"])
_scenario_case("scenario-model-coefficient-infinite", "  profile: deepseek_v3", "  attn_coeff: .inf\n  profile: deepseek_v3",
               ["model.attn_coeff", "finite number"])
_scenario_case("scenario-distribution-nan", "human_gap_s: {dist: exponential, mean: 30}",
               "human_gap_s: {dist: exponential, mean: .nan}", ["human_gap_s", "finite number"])
_scenario_case("scenario-distribution-infinite-mean", "human_gap_s: {dist: exponential, mean: 30}",
               "human_gap_s: {dist: exponential, mean: .inf}", ["human_gap_s", "finite number"])
_scenario_case("scenario-distribution-nan-bound", "calls_per_session: {dist: lognormal, median: 6, sigma: 0.5, min: 1,",
               "calls_per_session: {dist: lognormal, median: 6, sigma: 0.5, min: .nan,",
               ["calls_per_session", "finite number"])
# --- values that cannot be negative (used to be clipped silently) --------------------------------
_scenario_case("scenario-negative-drain-limit", "duration_s: 2m", "limits: {max_drain_s: -1s}\nduration_s: 2m",
               ["limits.max_drain_s", "greater than or equal to 0"])
_scenario_case("scenario-negative-tier-price", "dram: {capacity_bytes: 20GB, eviction: lru, write_policy: write_back}",
               "dram: {capacity_bytes: 20GB, eviction: lru, write_policy: write_back, usd_per_gb_month: -0.5}",
               ["cache.tiers.dram.usd_per_gb_month", "greater than or equal to 0"])
_scenario_case("scenario-negative-gap", "human_gap_s: {dist: exponential, mean: 30}", "human_gap_s: -5",
               ["human_gap_s", "must be >= 0", "-5"])
_scenario_case("scenario-negative-tokens", "output_tokens: {dist: lognormal, median: 150, sigma: 0.7, min: 1, round: true}",
               "output_tokens: -50", ["output_tokens", "must be >= 0"])
_scenario_case("scenario-distribution-negative-loc", "human_gap_s: {dist: exponential, mean: 30}",
               "human_gap_s: {dist: lognormal, median: 5, sigma: 1, loc: -1e5}",
               ["human_gap_s", "must be >= 0", "add min: 0"])
# --- keys that would be ignored ------------------------------------------------------------------
_scenario_case("scenario-arrival-key-of-other-kind", POISSON, "arrival: {kind: poisson, rate_per_s: 0.5, concurrent: 40}",
               ["arrival.concurrent", "belongs to a population arrival", "kind poisson"])
# --- a size in bits (an eighth of what was meant, silently) ---------------------------------------
_scenario_case("scenario-size-in-bits", "kv_capacity_bytes: 6GB", "kv_capacity_bytes: 48Gb",
               ["hardware.kv_capacity_bytes", "is in bits", "48GB"])
# --- capacities the hardware does not have -------------------------------------------------------
_scenario_case("scenario-tier-exceeds-hardware", "disk: {capacity_bytes: 100GB", "disk: {capacity_bytes: 1000TB",
               ["cache.tiers.disk.capacity_bytes", "1000 TB per instance exceed what the hardware has"])


# --- YAML that stands for far more than its text ----------------------------------------------------
@case("scenario-yaml-alias-bomb")
def _alias_bomb(tmp):
    levels = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for depth in range(1, 9):
        refs = ", ".join([f"*a{depth - 1}"] * 10)
        levels.append(f"a{depth}: &a{depth} [{refs}]")
    path = _scenario(tmp, BASE + "bomb:\n" + "".join(f"  {level}\n" for level in levels))
    return _run(tmp, path), [str(path), "line ", "more than 200,000 nodes", "AGENTSIM_MAX_YAML_NODES"]


@case("scenario-yaml-recursive-alias")
def _recursive_alias(tmp):
    path = _scenario(tmp, BASE + "loop: &loop [1, *loop]\n")
    return _run(tmp, path), [str(path), f"line {BASE.count(chr(10)) + 1}", "recursive YAML alias"]


@case("scenario-null-key")
def _null_key(tmp):
    path, line = _mutated(tmp, "  instances: 1\n", "  instances: 1\n  ~: 2\n")
    return _run(tmp, path), [str(path), f"line {line + 1}", "a key must be a name"]


@case("scenario-nul-byte")
def _nul_byte(tmp):
    line = _line_of(BASE, "serving:")
    path = tmp / "bad.yaml"
    path.write_bytes(BASE.replace("serving:", "serv\x00ing:", 1).encode())
    return _run(tmp, path), [str(path), f"line {line}", "NUL byte"]


# --- paths that are not regular files of a sane size ---------------------------------------------
@case("scenario-named-pipe")
def _named_pipe(tmp):
    path = tmp / "scenario.fifo"
    os.mkfifo(path)
    return _run(tmp, path), [str(path), "named pipe"]


@case("scenario-device")
def _device(tmp):
    return _run(tmp, Path("/dev/zero")), ["/dev/zero", "character device"]


@case("scenario-too-large")
def _too_large(tmp):
    path = tmp / "huge.yaml"
    path.write_text(BASE + "# " + "x" * (17 * 2**20) + "\n")
    return _run(tmp, path), [str(path), "input limit", "AGENTSIM_MAX_INPUT_BYTES"]


@case("trace-named-pipe")
def _trace_pipe(tmp):
    path = tmp / "trace.jsonl"
    os.mkfifo(path)
    return ["replay", str(path), "--json", "--format", "mooncake"], [str(path), "named pipe"]


@case("trace-nested-too-deeply")
def _trace_deep(tmp):
    path = tmp / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [0]}\n'
                    + "[" * 200_000 + "]" * 200_000 + "\n")
    return ["replay", str(path), "--json", "--format", "mooncake"], [str(path), "line 2", "nested too deeply"]


def _fit_case(id: str, make_target, fragments: list[str]):
    """A ``fit:`` reference to something that is not a fit file: blamed on the reference's line."""
    def build(tmp: Path):
        target = make_target(tmp)
        path, line = _mutated(tmp, f"{FITS}#tool_gap", f"{target}#tool_gap")
        return _run(tmp, path), [str(path), f"line {line}", "tool_gap_s.fit", *fragments]
    CASES.append(Case(id, build))


def _binary_fit(tmp: Path) -> Path:
    path = tmp / "fit.yaml"
    path.write_bytes(bytes(range(256)) * 8)
    return path


def _fit_dir(tmp: Path) -> Path:
    path = tmp / "fits.d"
    path.mkdir()
    return path


_fit_case("scenario-fit-reference-binary", _binary_fit, ["fit file", "cannot read file"])
_fit_case("scenario-fit-reference-directory", _fit_dir, ["fit file", "directory"])
_fit_case("scenario-fit-reference-device", lambda tmp: Path("/dev/zero"), ["fit file", "character device"])


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_bad_input(case: Case, tmp_path: Path):
    tmp, wall_s = check_refused(case, tmp_path, max_memory_bytes=MAX_MEMORY_BYTES)
    assert wall_s < MAX_WALL_S, f"took {wall_s:.1f} s"
