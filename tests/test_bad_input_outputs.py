"""The bad-input catalogue, continued: output directories, files agentsim reads back, and blame.

Same harness and requirements as :mod:`tests.test_bad_input_catalogue` (exit 2, one ``error:``
line naming the file or option and the line or path, no traceback, nothing on disk changed).
Output problems (a ``--out`` that cannot or must not receive results) are found before the
simulation starts, so each case also has a wall-time bound far below a run's. The ids are
listed in docs/errors.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_bad_input_catalogue import case_registrar, check_refused, BASE, Case, _mutated, _run, _scenario, _sweep_file, _sweep_run

CASES: list[Case] = []
MAX_WALL_S = 60.0


case = case_registrar(CASES)


# --- run directories read back by `report` ---------------------------------------------------------
def _run_dir(tmp: Path, summary: bytes, tables: dict[str, bytes] | None = None) -> Path:
    run = tmp / "old-run"
    run.mkdir()
    (run / "summary.json").write_bytes(summary)
    for name, data in (tables or {}).items():
        (run / f"{name}.parquet").write_bytes(data)
    return run


def _report_case(id: str, summary: bytes, fragments: list[str], tables: dict[str, bytes] | None = None,
                 blamed: str = "summary.json"):
    def build(tmp: Path):
        run = _run_dir(tmp, summary, tables)
        return ["report", str(run), "--quiet"], [str(run / blamed), *fragments]
    CASES.append(Case(id, build))


_report_case("report-summary-truncated", b'{"requests": 7, "scenario": "x", "hit_ra',
             ["summary is not valid JSON", "line 1"])
_report_case("report-summary-empty", b"", ["summary is empty"])
_report_case("report-summary-empty-object", b"{}\n", ["lacks the key(s) 'scenario', 'requests'", "not a run's summary"])
_report_case("report-summary-lacks-scenario", b'{"requests": 7}\n', ["lacks the key(s) 'scenario'"])
_report_case("report-summary-not-an-object", b"[1, 2, 3]\n", ["must hold a JSON object", "list"])
_report_case("report-parquet-corrupt", b'{"requests": 7, "scenario": "x"}\n', ["not a readable Parquet table"],
             tables={"requests": b"PAR1 this is not parquet at all PAR1"}, blamed="requests.parquet")


@case("report-cell-json-corrupt")
def _cell_json_corrupt(tmp):
    sweep = tmp / "old-sweep"
    cell = sweep / "cells" / "abc123"
    (cell / "seed-0").mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({"name": "s", "cells": [], "seeds": [0]}) + "\n")
    (cell / "cell.json").write_text('{"label": "lru", "assignm')
    (cell / "seed-0" / "summary.json").write_text('{"requests": 3}\n')
    return ["report", str(sweep), "--quiet"], [str(cell / "cell.json"), "cell.json is not valid JSON"]


# --- output directories checked before the run ---------------------------------------------------
@case("cli-out-holds-other-files")
def _out_holds_other_files(tmp):
    # The harness's out/ holds notes.txt: replacing it with a run would delete them.
    path = _scenario(tmp, BASE, "ok.yaml")
    return _run(tmp, path) + ["--force"], [str(tmp / "out"), "not agentsim results", "notes.txt"]


@case("cli-out-is-root")
def _out_root(tmp):
    path = _scenario(tmp, BASE, "ok.yaml")
    return ["run", str(path), "--out", "/", "--quiet", "--force"], ["/: ", "filesystem root"]


@case("cli-out-unwritable")
def _out_unwritable(tmp):
    # /proc refuses new entries even to root (a read-only directory does not stop root).
    path = _scenario(tmp, BASE, "ok.yaml")
    return ["run", str(path), "--out", "/proc/agentsim-results", "--quiet"], ["/proc/agentsim-results", "cannot"]


@case("schema-out-is-directory")
def _schema_out_dir(tmp):
    return ["schema", "--out", str(tmp / "out")], [str(tmp / "out"), "is a directory"]


@case("sweep-out-holds-other-files")
def _sweep_out_other(tmp):
    path = _sweep_file(tmp, "base: base.yaml\naxes: {grid: {cache.eviction: [lru, fifo]}}\n")
    return _sweep_run(tmp, path), [str(tmp / "out"), "not agentsim results"]


# --- output names confined under runs/ -------------------------------------------------------------
for _id, _name in (("scenario-name-escapes-runs", "../escaped"), ("scenario-name-absolute", "/tmp/agentsim-escaped")):
    def _build(tmp, _name=_name):
        path, line = _mutated(tmp, "name: catalogue", f"name: {_name}")
        return ["run", str(path), "--quiet"], [str(path), f"line {line}: name", "must be a plain name"]
    CASES.append(Case(_id, _build))


@case("sweep-name-escapes-runs")
def _sweep_name(tmp):
    path = _sweep_file(tmp, "name: ../../escaped\nbase: base.yaml\naxes: {grid: {cache.eviction: [lru, fifo]}}\n")
    return ["sweep", str(path), "--quiet"], [str(path), "line 1: name", "must be a plain name"]


# --- sweep sizes checked before any cell is built ------------------------------------------------
@case("sweep-too-many-seeds")
def _sweep_seeds(tmp):
    path = _sweep_file(tmp, "base: base.yaml\nseeds: 1000000000\n")
    return _sweep_run(tmp, path), [str(path), "line 2: seeds", "exceed the limit", "AGENTSIM_MAX_SWEEP_RUNS"]


@case("sweep-grid-too-large-dry-run")
def _sweep_grid(tmp):
    grid = ", ".join(f"cache.tiers.dram.capacity_fraction{i}: [{', '.join(str(v) for v in range(30))}]" for i in range(8))
    path = _sweep_file(tmp, f"base: base.yaml\naxes:\n  grid: {{{grid}}}\n")
    return _sweep_run(tmp, path) + ["--dry-run"], [str(path), "line 2: axes", "656,100,000,000 cells", "exceed the limit"]


@case("sweep-base-missing")
def _sweep_base_missing(tmp):
    path = _scenario(tmp, "name: s\nbase: nope.yaml\naxes: {grid: {cache.eviction: [lru, fifo]}}\n", "sweep.yaml")
    return _sweep_run(tmp, path), [str(path), "line 2: base", "base scenario", "nope.yaml", "file not found"]


# --- blame: the option or line the value came from -----------------------------------------------
@case("cli-set-bad-policy-name")
def _set_bad_policy(tmp):
    path = _scenario(tmp, BASE, "ok.yaml")
    return _run(tmp, path) + ["--set", "cache.eviction=lruu"], ["--set cache.eviction=lruu", "cache.eviction.name",
                                                                 "did you mean 'lru'"]


@case("cli-set-bad-distribution")
def _set_bad_distribution(tmp):
    path = _scenario(tmp, BASE, "ok.yaml")
    return _run(tmp, path) + ["--set", "workload.agent_classes.coding.human_gap_s.mean=-3"], [
        "--set workload.agent_classes.coding.human_gap_s.mean=-3", "human_gap_s.mean", "greater than 0"]


@case("scenario-admission-with-tiers")
def _admission_tiers(tmp):
    path, line = _mutated(tmp, "  eviction: lru\n", "  eviction: lru\n  admission: second_hit\n")
    return _run(tmp, path), [str(path), f"line {line + 1}: cache.admission", "HBM-only cache"]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_bad_input(case: Case, tmp_path: Path):
    tmp, wall_s = check_refused(case, tmp_path, in_work_dir=True)
    assert not (tmp / "runs").exists() and not (tmp.parent / "escaped").exists()
    assert wall_s < MAX_WALL_S, f"took {wall_s:.1f} s"
