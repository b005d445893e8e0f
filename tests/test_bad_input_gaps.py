"""The bad-input catalogue, continued: the last gaps of the reliability pass (docs/errors.md,
"Metrics, capacities and the last gaps").

Each case used to break the promise: a sweep's misspelt ``metrics:`` name was only warned about
after every cell had run (and ``--dry-run`` said nothing); ``replay --capacity-blocks`` took any
count, so a policy that sizes its state by its capacity allocated it before the first request
(W-TinyLFU's sketch: a MemoryError traceback), and ``1e20`` blocks ran with exit 0; a ``fit:``
reference took a quantity of another kind (tokens as a gap in seconds) without a word, and a fit
file whose spec is itself a fit reference was blamed on the spec's sign; ``plan --slo`` on a text
metric and ``--resolution 1e-300`` gave tracebacks and ``--resolution 2s`` on a bytes axis was
read as 2 bytes; a measured-runs CSV naming a column twice, or a row cut short, was read
without a word (or blamed on NaN in whichever column came first); a timed replay of a trace
request of 10^20 tokens overflowed a machine integer deep in the run (a traceback). Same harness
and requirements as :mod:`tests.test_bad_input_catalogue`, run in a 2 GiB address space with a
wall-time bound.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_bad_input_catalogue import (BASE, FITS, MOONCAKE_OK, Case, _mutated, _run, _scenario, _trace,
                                            case_registrar, check_refused)
from tests.test_bad_input_hostile import _measured_csv, _sweep
from tests.test_bad_input_surfaces import PLAN_SLO, PLAN_VARY
from tests.test_bad_input_limits import MAX_MEMORY_BYTES, MAX_WALL_S

CASES: list[Case] = []
case = case_registrar(CASES)


# --- a sweep's metrics: checked before any cell runs -----------------------------------------------------
def _metric_case(id: str, metrics: str, index: int, fragments: list[str], dry_run: bool):
    def build(tmp: Path):
        body = f"set: {{duration_s: 20s}}\naxes:\n  grid:\n    seed: [1]\nmetrics: {metrics}\n"
        path = _sweep(tmp, body)
        argv = ["sweep", str(path), "--out", str(tmp / "sweep-out"), "--quiet", "--workers", "1"]
        return argv + (["--dry-run"] if dry_run else []), [f"{path}: line 7", f"metrics[{index}]", *fragments]
    CASES.append(Case(id, build))


_metric_case("sweep-metric-unknown", "[ttft_p99_s, hit_ratioo]", 1,
             ["unknown metric 'hit_ratioo'", "did you mean 'hit_ratio'"], dry_run=False)
_metric_case("sweep-metric-unknown-dry-run", "[ttft_p99]", 0,
             ["unknown metric 'ttft_p99'", "did you mean"], dry_run=True)
_metric_case("sweep-metric-per-class-on-one-class", "[by_agent_class.coding.hit_ratio]", 0,
             ["unknown metric 'by_agent_class.coding.hit_ratio'"], dry_run=False)


# --- replay: a capacity checked before the policy is built ----------------------------------------------
def _capacity_case(id: str, blocks: str, policy: str):
    def build(tmp: Path):
        path = _trace(tmp, "t.jsonl", MOONCAKE_OK)
        return (["replay", str(path), "--json", "--capacity-blocks", blocks, "--policy", policy],
                ["--capacity-blocks", "exceed the limit", "limits.max_blocks_per_tier", "--capacity-fraction 1"])
    CASES.append(Case(id, build))


_capacity_case("replay-capacity-blocks-over-limit", "100000000000000000000", "lru")
_capacity_case("replay-capacity-blocks-over-limit-sized-policy", "10000000000", "w_tinylfu")


# --- fit: references to a quantity of another kind, or to a reference -------------------------------------
def _fit_file_case(id: str, quantity: str, fragments: list[str]):
    """``tool_gap_s`` (a time in seconds) given the fit file ``quantity``'s body."""
    def build(tmp: Path):
        fit = tmp / "mine.yaml"
        fit.write_text(f"quantities:\n  tool_gap:\n{quantity}".replace("SELF", str(fit)))
        path, line = _mutated(tmp, f"{FITS}#tool_gap", f"{fit}#tool_gap")
        return _run(tmp, path), [str(path), f"line {line}", "tool_gap_s.fit", *fragments]
    CASES.append(Case(id, build))


_fit_file_case("scenario-fit-unit-of-wrong-kind", "    unit: tokens\n    spec: {dist: constant, value: 5000}\n",
               ["'tool_gap'", "is in 'tokens'", "tool_gap_s is a time in seconds"])
_fit_file_case("scenario-fit-time-in-other-unit", "    unit: ms\n    spec: {dist: constant, value: 5000}\n",
               ["is in 'ms'", "a time in seconds"])
_fit_file_case("scenario-fit-spec-is-a-reference", "    unit: s\n    spec: {fit: SELF#tool_gap}\n",
               ["itself a fit reference"])


# --- plan: an SLO on a number, a resolution the axis can use -------------------------------------------
def _plan(id: str, extra: list[str], fragments: list[str], slo=PLAN_SLO):
    def build(tmp: Path):
        scenario = _scenario(tmp, BASE, "ok.yaml")
        return ["plan", str(scenario), *slo, *PLAN_VARY, "--out", str(tmp / "plan-out"), *extra], fragments
    CASES.append(Case(id, build))


_plan("plan-slo-metric-not-a-number", [], ["--slo", "policy<=2", "is not a number"], slo=["--slo", "policy<=2"])
_plan("plan-resolution-too-fine", ["--resolution", "1e-300"], ["--resolution", "steps", "coarser"])
_plan("plan-resolution-unit-of-wrong-kind", ["--resolution", "2s"], ["--resolution", "'2s' is a time", "bytes"])


# --- check-timing: the shape of the CSV ------------------------------------------------------------------
@case("check-timing-duplicate-column")
def _csv_duplicate_column(tmp):
    def edit(text: str) -> str:
        lines = text.splitlines()
        return "\n".join([lines[0] + ",isl"] + [line + ",5" for line in lines[1:]]) + "\n"
    path = _measured_csv(tmp, edit)
    return ["check-timing", str(path)], [str(path), "line 1", "column 'isl' appears twice"]


@case("check-timing-row-cut-short")
def _csv_short_row(tmp):
    def edit(text: str) -> str:
        lines = text.splitlines()
        return "\n".join([lines[0], ",".join(lines[1].split(",")[:3])] + lines[2:]) + "\n"
    path = _measured_csv(tmp, edit)
    return ["check-timing", str(path)], [str(path), "line 2", "a row of 3 fields"]


@case("check-timing-bad-value-after-a-quoted-newline")
def _csv_line_after_quoted_newline(tmp):
    # Row 1's free-text source spans two lines, so row 3 starts on line 5 (it was blamed on line 4).
    def edit(text: str) -> str:
        lines = text.splitlines()
        first = lines[1].split(",")
        first[1] = '"a source\nnote"'
        third = lines[3].split(",")
        third[8] = "-5"
        return "\n".join([lines[0], ",".join(first), lines[2], ",".join(third)] + lines[4:]) + "\n"
    path = _measured_csv(tmp, edit)
    return ["check-timing", str(path)], [str(path), "line 5", "column isl must be a positive number, got -5"]


# --- timed replay: one sequence's tokens within the scenario's limit ---------------------------------------
@case("replay-trace-request-over-token-limit")
def _trace_tokens_over_limit(tmp):
    path = _trace(tmp, "t.jsonl", MOONCAKE_OK + '{"timestamp": 5, "input_length": 100000000000000000000, '
                  '"output_length": 5, "hash_ids": [0, 1, 2]}\n')
    return (["replay", str(path), "--json", "--mode", "open-loop"],
            [str(path), "request 2", "100,000,000,000,000,000,000 prompt", "limits.max_prompt_tokens"])


# --- a distribution whose far tail overflows the float range ----------------------------------------------
_TAIL_OLD = "output_tokens: {dist: lognormal, median: 150, sigma: 0.7, min: 1, round: true}"


def _tail_case(id: str, new: str, fragments: list[str]):
    def build(tmp: Path):
        path, line = _mutated(tmp, _TAIL_OLD, new)
        return _run(tmp, path), [str(path), f"line {line}", "samples overflow the float range", *fragments]
    CASES.append(Case(id, build))


_tail_case("scenario-lognormal-sigma-overflows",
           "output_tokens: {dist: lognormal, median: 150, sigma: 1e300, min: 1, round: true}",
           ["output_tokens", "sigma 1e+300 with median 150"])
_tail_case("scenario-pareto-shape-overflows",
           "output_tokens: {dist: pareto, shape: 0.01, scale: 150, min: 1, round: true}",
           ["output_tokens", "shape 0.01 with scale 150"])


# --- a scenario name that cannot name a directory ------------------------------------------------------------
def _name_case(id: str, new: str, fragments: list[str]):
    def build(tmp: Path):
        path, line = _mutated(tmp, "name: catalogue", new)
        return _run(tmp, path), [str(path), f"line {line}", "name", *fragments]
    CASES.append(Case(id, build))


_name_case("scenario-name-control-character", 'name: "a\\x01b\\tc"', ["holds a control character"])
_name_case("scenario-name-too-long", "name: " + "x" * 100_000,
           ["100,000 bytes is longer than the 200 bytes", "(100,002 characters)"])


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_bad_input(case: Case, tmp_path: Path):
    tmp, wall_s = check_refused(case, tmp_path, max_memory_bytes=MAX_MEMORY_BYTES)
    assert wall_s < MAX_WALL_S, f"took {wall_s:.1f} s"


@pytest.mark.parametrize("gzip_it", [False, True])
def test_a_byte_order_mark_before_the_first_record_is_read(tmp_path: Path, gzip_it: bool):
    """A UTF-8 byte-order mark (Windows tools write one) made the first line "not JSON"; the
    trace now reads as it does without it."""
    import gzip
    import json

    from tests.conftest import run_cli

    plain = tmp_path / "plain.jsonl"
    plain.write_text(MOONCAKE_OK * 3)
    data = b"\xef\xbb\xbf" + (MOONCAKE_OK * 3).encode()
    marked = tmp_path / ("marked.jsonl.gz" if gzip_it else "marked.jsonl")
    marked.write_bytes(gzip.compress(data) if gzip_it else data)
    results = []
    for path in (plain, marked):
        proc = run_cli("replay", str(path), "--json", "--capacity-blocks", "4")
        assert proc.returncode == 0, proc.stderr
        results.append({k: v for k, v in json.loads(proc.stdout).items() if k not in ("trace", "load_time_s", "replay_time_s")})
    assert results[0] == results[1] and results[0]["hit_blocks"] == 6

