"""Examples that travel: `agentsim examples [--copy DIR]`, fit files found among the packaged fits,
the README's Python snippet from any directory, and a wheel that runs its examples outside the
checkout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from agentsim.errors import InputError
from tests.conftest import ROOT, run_cli


def test_examples_lists_every_kind():
    proc = run_cli("examples")
    assert proc.returncode == 0, proc.stderr
    flat = "".join(proc.stdout.split())
    for name in ("scenarios/coding-agents.yaml", "sweeps/policy-capacity.yaml", "fits/claude-code.yaml",
                 "notebooks/03-lru-vs-policies.ipynb"):
        assert name in flat, name


def test_examples_copy_keeps_the_layout_and_never_overwrites(tmp_path):
    out = tmp_path / "d"
    proc = run_cli("examples", "--copy", str(out))
    assert proc.returncode == 0, proc.stderr
    assert (out / "scenarios" / "coding-agents.yaml").read_text() == (ROOT / "scenarios" / "coding-agents.yaml").read_text()
    assert (out / "fits" / "claude-code.yaml").exists() and (out / "notebooks" / "01-tail-latency.ipynb").exists()
    edited = out / "scenarios" / "coding-agents.yaml"
    edited.write_text(edited.read_text() + "\n# my edit\n")
    again = run_cli("examples", "--copy", str(out))
    assert again.returncode == 2 and "exists already" in again.stderr and "Traceback" not in again.stderr
    assert edited.read_text().endswith("# my edit\n")          # nothing already written is lost


def test_a_scenario_copied_alone_finds_the_packaged_fits(tmp_path):
    from agentsim.engine.loading import load_scenario

    alone = tmp_path / "mine.yaml"
    alone.write_text((ROOT / "scenarios" / "coding-agents.yaml").read_text())   # fit: ../fits/... is not beside it
    scenario = load_scenario(alone)
    assert scenario.workload.agent_classes["coding"].tool_gap_s is not None


def test_a_missing_fit_file_names_both_places(tmp_path):
    from agentsim.engine.loading import load_scenario
    from agentsim.examples import packaged_fits_dir

    alone = tmp_path / "mine.yaml"
    alone.write_text((ROOT / "scenarios" / "coding-agents.yaml").read_text().replace("claude-code.yaml", "nope.yaml"))
    with pytest.raises(InputError) as error:
        load_scenario(alone)
    message = error.value.render()
    assert "next to the scenario" in message and str(tmp_path.parent / "fits" / "nope.yaml") in message
    assert str(packaged_fits_dir() / "nope.yaml") in message and "line" in message


def readme_python_snippet() -> str:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    snippet = next(block for block in blocks if "run_scenario" in block)
    return snippet


@pytest.mark.slow
def test_readme_snippet_runs_from_anywhere(tmp_path):
    code = readme_python_snippet() + "\nprint('TTFT', result.summary['ttft_p99_s'])\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "TTFT" in proc.stdout


@pytest.mark.slow
def test_wheel_runs_its_examples_outside_the_checkout(tmp_path):
    """Build the wheel, install it in a fresh venv, copy the examples out and run one, with the
    working directory outside the checkout.

    The wheel goes in without dependencies; they come from this test environment through a
    ``.pth`` line (a ``.pth`` line adds a directory but does not run that directory's own
    ``.pth`` files, so this environment's editable agentsim stays invisible). That keeps the
    test to seconds instead of a full dependency install."""
    wheels = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                            str(ROOT), "-w", str(wheels)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr
    wheel = next(wheels.glob("agentsim-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
                              str(wheel)], capture_output=True, text=True, timeout=600)
    if install.returncode != 0 and "no such option: --python" in install.stderr:
        pytest.skip("pip older than 22.3 cannot install into another environment")
    assert install.returncode == 0, install.stderr
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = subprocess.run([str(python), "-c", "import agentsim, agentsim.examples as e; print(agentsim.__file__); "
                            "print(e.examples_root())"], capture_output=True, text=True, cwd=work, env=env)
    assert str(venv) in where.stdout and str(ROOT) not in where.stdout, where.stdout + where.stderr
    agentsim = [str(python), "-m", "agentsim.cli"]
    copy = subprocess.run(agentsim + ["examples", "--copy", "d"], capture_output=True, text=True, cwd=work, env=env)
    assert copy.returncode == 0, copy.stderr
    run = subprocess.run(agentsim + ["run", "d/scenarios/coding-agents.yaml", "--set", "duration_s=1m", "--out", "r"],
                         capture_output=True, text=True, cwd=work, env=env, timeout=600)
    assert run.returncode == 0, run.stderr
    assert (work / "r" / "summary.json").exists() and (work / "r" / "requests.parquet").exists()
    version = subprocess.run(agentsim + ["--version"], capture_output=True, text=True, cwd=work, env=env)
    assert version.stdout.startswith("agentsim ")
    # The copied notebooks execute too, with the installed package (small scale, as in test_notebooks).
    execute = ("import sys, nbformat, nbclient\n"
               "for path in sys.argv[1:]:\n"
               "    nb = nbformat.read(path, as_version=4)\n"
               "    nbclient.NotebookClient(nb, timeout=600, kernel_name='python3',\n"
               "                            resources={'metadata': {'path': 'd/notebooks'}}).execute()\n"
               "    print('executed', path)\n")
    notebooks = sorted(str(p.relative_to(work)) for p in (work / "d" / "notebooks").glob("*.ipynb"))
    assert len(notebooks) == 4
    # The seed study (04) reads sessions, which the wheel does not carry: it is pointed at the fixtures.
    sessions = str(ROOT / "tests" / "fixtures" / "traces" / "weka")
    ran = subprocess.run([str(python), "-c", execute, *notebooks], capture_output=True, text=True, cwd=work,
                         env={**env, "AGENTSIM_NOTEBOOK_SCALE": "small", "AGENTSIM_SEED_SESSIONS": sessions},
                         timeout=1800)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.count("executed") == 4
