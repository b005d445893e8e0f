"""Interruption: Ctrl-C (SIGINT) or SIGTERM during ``agentsim run`` writes the requests finished so
far with a summary marked incomplete; during ``agentsim sweep`` finished cells are kept and a rerun
resumes."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from agentsim.results import load_run
from tests.conftest import ROOT, run_cli


#: Seconds after which a wait counts as a hang. Waits end on their condition, so under any load
#: short of a hang they pass; this only keeps a broken run or sweep from blocking the suite.
HANG_GUARD_S = 1800.0


def _as_a_foreground_job() -> None:
    """In the child before exec: SIGINT at its default, as a shell leaves it for a foreground
    command. A background job of a non-interactive shell inherits SIGINT ignored (POSIX), and
    Python keeps it ignored, so without this the tests would depend on how pytest was started."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_on_terminal(args: list[str]) -> tuple[subprocess.Popen, int]:
    """Start ``agentsim ARGS`` with stderr on a pseudo-terminal, as from a shell: the run then
    shows its progress bar there. Returns the process and the terminal's reading end."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "160", "TERM": "xterm"}
    process = subprocess.Popen([sys.executable, "-m", "agentsim.cli", *args], cwd=ROOT, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=slave, text=True, start_new_session=True, env=env,
                               preexec_fn=_as_a_foreground_job)
    os.close(slave)
    return process, master


def _read_terminal(master: int, timeout_s: float) -> str | None:
    """What the terminal shows within ``timeout_s`` ("" if nothing), None once it is closed."""
    ready, _, _ = select.select([master], [], [], timeout_s)
    if not ready:
        return ""
    try:
        data = os.read(master, 65536)
    except OSError:          # EIO: every writer closed the terminal
        return None
    return data.decode(errors="replace") if data else None


#: The progress bar's count: ``1,234/360,000 simulated s``.
PROGRESS = re.compile(r"([\d,]+)/([\d,]+) simulated s")


def _wait_for_simulated(process: subprocess.Popen, master: int, at_least_s: float,
                        timeout_s: float = HANG_GUARD_S) -> str:
    """Read the terminal until the progress bar reports ``at_least_s`` simulated seconds: the
    readiness condition (requests have finished), whatever CPU share the run gets."""
    deadline = time.time() + timeout_s
    seen = ""
    while time.time() < deadline and process.poll() is None:
        chunk = _read_terminal(master, 1.0)
        if chunk is None:
            break
        seen += chunk
        counts = [float(done.replace(",", "")) for done, _total in PROGRESS.findall(seen)]
        if counts and max(counts) >= at_least_s:
            return seen
    raise AssertionError(f"progress never reached {at_least_s} simulated s; terminal so far: {seen[-2000:]}")


def _drain(process: subprocess.Popen, master: int, timeout_s: float = HANG_GUARD_S) -> str:
    """The rest of what the process writes to the terminal, until it exits."""
    deadline = time.time() + timeout_s
    seen = ""
    while time.time() < deadline:
        chunk = _read_terminal(master, 0.5)
        if chunk is None:
            break
        seen += chunk
        if not chunk and process.poll() is not None:
            break
    return seen


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_signal_during_run_writes_finished_requests_marked_incomplete(small_scenario_yaml, tmp_path, sig, code):
    out = tmp_path / "out"
    # A long simulated span so the run is still going when the signal arrives.
    process, master = _start_on_terminal(["run", str(small_scenario_yaml), "--out", str(out), "--set", "duration_s=100h",
                                          "--set", "workload.agent_classes.coding.arrival.concurrent=16"])
    try:
        # Ready once 5 simulated minutes have passed (agents' first calls have finished by
        # then): the progress bar says so, however loaded the machine is.
        seen = _wait_for_simulated(process, master, at_least_s=300)
        assert "Ctrl-C stops" in seen
        os.kill(process.pid, sig)
        stderr = _drain(process, master)
        stdout, _ = process.communicate(timeout=HANG_GUARD_S)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(master)
    assert process.returncode == code, stderr
    assert "Traceback" not in stderr
    name = signal.Signals(sig).name
    assert f"interrupted by {name} at t=" in stderr and "complete false" in stderr
    summary, tables = load_run(out)
    assert summary["complete"] is False and summary["incomplete_reason"] == f"interrupted by {name}"
    assert 300 <= summary["simulated_s"] < 100 * 3600
    requests = tables["requests"]
    assert summary["requests"] == len(requests) > 0
    assert (requests.finish_s <= summary["simulated_s"] + 1e-9).all()
    assert summary["ttft_p99_s"] == pytest.approx(requests.ttft_s.quantile(0.99), rel=1e-6)
    assert (out / "scenario.resolved.yaml").exists()
    # An interrupted run is still a run: not overwritten without --force.
    again = run_cli("run", str(small_scenario_yaml), "--out", str(out), "--quiet")
    assert again.returncode == 2 and "--force" in again.stderr
    assert json.loads((out / "summary.json").read_text()) == summary


def test_normal_run_is_marked_complete(small_scenario_yaml, tmp_path):
    out = tmp_path / "out"
    proc = run_cli("run", str(small_scenario_yaml), "--out", str(out), "--quiet", "--set", "duration_s=1m")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is True and "incomplete_reason" not in summary


def test_stop_request_in_process(small_scenario_yaml):
    """The engine API: a StopRequest set during the run ends it at the next event."""
    from agentsim.engine.loading import load_scenario
    from agentsim.engine.simulation import StopRequest, run_scenario

    scenario = load_scenario(small_scenario_yaml, ["duration_s=10h"])
    stop = StopRequest()
    calls = []

    def progress(now_s, total_s):
        calls.append(now_s)
        if now_s >= 600:
            stop.set("stopped by test")

    result = run_scenario(scenario, progress=progress, stop=stop)
    assert result.summary["complete"] is False and result.summary["incomplete_reason"] == "stopped by test"
    assert 600 <= result.summary["simulated_s"] < 700
    assert result.summary["requests"] == len(result.tables["requests"]) > 0


def test_stop_request_after_served_requests(small_scenario_yaml):
    """``StopRequest(after_served=N)`` ends the run once N requests are served (check-timing's
    measured requests), at the event that served the N-th: the same first requests as a run
    left to its end."""
    from agentsim.engine.loading import load_scenario
    from agentsim.engine.simulation import StopRequest, run_scenario

    scenario = load_scenario(small_scenario_yaml, ["duration_s=30m"])
    full = run_scenario(scenario).tables["requests"]
    served = full[~full["rejected"]].sort_values("finish_s")
    assert len(served) > 40
    result = run_scenario(scenario, stop=StopRequest(after_served=40))
    assert result.summary["complete"] is False and result.summary["incomplete_reason"] == "40 requests served"
    early = result.tables["requests"]
    early = early[~early["rejected"]].sort_values("finish_s")
    last_s = served["finish_s"].iloc[39]
    assert 40 <= len(early) == (served["finish_s"] <= last_s).sum() < len(served)
    first = served.iloc[:40].set_index("request_id")[["ttft_s", "tpot_s"]]
    assert early.set_index("request_id").loc[first.index, ["ttft_s", "tpot_s"]].equals(first)


def _wait_until(condition, process: subprocess.Popen, what: str) -> None:
    """Poll ``condition`` until it holds; fail at once if ``process`` exits first, and after
    :data:`HANG_GUARD_S` (a hang, not a slow machine)."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not condition():
        if process.poll() is not None:
            _, stderr = process.communicate()
            raise AssertionError(f"the sweep exited ({process.returncode}) before {what}: {stderr[-2000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {HANG_GUARD_S:.0f} s")
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("executor", [["--workers", "1"], ["--workers", "2"], ["--dask", "local", "--workers", "2"]],
                         ids=["in-process", "process-pool", "dask-local"])
def test_sigint_during_sweep_keeps_finished_cells_and_rerun_resumes(small_scenario_yaml, tmp_path, executor):
    """Ctrl-C reaches the whole process group: the sweep exits 130 at once without a traceback
    (from any process: Dask workers leave it to the client), workers die with it (none is left
    holding the terminal's pipes), finished cells stay and a rerun resumes."""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"""
name: interrupt-me
base: {small_scenario_yaml}
set: {{duration_s: 6m}}
seeds: 2
axes:
  grid:
    hardware.kv_capacity_bytes: [0.5GB, 1GB, 2GB, 3GB, 4GB, 5GB, 6GB, 7GB, 8GB, 9GB]
""")
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-m", "agentsim.cli", "sweep", str(sweep), "--out", str(out),
                                *executor, "-q"], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True,
                               preexec_fn=_as_a_foreground_job)
    try:
        # Ready once two runs are written, however long a loaded machine takes to get there
        # (starting a TLS Dask cluster included); the guard only stops a hang.
        _wait_until(lambda: len(list(out.glob("cells/*/seed-*/summary.json"))) >= 2, process, "two finished runs")
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group
        _, stderr = process.communicate(timeout=HANG_GUARD_S)  # EOF only once every worker is gone too
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    finished = {p: p.stat().st_mtime_ns for p in out.glob("cells/*/seed-*/summary.json")}
    assert 2 <= len(finished) < 20, "the sweep should have been interrupted part-way"
    for path in finished:
        assert json.loads(path.read_text())["requests"] > 0
    rerun = run_cli("sweep", str(sweep), "--out", str(out), "--workers", "1", "-q", timeout=HANG_GUARD_S)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{20 - len(finished)} run, {len(finished)} already done, 0 failed" in " ".join(rerun.stdout.split())
    for path, stamp in finished.items():
        assert path.stat().st_mtime_ns == stamp  # kept, not recomputed
    assert len(pd.read_parquet(out / "results.parquet")) == 20
