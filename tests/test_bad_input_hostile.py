"""The bad-input catalogue, continued: a hostile pass by class (docs/errors.md, "A hostile pass").

Inputs found by trying each input surface as a careless or hostile user would, each of which used
to break the promise (a traceback, a run that allocated until it died, a silently useless run, a
message blaming the wrong file or line, a report of a file agentsim never wrote). Same harness and
requirements as :mod:`tests.test_bad_input_catalogue` (exit 2, one ``error:`` line naming the
file and line or YAML path or the option, no traceback, nothing on disk changed), run in a 2 GiB
address space with a wall-time bound like :mod:`tests.test_bad_input_limits`. The ids are listed
in docs/errors.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.test_bad_input_catalogue import (BASE, MOONCAKE_OK, Case, _mutated, _run, _scenario, _trace,
                                            case_registrar, check_refused)
from tests.test_bad_input_limits import MAX_MEMORY_BYTES, MAX_WALL_S

CASES: list[Case] = []
case = case_registrar(CASES)

COMPACTION = "compaction: {trigger_tokens: 100000, keep_tokens: 20000}"
KV_LINE = "  kv_capacity_bytes: 6GB\n"


def _scenario_case(id: str, old: str, new: str, fragments: list[str], line_of: str | None = None):
    """A mutation of BASE; the message names the file, the line (of ``line_of`` in the mutated
    text, else the mutated line) and ``fragments``."""
    def build(tmp: Path):
        path, line = _mutated(tmp, old, new)
        if line_of is not None:
            line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if line_of in text)
        return _run(tmp, path), [str(path), f"line {line}", *fragments]
    CASES.append(Case(id, build))


def _alias_bomb(levels: int) -> str:
    """A YAML flow sequence of ``levels`` anchors, each repeating the one before ten times."""
    parts = ["&a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    parts += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "[" + ", ".join(parts) + "]"


# --- numbers too long, budgets on values given outside a file ----------------------------------------
_scenario_case("scenario-integer-too-long", "instances: 1", "instances: " + "9" * 5000,
               ["number too long to read", "digits"])


@case("cli-set-integer-too-long")
def _set_long_integer(tmp):
    path = _scenario(tmp, BASE, "ok.yaml")
    return _run(tmp, path) + ["--set", "seed=" + "9" * 5000], ["--set seed=999", "number too long to read"]


@case("cli-set-alias-bomb")
def _set_alias_bomb(tmp):
    # Eight levels: 10^8 nodes once expanded, which the --set value used to build in memory.
    path = _scenario(tmp, BASE, "ok.yaml")
    return _run(tmp, path) + ["--set", "seed=" + _alias_bomb(8)], ["--set seed=", "expands to more than", "alias bomb"]


@case("replay-param-integer-too-long")
def _param_long_integer(tmp):
    path = _trace(tmp, "t.jsonl", MOONCAKE_OK)
    return (["replay", str(path), "--json", "--capacity-blocks", "10", "--policy", "slru", "--param",
             "promote_hits=" + "9" * 5000], ["--param promote_hits=999", "number too long to read"])


# --- capacities no machine integer can count ------------------------------------------------------
_scenario_case("scenario-kv-blocks-over-limit", KV_LINE, "  hbm_bytes_per_gpu: 1e300\n",
               ["hardware.hbm_bytes_per_gpu", "KV blocks", "limits.max_blocks_per_tier"])
_scenario_case("scenario-kv-bytes-per-token-below-one", "  profile: deepseek_v3\n",
               "  profile: deepseek_v3\n  kv_bytes_per_token: 1e-300\n",
               ["model.kv_bytes_per_token", "greater than or equal to 1"], line_of="kv_bytes_per_token")


@case("scenario-tier-blocks-over-limit")
def _tier_blocks(tmp):
    text = (BASE.replace("dram: {capacity_bytes: 20GB, eviction: lru", "dram: {eviction: lru", 1)
            .replace(KV_LINE, KV_LINE + "  dram_bytes_per_gpu: 1e300\n", 1))
    path = _scenario(tmp, text)
    line = next(n for n, t in enumerate(text.splitlines(), 1) if "dram: {eviction" in t)
    return _run(tmp, path), [str(path), f"line {line}", "cache.tiers.dram.capacity_fraction", "KV blocks",
                             "limits.max_blocks_per_tier"]


# --- workloads that cannot do what they describe --------------------------------------------------------
_scenario_case("scenario-subagent-fanout-huge", "      " + COMPACTION,
               "      subagents: {probability: 1.0, fanout: 1000000000, calls: 3}\n      " + COMPACTION,
               ["subagents.fanout", "1,000,000,000 sub-agents", "limits.max_concurrent_sessions"], line_of="subagents")
_scenario_case("scenario-first-prompt-beyond-window",
               "initial_context_tokens: {dist: lognormal, median: 1500, sigma: 0.5, round: true}",
               "initial_context_tokens: 1000000000000000",
               ["initial_context_tokens", "more than max_context_tokens", "before its first call"])
_scenario_case("scenario-compaction-beyond-window", COMPACTION,
               "compaction: {trigger_tokens: 100000000, keep_tokens: 20000}",
               ["compaction.trigger_tokens", "above max_context_tokens", "compaction can fire"])
_scenario_case("scenario-warmup-not-shorter-than-duration", "duration_s: 2m\n", "duration_s: 2m\nrun: {warmup_s: 1d}\n",
               ["run.warmup_s", "not shorter than duration_s", "no request would be measured"], line_of="warmup_s")


# --- report on files agentsim never wrote ------------------------------------------------------------
def _old_run(tmp: Path, summary: str = '{"requests": 3, "scenario": "x"}\n') -> Path:
    run = tmp / "old-run"
    run.mkdir()
    (run / "summary.json").write_text(summary)
    return run


def _report_case(id: str, make, fragments: list[str]):
    def build(tmp: Path):
        run, blamed = make(tmp)
        return ["report", str(run), "--quiet"], [str(blamed), *fragments]
    CASES.append(Case(id, build))


def _nan_summary(tmp):
    run = _old_run(tmp, '{"requests": NaN, "scenario": "x", "hit_ratio": Infinity}\n')
    return run, run / "summary.json"


def _wrong_type_summary(tmp):
    run = _old_run(tmp, '{"requests": "many", "scenario": "x"}\n')
    return run, run / "summary.json"


def _corrupt_resolved(tmp):
    run = _old_run(tmp)
    (run / "scenario.resolved.yaml").write_text("run: {warmup_s: 3\nname: [\n")
    return run, run / "scenario.resolved.yaml"


def _foreign_requests(tmp):
    import pyarrow as pa
    import pyarrow.parquet as pq

    run = _old_run(tmp)
    pq.write_table(pa.table({"x": [1, 2, 3]}), run / "requests.parquet")
    return run, run / "requests.parquet"


def _table_directory(tmp):
    run = _old_run(tmp)
    (run / "requests.parquet").mkdir()
    return run, run / "requests.parquet"


_report_case("report-summary-non-finite", _nan_summary, ["NaN", "agentsim never writes"])
_report_case("report-summary-wrong-type", _wrong_type_summary, ["'requests' must be a number", "'many'"])
_report_case("report-resolved-scenario-corrupt", _corrupt_resolved, ["not valid YAML", "line "])
_report_case("report-requests-table-foreign", _foreign_requests, ["not an agentsim table", "request_id"])
_report_case("report-table-is-directory", _table_directory, ["is a directory", "Parquet file"])


# --- trace records that repeat a key (both JSON parsers would keep the last value silently) -----------
def _duplicate_key_case(id: str, name: str, data: str, fragments: list[str], *extra: str):
    def build(tmp: Path):
        path = _trace(tmp, name, data)
        return ["replay", str(path), "--json", *extra], [str(path), *fragments]
    CASES.append(Case(id, build))


_duplicate_key_case("trace-mooncake-duplicate-key", "t.jsonl",
                    MOONCAKE_OK + '{"timestamp": 1, "input_length": 10, "input_length": 900, "output_length": 1, "hash_ids": [0]}\n',
                    ["line 2", "duplicate key 'input_length'"], "--format", "mooncake")
_duplicate_key_case("trace-weka-duplicate-key", "s.json",
                    '{"id": "s1",\n "requests": [{"t": 0, "in": 100, "out": 5, "hash_ids": [1, 2]}],\n'
                    ' "requests": []}\n', ["line 3", "duplicate key 'requests'"], "--format", "weka")
@case("trace-weka-dir-named-pipe")
def _session_dir_named_pipe(tmp):
    # Opening a pipe blocks until a writer comes: the directory listing must refuse it first.
    import os

    sessions = tmp / "sessions"
    sessions.mkdir()
    os.mkfifo(sessions / "a.json")
    return (["replay", str(sessions), "--json", "--format", "weka"],
            [str(sessions / "a.json"), "is a named pipe", "expected a regular session file"])


_duplicate_key_case("trace-weka-duplicate-key-nested", "s.jsonl",
                    '{"id": "a", "requests": []}\n{"id": "b", "requests": [{"t": 0, "t": 9, "in": 1, "out": 1, "hash_ids": []}]}\n',
                    ["line 2", "duplicate key 't'"], "--format", "weka")


# --- sweep files: values blamed on the sweep file, dry runs that check ------------------------------
def _sweep(tmp: Path, body: str) -> Path:
    _scenario(tmp, BASE, "base.yaml")
    return _scenario(tmp, "name: hostile\nbase: base.yaml\n" + body, "sweep.yaml")


def _sweep_case(id: str, body: str, line: int, fragments: list[str], dry_run: bool = True):
    def build(tmp: Path):
        path = _sweep(tmp, body)
        argv = ["sweep", str(path), "--out", str(tmp / "sweep-out"), "--quiet", "--workers", "1"]
        return argv + (["--dry-run"] if dry_run else []), [f"{path}: line {line}", *fragments]
    CASES.append(Case(id, build))


_sweep_case("sweep-set-value-blamed-on-sweep", "set: {cache.block_tokens: -3}\naxes:\n  grid:\n    seed: [1]\n", 3,
            ["no cell of the sweep is a valid scenario", "cache.block_tokens", "greater than 0"], dry_run=False)
_sweep_case("sweep-dry-run-invalid-cells", "axes:\n  grid:\n    cache.blok_tokens: [16, 32]\n", 5,
            ["cache.blok_tokens", "unknown key", "did you mean 'block_tokens'"])
_sweep_case("sweep-baseline-no-cell", "axes:\n  grid:\n    cache.block_tokens: [16, 32]\nbaseline: {cache.block_tokens: 48}\n",
            6, ["baseline value 48", "no cell's value"])


@case("sweep-base-is-a-sweep")
def _base_is_sweep(tmp):
    path = _scenario(tmp, "name: hostile\nbase: sweep.yaml\naxes:\n  grid:\n    seed: [1]\n", "sweep.yaml")
    return ["sweep", str(path), "--out", str(tmp / "sweep-out"), "--quiet", "--dry-run"], [
        f"{path}: line 2", "is a sweep file, not a scenario"]


# --- command-line options: non-finite and out-of-range values, blame -----------------------------------
def _replay_case(id: str, extra: list[str], fragments: list[str], command: str = "replay"):
    def build(tmp: Path):
        path = _trace(tmp, "t.jsonl", MOONCAKE_OK)
        return [command, str(path), "--json", *extra], fragments
    CASES.append(Case(id, build))


_replay_case("replay-session-offset-nan", ["--session-offset", "nan"], ["--session-offset", "finite", "nan"])
_replay_case("mrc-session-offset-infinite", ["--session-offset", "inf"], ["--session-offset", "finite", "inf"], "mrc")
_replay_case("replay-capacity-fraction-above-one", ["--capacity-fraction", "2"], ["--capacity-fraction", "(0, 1]"])


@case("replay-open-loop-trace-span-huge")
def _trace_span_huge(tmp):
    # A finite but absurd timestamp: the simulated clock (and its samplers) would run to it.
    path = _trace(tmp, "t.jsonl", MOONCAKE_OK + MOONCAKE_OK.replace('"timestamp": 0', '"timestamp": 1e308'))
    return ["replay", str(path), "--json", "--mode", "open-loop", "--capacity-blocks", "100"], [
        str(path), "trace spans", "limits.max_duration_s"]


@case("examples-copy-unwritable")
def _examples_unwritable(tmp):
    # /proc refuses new entries even to root.
    return ["examples", "--copy", "/proc/agentsim-examples"], ["/proc/agentsim-examples", "cannot copy the examples"]


@case("graph-duration-blamed-on-option")
def _graph_duration(tmp):
    path = _scenario(tmp, BASE, "ok.yaml")
    return ["graph", str(path), "--out", str(tmp / "graph"), "--duration", "forever"], [
        "error: --duration:", "cannot read 'forever' as a duration"]


def _measured_csv(tmp: Path, edit) -> Path:
    from tests.conftest import ROOT

    text = (ROOT / "tests" / "fixtures" / "serving-benchmarks" / "measured_sample.csv").read_text()
    path = tmp / "measured.csv"
    path.write_text(edit(text))
    return path


@case("check-timing-header-only")
def _csv_header_only(tmp):
    path = _measured_csv(tmp, lambda text: text.splitlines()[0] + "\n")
    return ["check-timing", str(path)], [str(path), "no rows below the header"]


@case("check-timing-unknown-mode")
def _csv_unknown_mode(tmp):
    path = _measured_csv(tmp, lambda text: text.replace(",agg,", ",hybrid,", 1))
    line = next(n for n, row in enumerate(path.read_text().splitlines(), 1) if ",hybrid," in row)
    return ["check-timing", str(path)], [str(path), f"line {line}", "column mode must be agg or disagg", "'hybrid'"]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_bad_input(case: Case, tmp_path: Path):
    tmp, wall_s = check_refused(case, tmp_path, max_memory_bytes=MAX_MEMORY_BYTES)
    assert wall_s < MAX_WALL_S, f"took {wall_s:.1f} s"


def test_sweep_dry_run_marks_an_invalid_cell(tmp_path: Path):
    """One bad cell among good ones: the dry run lists it as invalid, names the sweep file's line
    and still exits 0 (a run would run the other cells)."""
    path = _sweep(tmp_path, "axes:\n  grid:\n    cache.block_tokens: [16, -32]\n")
    proc = run_cli("sweep", str(path), "--dry-run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "1 invalid" in proc.stdout
    assert f"{path}: line 5: cache.block_tokens" in proc.stderr.replace("\n", "")


def test_token_draw_past_the_window_is_not_allocated(tmp_path: Path):
    """A token distribution whose draws dwarf the context window (median 1e14 tokens) runs in a
    2 GiB address space: such a draw ends the session context-full (or is compacted away), and
    its tokens past the window are not given block keys (they used to be, until the process ran
    out of memory)."""
    text = BASE.replace("appended_tokens: {dist: lognormal, median: 800, sigma: 0.8, round: true}",
                        "appended_tokens: {dist: lognormal, median: 1e14, sigma: 0.1, round: true}")
    path = _scenario(tmp_path, text, "huge-draws.yaml")
    out = tmp_path / "out"
    proc = run_cli("run", str(path), "--out", str(out), "--quiet", timeout=300, max_memory_bytes=MAX_MEMORY_BYTES)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"] > 0
    # Each huge draw either ends its session context-full or is compacted away.
    assert summary["sessions_context_full"] + summary["compactions"] > 0
