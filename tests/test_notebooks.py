"""Every notebook under notebooks/ executes at small scale (AGENTSIM_NOTEBOOK_SCALE=small) and is
committed without outputs."""

from __future__ import annotations

import os

import pytest

from tests.conftest import ROOT

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_the_three_notebooks_exist():
    assert [p.name for p in NOTEBOOKS] == ["01-tail-latency.ipynb", "02-capacity-planning.ipynb",
                                           "03-lru-vs-policies.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name} has outputs"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_at_small_scale(path, monkeypatch):
    monkeypatch.setenv("AGENTSIM_NOTEBOOK_SCALE", "small")
    monkeypatch.delenv("MPLBACKEND", raising=False)   # the kernel's inline backend captures the figures
    monkeypatch.delenv("AGENTSIM_RUN_DIR", raising=False)
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()   # raises CellExecutionError with the failing cell's traceback
    images = sum(1 for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
                 if "image/png" in out.get("data", {}))
    assert images >= 3, f"{path.name} drew {images} figures"
    assert os.environ["AGENTSIM_NOTEBOOK_SCALE"] == "small"
