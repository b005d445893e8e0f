"""Output directories that never lie (agentsim/run_directory.py) and sweep workers that die with
their parent.

A run directory is the previous run or the new one, never a mix: results are staged in a
sibling and swapped in whole under a lock; a failed write leaves the old directory as it was;
``--force`` replaces every file; a second writer is refused; a resumed sweep redoes a run whose
summary is empty or corrupt.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from agentsim import run_directory
from agentsim.errors import InputError
from agentsim.experiments.runs import RunOutcome
from agentsim.experiments.store import SweepStore
from agentsim.result_files import read_json_object
from agentsim.results import load_run, write_run
from agentsim.run_directory import StagedDirectory
from tests.conftest import ROOT, run_cli


def _result(tables: dict[str, pd.DataFrame], requests: int) -> SimpleNamespace:
    return SimpleNamespace(tables=tables, scenario=None, summary={"scenario": "t", "requests": requests, "complete": True})


def _siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name)


def test_a_rewrite_replaces_every_table(tmp_path):
    """A tiered run followed by an HBM-only run leaves no stale links table beside the new one."""
    out = tmp_path / "run"
    from agentsim.metrics.records import RequestRecord, columns

    frame = pd.DataFrame({name: [1, 2] for name in columns(RequestRecord)})  # read back as a request table
    write_run(_result({"requests": frame, "links": frame}, 2), out)
    assert sorted(p.name for p in out.iterdir()) == ["links.parquet", "requests.parquet", "summary.json"]
    write_run(_result({"requests": frame}, 5), out)
    assert sorted(p.name for p in out.iterdir()) == ["requests.parquet", "summary.json"]
    summary, tables = load_run(out)
    assert summary["requests"] == 5 and set(tables) == {"requests"}
    assert _siblings(out) == [], "no lock file or staging directory left behind"


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_commit_swaps_the_whole_directory(tmp_path, monkeypatch, exchange):
    if not exchange:
        monkeypatch.setattr(run_directory, "_exchange", lambda a, b: False)
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text('{"requests": 1}\n')
    (out / "old.parquet").write_bytes(b"old")
    with StagedDirectory(out, force=True) as target:
        (target.staging / "summary.json").write_text('{"requests": 2}\n')
        assert json.loads((out / "summary.json").read_text())["requests"] == 1  # untouched until commit
        target.commit()
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]
    assert json.loads((out / "summary.json").read_text())["requests"] == 2
    assert _siblings(out) == []


def test_a_failed_write_leaves_the_previous_directory(tmp_path):
    """Disk full half-way: the staging directory goes, the old run stays byte for byte."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text('{"requests": 1}\n')
    with pytest.raises(OSError):
        with StagedDirectory(out, force=True) as target:
            (target.staging / "requests.parquet").write_bytes(b"half")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert [p.name for p in out.iterdir()] == ["summary.json"]
    assert (out / "summary.json").read_text() == '{"requests": 1}\n'
    assert _siblings(out) == []


def test_a_second_writer_is_refused_while_the_first_holds_the_directory(tmp_path):
    out = tmp_path / "run"
    with StagedDirectory(out, force=False):
        with pytest.raises(InputError, match="another agentsim process is writing"):
            with StagedDirectory(out, force=True):
                pass
    with StagedDirectory(out, force=False) as target:  # released: the next writer gets it
        target.commit()


def test_cli_run_refuses_a_directory_another_process_writes(small_scenario_yaml, tmp_path):
    """End to end: a process holding the lock makes ``agentsim run`` fail at once, exit 2."""
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "from agentsim.run_directory import StagedDirectory\n"
        f"with StagedDirectory({str(out)!r}, force=False):\n"
        "    print('holding', flush=True)\n"
        "    time.sleep(120)\n")], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        proc = run_cli("run", str(small_scenario_yaml), "--out", str(out), "--quiet")
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"error: {out}: another agentsim process is writing to this directory; " \
                                  "wait for it or choose another --out"


def test_staging_left_by_a_killed_process_is_removed_by_the_next_writer(tmp_path):
    out = tmp_path / "run"
    stale = tmp_path / ".run.tmp-killed"
    stale.mkdir()
    (stale / "requests.parquet").write_bytes(b"partial")
    with StagedDirectory(out, force=False) as target:
        assert not stale.exists()
        target.commit()
    assert _siblings(out) == []


@pytest.mark.parametrize("content", [b"", b'{"requests": 3', b"[]"], ids=["empty", "truncated", "list"])
def test_sweep_resume_redoes_a_run_whose_summary_is_unreadable(tmp_path, content):
    store = SweepStore(tmp_path / "sweep")
    run = store.run_dir("cell", 0)
    run.mkdir(parents=True)
    (run / "summary.json").write_bytes(content)
    assert not store.is_done("cell", 0)
    assert store.load_summary("cell", 0) is None
    store.write_outcome(RunOutcome(cell_id="cell", seed=0, summary={"requests": 4}, tables_parquet={}))
    assert store.is_done("cell", 0) and read_json_object(run / "summary.json")["requests"] == 4
    assert _siblings(run) == []


def test_sweep_rewrites_a_run_directory_a_killed_run_left_without_summary(tmp_path):
    store = SweepStore(tmp_path / "sweep")
    run = store.run_dir("cell", 3)
    run.mkdir(parents=True)
    (run / "requests.parquet").write_bytes(b"half-written")
    assert not store.is_done("cell", 3)
    store.write_outcome(RunOutcome(cell_id="cell", seed=3, summary={"requests": 4}, tables_parquet={}))
    assert sorted(p.name for p in run.iterdir()) == ["summary.json"]


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_sweep_pool_workers_die_when_the_sweep_is_killed(small_scenario_yaml, tmp_path):
    """SIGKILL of the sweep process alone (no handler runs) must not orphan its pool workers."""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"base: {small_scenario_yaml}\nset: {{duration_s: 3h}}\nseeds: 2\n"
                     "axes: {grid: {hardware.kv_capacity_bytes: [1GB, 2GB, 3GB, 4GB]}}\n")
    process = subprocess.Popen([sys.executable, "-m", "agentsim.cli", "sweep", str(sweep), "--out",
                                str(tmp_path / "out"), "--workers", "2", "-q"], cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    workers: list[int] = []
    try:
        deadline = time.time() + 120
        while time.time() < deadline and len(workers) < 2:
            workers = [pid for pid in _children(process.pid) if _alive(pid)]
            time.sleep(0.1)
        assert len(workers) >= 2, "the sweep never started its pool"
        os.kill(process.pid, signal.SIGKILL)  # the sweep alone, not its process group
        process.wait(30)
        deadline = time.time() + 30
        while time.time() < deadline and any(_alive(pid) for pid in workers):
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in workers), "pool workers outlived the sweep"
    finally:
        for pid in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if process.poll() is None:
            process.kill()
