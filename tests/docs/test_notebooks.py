"""The notebooks run top to bottom on a fresh install, and are kept without outputs.

Each notebook checks its own story with ``assert`` cells, so running it is a test of
what it claims.  Executed with nbclient (a ``python3`` kernel from ipykernel); each must
finish within three minutes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
EXPECTED = [
    "01_calibrate_dp_sgd.ipynb",
    "02_lmo_mechanisms.ipynb",
    "03_dp_zo_laplace.ipynb",
    "04_group_wise_clipping.ipynb",
    "05_private_zeroth_order.ipynb",
    "06_lmo_paper_checked.ipynb",
    "07_sampling_schemes.ipynb",
]
TIME_LIMIT_SECONDS = 180


def test_the_notebooks_are_all_there():
    assert sorted(path.name for path in NOTEBOOKS.glob("*.ipynb")) == EXPECTED


@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_is_stored_without_outputs(name):
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(notebook)
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{name}: cell {index} has outputs"


@pytest.mark.slow
@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_runs_top_to_bottom(name, monkeypatch):
    if name.startswith(("04", "05")):
        pytest.importorskip("torch")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        timeout=TIME_LIMIT_SECONDS,
        kernel_name="python3",
        resources={"metadata": {"path": os.fspath(NOTEBOOKS)}},
    )
    client.execute()
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.get("output_type") == "error"
    ]
    assert not errors
