"""The bad-input catalogue, continued: the command surfaces around a run (docs/errors.md, "Paths,
plan, sweep, check-timing and report options").

Each case used to break the promise: a symbolic-link loop or an over-long file name gave a
traceback wherever a path is read; ``plan`` allocated a billion seeds, read a NaN resolution,
SLO threshold or axis end, or created its output directory before refusing an option;
``check-timing`` gave a traceback on an infinite cell and truncated ``tp_size 1.5`` to 1; ``report``
read ``1e999`` as infinity. Same harness and requirements as :mod:`tests.test_bad_input_catalogue`
(exit 2, one ``error:`` line naming the file and line, the YAML path or the option, no traceback,
nothing on disk changed), run in a 2 GiB address space with a wall-time bound.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import pytest

from tests.test_bad_input_catalogue import BASE, Case, _run, _scenario, case_registrar, check_refused
from tests.test_bad_input_hostile import _measured_csv, _sweep
from tests.test_bad_input_limits import MAX_MEMORY_BYTES, MAX_WALL_S

CASES: list[Case] = []
case = case_registrar(CASES)

PLAN_SLO = ["--slo", "ttft_p99_s<=2"]
PLAN_VARY = ["--vary", "hardware.kv_capacity_bytes=1GB..8GB"]


def _loop(tmp: Path, name: str = "loop") -> Path:
    """``name`` -> ``name-2`` -> ``name``: a symbolic link that never resolves."""
    (tmp / f"{name}-2").symlink_to(tmp / name)
    (tmp / name).symlink_to(tmp / f"{name}-2")
    return tmp / name


# --- paths that cannot be resolved: link loops, names too long ------------------------------------------
def _loop_case(id: str, argv, what: str):
    """``argv(tmp, loop)`` given a symbolic link loop; the message names the loop, ``what`` path
    it was given as, and the loop."""
    def build(tmp: Path):
        loop = _loop(tmp)
        return argv(tmp, loop), [str(loop), what, "symbolic link loop"]
    CASES.append(Case(id, build))


_loop_case("path-trace-symlink-loop", lambda tmp, loop: ["replay", str(loop), "--json"], "trace file path")
_loop_case("path-out-symlink-loop", lambda tmp, loop: ["run", str(_scenario(tmp, BASE, "ok.yaml")), "--out", str(loop),
                                                       "--quiet"], "output directory")
_loop_case("path-report-symlink-loop", lambda tmp, loop: ["report", str(loop), "--quiet"], "run directory")


@case("path-fit-symlink-loop")
def _fit_loop(tmp):
    loop = _loop(tmp)
    fit_line = next(line for line in BASE.splitlines() if "fit: " in line)
    text = BASE.replace(fit_line, fit_line.split("fit: ")[0] + f"fit: {loop}#tool_gap, max: 600}}")
    path = _scenario(tmp, text)
    line = next(n for n, row in enumerate(text.splitlines(), 1) if f"fit: {loop}" in row)
    return _run(tmp, path), [str(path), f"line {line}", "tool_gap_s.fit", "symbolic link loop"]


@case("path-sweep-base-symlink-loop")
def _sweep_base_loop(tmp):
    loop = _loop(tmp)
    path = _scenario(tmp, f"name: hostile\nbase: {loop}\naxes:\n  grid:\n    seed: [1]\n", "sweep.yaml")
    return ["sweep", str(path), "--out", str(tmp / "sweep-out"), "--quiet", "--dry-run"], [
        f"{path}: line 2", "base scenario", str(loop), "symbolic link"]


@case("path-trace-name-too-long")
def _trace_name_too_long(tmp):
    path = tmp / ("x" * 300 + ".jsonl")
    return ["replay", str(path), "--json"], ["trace file path", "cannot be looked up", "File name too long"]


# --- plan: options checked before anything is run or written -------------------------------------------
def _plan_case(id: str, extra: list[str], fragments: list[str], slo=PLAN_SLO, vary=PLAN_VARY):
    def build(tmp: Path):
        scenario = _scenario(tmp, BASE, "ok.yaml")
        return ["plan", str(scenario), *slo, *vary, "--out", str(tmp / "plan-out"), *extra], fragments
    CASES.append(Case(id, build))


_plan_case("plan-seeds-over-sweep-limit", ["--seeds", "1000000000"],
           ["--seeds", "1,000,000,000 seeds per point", "runs per sweep", "AGENTSIM_MAX_SWEEP_RUNS"])
_plan_case("plan-resolution-nan", ["--resolution", "nan"], ["--resolution", "must be positive", "'nan'"])
_plan_case("plan-slo-threshold-nan", [], ["--slo", "ttft_p99_s<=nan", "finite number"], slo=["--slo", "ttft_p99_s<=nan"])
_plan_case("plan-vary-end-infinite", [], ["--vary", "must be finite numbers"],
           vary=["--vary", "hardware.kv_capacity_bytes=1GB..inf"])
_plan_case("plan-vary-unknown-path-before-any-run", [], ["--vary", "unknown key 'kv_capacit'", "did you mean"],
           vary=["--vary", "hardware.kv_capacit=1GB..8GB"])
_plan_case("plan-workers-zero", ["--workers", "0"], ["--workers", "greater than or equal to 1"])
_plan_case("plan-criterion-unknown-before-out", ["--criterion", "most"], ["--criterion", "'all' or 'mean'", "'most'"])


# --- sweep options ----------------------------------------------------------------------------------------
@case("sweep-workers-zero")
def _sweep_workers_zero(tmp):
    path = _sweep(tmp, "axes:\n  grid:\n    seed: [1, 2]\n")
    return ["sweep", str(path), "--out", str(tmp / "sweep-out"), "--quiet", "--workers", "0"], [
        "--workers", "greater than or equal to 1"]


@case("sweep-dask-address-checked-in-dry-run")
def _sweep_dask_dry_run(tmp):
    path = _sweep(tmp, "axes:\n  grid:\n    seed: [1, 2]\n")
    return ["sweep", str(path), "--out", str(tmp / "sweep-out"), "--quiet", "--dry-run", "--dask", "bogus"], [
        "--dask", "scheduler address", "'bogus'"]


# --- check-timing cells ----------------------------------------------------------------------------------
def _csv_cell_case(id: str, column: str, value: str, fragments: list[str]):
    def build(tmp: Path):
        def edit(text: str) -> str:
            rows = list(csv.reader(io.StringIO(text)))
            rows[1][rows[0].index(column)] = value
            out = io.StringIO()
            csv.writer(out, lineterminator="\n").writerows(rows)
            return out.getvalue()
        path = _measured_csv(tmp, edit)
        return ["check-timing", str(path)], [str(path), "line 2", f"column {column}", *fragments]
    CASES.append(Case(id, build))


_csv_cell_case("check-timing-cell-infinite", "isl", "inf", ["positive number", "inf"])
_csv_cell_case("check-timing-count-not-whole", "tp_size", "1.5", ["whole number", "1.5"])


# --- report ------------------------------------------------------------------------------------------------
@case("report-summary-number-beyond-float")
def _summary_beyond_float(tmp):
    run = tmp / "old-run"
    run.mkdir()
    (run / "summary.json").write_text('{"requests": 1e999, "scenario": "x"}\n')
    return ["report", str(run), "--quiet"], [str(run / "summary.json"), "1e999", "beyond the float range"]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_bad_input(case: Case, tmp_path: Path):
    tmp, wall_s = check_refused(case, tmp_path, max_memory_bytes=MAX_MEMORY_BYTES)
    assert wall_s < MAX_WALL_S, f"took {wall_s:.1f} s"


def test_links_in_the_catalogue_are_loops(tmp_path: Path):
    """The loop helper builds what the cases claim: a link that cannot be resolved."""
    loop = _loop(tmp_path)
    with pytest.raises(OSError):
        os.stat(loop)
