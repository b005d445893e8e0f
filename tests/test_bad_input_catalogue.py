"""The bad-input catalogue (docs/errors.md): every kind of bad input, through the real CLI.

Each case builds its input in a temporary directory, runs ``agentsim`` in a subprocess (as a
user would) and requires:

* exit code 2;
* exactly one line on stderr, starting ``error:``, naming the file (or ``--set`` / the option)
  and, where the input has structure, the line and/or YAML path, plus the case's own fragments;
* no traceback;
* nothing already written lost or overwritten: every file under the temporary directory
  (including a previous run's results in ``--out``) has the same bytes afterwards, and no new
  file appeared.

Case ids are the catalogue's names; docs/errors.md lists the same ids, and
:func:`test_catalogue_is_documented` keeps the two in step (with the cases of
:mod:`tests.test_bad_input_limits` and :mod:`tests.test_bad_input_outputs`, its continuations).
"""

from __future__ import annotations

import gzip
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from tests.conftest import ROOT, run_cli

FITS = ROOT / "fits" / "claude-code.yaml"
FIXTURES = ROOT / "tests" / "fixtures" / "traces"

# A small complete scenario (lines matter: cases name them). Line numbers are 1-based.
BASE = f"""\
name: catalogue
seed: 3
duration_s: 2m
hardware:
  profile: gb300_nvl72
  gpus_per_instance: 4
  instances: 1
  kv_capacity_bytes: 6GB
model:
  profile: deepseek_v3
cache:
  block_tokens: 64
  eviction: lru
  tiers:
    dram: {{capacity_bytes: 20GB, eviction: lru, write_policy: write_back}}
    disk: {{capacity_bytes: 100GB, eviction: lru, write_policy: write_back}}
    load_rule: cost_model
serving:
  max_batch_requests: 16
  prefill_chunk_tokens: 4096
  router: least_loaded
workload:
  global_system_prompt_tokens: 1000
  agent_classes:
    coding:
      arrival: {{kind: population, concurrent: 4, ramp_s: 10s}}
      tools_prefix_tokens: 4000
      initial_context_tokens: {{dist: lognormal, median: 1500, sigma: 0.5, round: true}}
      calls_per_session: {{dist: lognormal, median: 6, sigma: 0.5, min: 1, round: true}}
      tool_gap_s: {{fit: {FITS}#tool_gap, max: 600}}
      human_turn_probability: 0.1
      human_gap_s: {{dist: exponential, mean: 30}}
      appended_tokens: {{dist: lognormal, median: 800, sigma: 0.8, round: true}}
      output_tokens: {{dist: lognormal, median: 150, sigma: 0.7, min: 1, round: true}}
      compaction: {{trigger_tokens: 100000, keep_tokens: 20000}}
slo: {{ttft_s: 2s, tpot_s: 100ms}}
"""


def _line_of(text: str, needle: str) -> int:
    first = needle.strip("\n").splitlines()[0]
    for number, line in enumerate(text.splitlines(), 1):
        if first in line:
            return number
    raise AssertionError(f"{needle!r} not in the base scenario")


@dataclass
class Case:
    """One kind of bad input. ``build(tmp)`` writes the input and returns (argv, fragments)."""

    id: str
    build: Callable[[Path], tuple[list[str], list[str]]]
    marks: list = field(default_factory=list)


CASES: list[Case] = []


def case_registrar(cases: list[Case]):
    """``@case(id, *marks)`` appending a case built by the decorated function to ``cases``."""
    def case(id: str, *marks):
        def register(build):
            cases.append(Case(id, build, list(marks)))
            return build
        return register
    return case


case = case_registrar(CASES)


def _scenario(tmp: Path, text: str, name: str = "bad.yaml") -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def _run(tmp: Path, path: Path) -> list[str]:
    """``run`` with an output directory that already holds someone's notes (must survive)."""
    return ["run", str(path), "--out", str(tmp / "out"), "--quiet"]


def _mutated(tmp: Path, old: str, new: str) -> tuple[Path, int]:
    assert old in BASE, old
    line = _line_of(BASE, old)
    return _scenario(tmp, BASE.replace(old, new, 1)), line


def _scenario_case(id: str, old: str, new: str, fragments: list[str], *marks):
    """A mutation of BASE; the message must name the file, the mutated line and ``fragments``."""
    def build(tmp: Path):
        path, line = _mutated(tmp, old, new)
        return _run(tmp, path), [str(path), f"line {line}", *fragments]
    CASES.append(Case(id, build, list(marks)))


# --- scenario files ----------------------------------------------------------------------------
_scenario_case("scenario-unknown-key", "block_tokens: 64", "block_tokenz: 64",
               ["cache.block_tokenz", "unknown key 'block_tokenz'", "did you mean 'block_tokens'"])
_scenario_case("scenario-unknown-key-nested", "tools_prefix_tokens: 4000", "tool_prefix_tokens: 4000",
               ["workload.agent_classes.coding.tool_prefix_tokens", "did you mean 'tools_prefix_tokens'"])
_scenario_case("scenario-misspelt-required-key", "duration_s: 2m", "durration_s: 2m",
               ["durration_s", "unknown key 'durration_s'", "did you mean 'duration_s'"])
_scenario_case("scenario-kv-exceeds-hbm", "kv_capacity_bytes: 6GB", "kv_capacity_bytes: 5000GB",
               ["hardware.kv_capacity_bytes", "5000 GB of KV exceeds the instance's HBM"])
_scenario_case("scenario-kv-below-one-block", "kv_capacity_bytes: 6GB", "kv_capacity_bytes: 1KB",
               ["hardware.kv_capacity_bytes", "smaller than one block"])
_scenario_case("scenario-wrong-type", "instances: 1", "instances: many",
               ["hardware.instances", "'many'"])
_scenario_case("scenario-section-not-mapping", "slo: {ttft_s: 2s, tpot_s: 100ms}", "slo: fast",
               ["slo", "'fast'"])
_scenario_case("scenario-bad-unit", "kv_capacity_bytes: 6GB", "kv_capacity_bytes: 6 parsecs",
               ["hardware.kv_capacity_bytes", "parsecs"])
_scenario_case("scenario-unit-of-wrong-kind", "duration_s: 2m", "duration_s: 2GB",
               ["duration_s", "2GB"])
_scenario_case("scenario-zero-size", "block_tokens: 64", "block_tokens: 0",
               ["cache.block_tokens", "greater than 0"])
_scenario_case("scenario-negative-size", "kv_capacity_bytes: 6GB", "kv_capacity_bytes: -6GB",
               ["hardware.kv_capacity_bytes", "greater than 0"])
_scenario_case("scenario-zero-tier-capacity", "capacity_bytes: 20GB", "capacity_bytes: 0GB",
               ["cache.tiers.dram.capacity_bytes", "greater than 0"])
_scenario_case("scenario-unknown-policy", "  eviction: lru\n", "  eviction: lruu\n",
               ["cache.eviction.name", "unknown eviction policy 'lruu'", "did you mean 'lru'"])
_scenario_case("scenario-unknown-tier-policy", "dram: {capacity_bytes: 20GB, eviction: lru,",
               "dram: {capacity_bytes: 20GB, eviction: lfru,",
               ["cache.tiers.dram.eviction.name", "'lfru'"])
_scenario_case("scenario-flat-policy-in-a-tier", "dram: {capacity_bytes: 20GB, eviction: lru,",
               "dram: {capacity_bytes: 20GB, eviction: vllm_lru,",
               ["cache.tiers.dram.eviction", "tree_mode 'flat'", "tree_mode: leaf_only"])
_scenario_case("scenario-invalid-policy-param", "  eviction: lru\n",
               "  eviction: {name: s3fifo, params: {small_ratio: 1.5}}\n",
               ["cache.eviction.params.small_ratio"])
_scenario_case("scenario-unknown-policy-param", "  eviction: lru\n",
               "  eviction: {name: slru, params: {protected_fractoin: 0.5}}\n",
               ["cache.eviction.params.protected_fractoin", "did you mean 'protected_fraction'"])
_scenario_case("scenario-unknown-router", "router: least_loaded", "router: least_load",
               ["serving.router", "'least_load'"])
_scenario_case("scenario-retired-router", "router: least_loaded", "router: prefix_affinity",
               ["serving.router", "retired into 'kv_aware'"])
_scenario_case("scenario-racks-uneven", "instances: 1", "racks: 2",
               ["hardware.racks", "1 instance does not split evenly between 2 racks"])
_scenario_case("scenario-unknown-prefill-ahead", "  prefill_chunk_tokens: 4096", "  prefill_ahead: streamd",
               ["serving.prefill_ahead", "unknown prefill-ahead mechanism 'streamd'", "did you mean 'streamed'"])
_scenario_case("tier-shared-local", "dram: {capacity_bytes: 20GB, eviction: lru, write_policy: write_back}",
               "dram: {capacity_bytes: 20GB, eviction: lru, write_policy: write_back, shared: true}",
               ["cache.tiers.dram.shared", "shared applies to the remote tier only, not dram"])
_scenario_case("scenario-unknown-load-rule", "load_rule: cost_model", "load_rule: cheapest",
               ["cache.tiers.load_rule", "'cheapest'"])
_scenario_case("scenario-unknown-distribution", "human_gap_s: {dist: exponential, mean: 30}",
               "human_gap_s: {dist: exponentail, mean: 30}",
               ["human_gap_s", "exponentail"])
_scenario_case("scenario-invalid-distribution-param", "human_gap_s: {dist: exponential, mean: 30}",
               "human_gap_s: {dist: exponential, mean: -30}",
               ["human_gap_s.mean", "greater than 0"])
_scenario_case("scenario-fit-file-missing", f"{FITS}#tool_gap", f"{FITS.parent}/nope.yaml#tool_gap",
               ["tool_gap_s.fit", "nope.yaml", "not found"])
_scenario_case("scenario-fit-fragment-missing", f"{FITS}#tool_gap", f"{FITS}#tool_gapp",
               ["tool_gap_s.fit", "no quantity 'tool_gapp'"])
_scenario_case("scenario-fit-reference-malformed", f"{FITS}#tool_gap", f"{FITS}",
               ["tool_gap_s.fit", "FILE.yaml#quantity"])
_scenario_case("scenario-inconsistent-values", "compaction: {trigger_tokens: 100000, keep_tokens: 20000}",
               "compaction: {trigger_tokens: 100000, keep_tokens: 200000}",
               ["compaction", "keep_tokens must be smaller than trigger_tokens"])
_scenario_case("scenario-unknown-profile", "profile: deepseek_v3", "profile: deepseek_v4",
               ["model.profile", "unknown model profile 'deepseek_v4'"])
_scenario_case("scenario-duplicate-key", "  instances: 1\n", "  instances: 1\n  instances: 2\n",
               ["hardware.instances", "duplicate key"])
# Tier order and links (``cache.tiers.order``, ``cache.tiers.links``): checked once the schema
# has them; before that a scenario naming them gets "unknown key" and these cases xfail.
def _tiers_field(name: str) -> bool:
    from agentsim.config.scenario import TiersConfig
    return name in TiersConfig.model_fields


_scenario_case("scenario-tiers-wrong-order", "    dram: {capacity_bytes: 20GB",
               "    order: [disk, dram]\n    dram: {capacity_bytes: 20GB",
               ["cache.tiers.order", "wrong order", "disk", "dram"],
               pytest.mark.xfail(not _tiers_field("order"), reason="the tiers config has no order yet", strict=True))
_scenario_case("scenario-link-unknown-tier", "    load_rule: cost_model",
               "    links: [{from: dram, to: tape, bandwidth_bytes_per_s: 1GB/s}]\n    load_rule: cost_model",
               ["cache.tiers.links[0]", "unknown tier 'tape'"],
               pytest.mark.xfail(not _tiers_field("links"), reason="the tiers config has no links yet", strict=True))


@case("scenario-missing-required")
def _missing_required(tmp):
    text = BASE[:BASE.index("workload:")] + "slo: {ttft_s: 2s}\n"
    path = _scenario(tmp, text)
    return _run(tmp, path), [str(path), "missing required key 'workload'"]


@case("scenario-empty-file")
def _empty(tmp):
    path = _scenario(tmp, "# nothing but a comment\n")
    return _run(tmp, path), [str(path), "file is empty"]


@case("scenario-yaml-syntax-error")
def _yaml_syntax(tmp):
    path, line = _mutated(tmp, "  router: least_loaded", "  router: [least_loaded")
    return _run(tmp, path), [str(path), "YAML syntax error", "line "]


@case("scenario-not-a-mapping")
def _not_mapping(tmp):
    path = _scenario(tmp, "- name: a\n- name: b\n")
    return _run(tmp, path), [str(path), "line 1", "must be a mapping"]


@case("scenario-not-text")
def _binary_scenario(tmp):
    path = tmp / "bad.yaml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    return _run(tmp, path), [str(path)]


@case("scenario-is-directory")
def _directory(tmp):
    path = tmp / "scenario.d"
    path.mkdir()
    return _run(tmp, path), [str(path), "directory"]


@case("scenario-file-missing")
def _missing_file(tmp):
    path = tmp / "nope.yaml"
    return _run(tmp, path), [str(path), "file not found"]


@case("scenario-unreadable", pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                                                reason="root reads files whatever their mode"))
def _unreadable(tmp):
    path = _scenario(tmp, BASE)
    path.chmod(0)
    return _run(tmp, path), [str(path), "cannot read"]


# --- traces (agentsim replay, cache-only) ------------------------------------------------------
def _trace(tmp: Path, name: str, data: bytes | str) -> Path:
    path = tmp / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


MOONCAKE_OK = '{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]}\n'


def _replay(path: Path, *extra: str) -> list[str]:
    return ["replay", str(path), "--json", *extra]


def _trace_case(id: str, name: str, data: bytes | str, fragments: list[str], *extra: str):
    def build(tmp: Path):
        path = _trace(tmp, name, data)
        return _replay(path, *extra), [str(path), *fragments]
    CASES.append(Case(id, build))


_trace_case("trace-malformed-json", "t.jsonl", MOONCAKE_OK * 2 + '{"timestamp": 5, "input_length": 9\n',
            ["line 3", "malformed JSON"], "--format", "mooncake")
_trace_case("trace-not-an-object", "t.jsonl", MOONCAKE_OK + "[1, 2, 3]\n", ["line 2", "expected a JSON object"],
            "--format", "mooncake")
_trace_case("trace-missing-field", "t.jsonl", MOONCAKE_OK + '{"timestamp": 1, "input_length": 10, "output_length": 1}\n',
            ["line 2", "missing field 'hash_ids'"], "--format", "mooncake")
_trace_case("trace-wrong-type", "t.jsonl", MOONCAKE_OK + '{"timestamp": 1, "input_length": "ten", "output_length": 1, "hash_ids": []}\n',
            ["line 2", "'input_length'", "'ten'"])
_trace_case("trace-negative-length", "t.jsonl", MOONCAKE_OK + '{"timestamp": 1, "input_length": 100, "output_length": -4, "hash_ids": [0]}\n',
            ["line 2", "'output_length' is negative"])
_trace_case("trace-hash-ids-too-long", "t.jsonl", MOONCAKE_OK + '{"timestamp": 1, "input_length": 512, "output_length": 1, "hash_ids": [0, 1, 2]}\n',
            ["line 2", "'hash_ids' has 3 blocks", "at most 1"])
_trace_case("trace-bad-hash-id", "t.jsonl", MOONCAKE_OK + '{"timestamp": 1, "input_length": 5000, "output_length": 1, "hash_ids": [0, "x"]}\n',
            ["line 2", "'hash_ids'", "'x'"])
_trace_case("trace-non-finite-time", "t.jsonl", MOONCAKE_OK + '{"timestamp": NaN, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n',
            ["line 2", "'timestamp'"], "--format", "mooncake")
_trace_case("trace-empty", "t.jsonl", "\n\n", ["empty trace"], "--format", "mooncake")
_trace_case("trace-empty-auto-format", "t.jsonl", "", ["empty trace"])
_trace_case("trace-truncated-gzip", "t.jsonl.gz", gzip.compress("".join(
                f'{{"timestamp": {i}, "input_length": {600 + i * 7 % 900}, "output_length": 1, "hash_ids": [{i}, {i * 3}]}}\n'
                for i in range(2000)).encode())[:3000],
            ["truncated gzip"], "--format", "mooncake")
_trace_case("trace-corrupt-gzip", "t.jsonl.gz", b"\x1f\x8b\x08\x00" + bytes(range(256)) * 4,
            ["gzip"], "--format", "mooncake")
_trace_case("trace-binary-garbage", "t.jsonl", bytes(range(256)) * 16, ["not a text trace"], "--format", "mooncake")
_trace_case("trace-binary-garbage-auto-format", "t.bin", b"\x00\x01\x02garbage\xff\xfe" * 100, [])
_trace_case("trace-unknown-format", "t.jsonl", '{"time": 1, "tokens": 5}\n', ["line 1", "unknown trace format"])
_trace_case("trace-bailian-wrong-type", "b.jsonl",
            '{"chat_id": "one", "parent_chat_id": -1, "timestamp": 0.5, "input_length": 40, "output_length": 12, "hash_ids": [1]}\n',
            ["line 1", "'chat_id'", "'one'"], "--format", "bailian")
_trace_case("trace-weka-request-missing-field", "s.json",
            '{"id": "s1", "block_size": 64, "hash_id_scope": "local", "requests": ['
            '{"t": 0, "type": "n", "in": 100, "out": 5, "hash_ids": [1, 2]},'
            '{"t": 3, "type": "n", "out": 5, "hash_ids": [1, 2]}]}\n',
            ["line 1: requests[1]", "missing field 'in'"], "--format", "weka")
_trace_case("trace-weka-subagent-negative", "s.json",
            '{"id": "s1", "requests": [{"t": 0, "in": 100, "out": 5, "hash_ids": [1, 2]},'
            '{"t": 2, "type": "subagent", "requests": [{"t": 1, "in": -100, "out": 5, "hash_ids": []}]}]}\n',
            ["requests[1].requests[0]", "'in' is negative"], "--format", "weka")
_trace_case("trace-weka-malformed-json-line", "s.jsonl",
            '{"id": "a", "requests": []}\n{"id": "b", "requests": [}\n', ["line 2", "malformed JSON"], "--format", "weka")


@case("trace-file-missing")
def _trace_missing(tmp):
    path = tmp / "nope.jsonl"
    return _replay(path), [str(path), "not found"]


@case("trace-directory-without-sessions")
def _trace_empty_dir(tmp):
    path = tmp / "sessions"
    path.mkdir()
    (path / "README.txt").write_text("no sessions here\n")
    return _replay(path, "--format", "weka"), [str(path), "no *.json"]


@case("mrc-trace-malformed-json")
def _mrc_malformed(tmp):
    path = _trace(tmp, "t.jsonl", MOONCAKE_OK + "{oops}\n")
    return ["mrc", str(path), "--json"], [str(path), "line 2", "malformed JSON"]


# --- sweep files ---------------------------------------------------------------------------------
def _sweep_file(tmp: Path, body: str) -> Path:
    _scenario(tmp, BASE, "base.yaml")
    return _scenario(tmp, body, "sweep.yaml")


def _sweep_run(tmp: Path, path: Path) -> list[str]:
    return ["sweep", str(path), "--out", str(tmp / "out"), "--quiet"]


@case("sweep-misspelt-required-key")
def _sweep_misspelt_base(tmp):
    path = _sweep_file(tmp, "bas: base.yaml\naxes: {grid: {cache.eviction: [lru, fifo]}}\n")
    return _sweep_run(tmp, path), [str(path), "line 1", "unknown key 'bas'", "did you mean 'base'"]


@case("sweep-bad-seeds")
def _sweep_bad_seeds(tmp):
    path = _sweep_file(tmp, "base: base.yaml\nseeds: many\n")
    return _sweep_run(tmp, path), [str(path), "line 2: seeds:", "valid integer", "'many'"]


@case("sweep-given-a-scenario")
def _sweep_given_scenario(tmp):
    path = _scenario(tmp, BASE)
    return _sweep_run(tmp, path), [str(path), "line 1", "this is a scenario, not a sweep file", "base: FILE"]


@case("scenario-given-a-sweep")
def _run_given_sweep(tmp):
    path = _sweep_file(tmp, "base: base.yaml\naxes: {grid: {cache.eviction: [lru, fifo]}}\n")
    return _run(tmp, path), [str(path), "line 1", "this is a sweep file, not a scenario", "agentsim sweep"]


# --- command line --------------------------------------------------------------------------------
@case("cli-out-holds-another-run")
def _out_holds_run(tmp):
    # A finished run's results (as write_run leaves them): must not be touched.
    out = tmp / "out"
    (out / "summary.json").write_text('{"requests": 7, "complete": true}\n')
    (out / "requests.parquet").write_bytes(b"PAR1 previous results PAR1")
    path = _scenario(tmp, BASE, "ok.yaml")
    return _run(tmp, path), [str(out), "already holds a run", "--force"]


@case("cli-out-is-a-file")
def _out_is_file(tmp):
    path = _scenario(tmp, BASE, "ok.yaml")
    target = tmp / "results.txt"
    target.write_text("someone's notes\n")
    return ["run", str(path), "--out", str(target), "--quiet"], [str(target), "not a directory"]


@case("cli-set-without-equals")
def _set_no_equals(tmp):
    path = _scenario(tmp, BASE, "ok.yaml")
    return _run(tmp, path) + ["--set", "cache.block_tokens"], ["--set", "PATH=VALUE"]


@case("cli-set-into-a-value")
def _set_into_value(tmp):
    path = _scenario(tmp, BASE, "ok.yaml")
    return _run(tmp, path) + ["--set", "seed.value=3"], ["--set", "seed is a value"]


@case("cli-set-unknown-key")
def _set_unknown(tmp):
    path = _scenario(tmp, BASE, "ok.yaml")
    return _run(tmp, path) + ["--set", "cache.blok_tokens=16"], ["--set cache.blok_tokens=16", "cache.blok_tokens",
                                                                 "did you mean 'block_tokens'"]


@case("cli-set-bad-value")
def _set_bad_value(tmp):
    path = _scenario(tmp, BASE, "ok.yaml")
    return _run(tmp, path) + ["--set", "cache.block_tokens=-16"], ["--set cache.block_tokens=-16", "cache.block_tokens",
                                                                  "greater than 0"]


@case("cli-option-wrong-type")
def _option_wrong_type(tmp):
    path = _scenario(tmp, BASE, "ok.yaml")
    return _run(tmp, path) + ["--seed", "seven"], ["Invalid value for '--seed'", "valid integer", "run --help"]


@case("cli-unknown-option")
def _unknown_option(tmp):
    path = _scenario(tmp, BASE, "ok.yaml")
    return _run(tmp, path) + ["--wokers", "2"], ["No such option: --wokers", "run --help"]


@case("cli-missing-argument")
def _missing_argument(tmp):
    return ["replay"], ["Missing argument", "replay --help"]


@case("cli-bad-option-choice")
def _bad_choice(tmp):
    path = _trace(tmp, "t.jsonl", MOONCAKE_OK)
    return _replay(path, "--format", "moonkake"), ["--format", "did you mean 'mooncake'"]


def _snapshot(root: Path) -> dict[str, bytes]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            try:
                out[str(path.relative_to(root))] = path.read_bytes()
            except PermissionError:
                out[str(path.relative_to(root))] = b"<unreadable>"
    return out


def check_refused(case: Case, tmp_path: Path, in_work_dir: bool = False,
                  max_memory_bytes: int | None = None) -> tuple[Path, float]:
    """Run ``case`` and check the promise: exit 2, one ``error:`` line holding every expected
    fragment, no traceback, and nothing in the working directory created, changed or removed
    (an ``out/`` directory with a note in it is there before). Returns the working directory
    and the command's wall seconds; ``in_work_dir`` runs the command inside that directory;
    ``max_memory_bytes`` caps the command's address space (see :func:`tests.conftest.run_cli`)."""
    tmp = tmp_path / "w"
    tmp.mkdir()
    out = tmp / "out"
    out.mkdir()
    (out / "notes.txt").write_text("written before the run; must survive\n")
    argv, fragments = case.build(tmp)
    before = _snapshot(tmp)
    started = time.perf_counter()
    proc = run_cli(*argv, timeout=120, cwd=tmp if in_work_dir else None, max_memory_bytes=max_memory_bytes)
    wall_s = time.perf_counter() - started
    stderr = proc.stderr
    assert proc.returncode == 2, (proc.returncode, stderr, proc.stdout[-500:])
    assert "Traceback" not in stderr and "Traceback" not in proc.stdout, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    message = lines[0]
    assert message.startswith("error: "), message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert _snapshot(tmp) == before, "files were created, changed or removed"
    return tmp, wall_s


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_bad_input(case: Case, tmp_path: Path):
    check_refused(case, tmp_path)


def test_catalogue_is_large_enough():
    assert len([c for c in CASES if not any(getattr(m, "name", "") == "xfail" for m in c.marks)]) >= 25


def test_catalogue_is_documented():
    """docs/errors.md lists every case id (and no id that is not a case)."""
    text = (ROOT / "docs" / "errors.md").read_text()
    documented = set(re.findall(r"^\| `([a-z0-9-]+)` \|", text, flags=re.M))
    from tests.test_bad_input_limits import CASES as LIMIT_CASES  # the catalogue's continuations
    from tests.test_bad_input_outputs import CASES as OUTPUT_CASES
    from tests.test_bad_input_hostile import CASES as HOSTILE_CASES
    from tests.test_bad_input_deployment import CASES as DEPLOYMENT_CASES
    from tests.test_bad_input_surfaces import CASES as SURFACE_CASES
    from tests.test_bad_input_gaps import CASES as GAP_CASES

    assert documented == {c.id for c in CASES + LIMIT_CASES + OUTPUT_CASES + HOSTILE_CASES + DEPLOYMENT_CASES
                          + SURFACE_CASES + GAP_CASES}
