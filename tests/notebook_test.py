"""The notebooks in experiments/notebooks run end to end on a tiny workdir."""

import os
import pathlib

import nbclient
import nbformat
import pytest

from bertjax import train

NOTEBOOKS = pathlib.Path(__file__).resolve().parent.parent / "experiments" / "notebooks"


@pytest.fixture(scope="module")
def tiny_workdir(tmp_path_factory, make_small_config):
    config = make_small_config()
    config.num_train_steps = 4
    config.eval_every_steps = 2
    workdir = tmp_path_factory.mktemp("notebook_run")
    train.train_and_evaluate(config, str(workdir))
    return workdir


def test_restore_and_probe_runs_and_shows_its_results(tiny_workdir, monkeypatch):
    monkeypatch.setenv("BERTJAX_WORKDIR", str(tiny_workdir))
    # The kernel sees one CPU device, as a notebook on a laptop would.
    monkeypatch.setenv("XLA_FLAGS", "")
    path = NOTEBOOKS / "restore_and_probe.ipynb"
    notebook = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": NOTEBOOKS}}
    ).execute()
    text = "".join(
        output.get("text", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )
    assert "step 4: 2 layers, hidden 64" in text
    assert text.count(" -> ") == 3
    assert "does not exist" not in text
    images = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if "image/png" in output.get("data", {})
    ]
    assert len(images) == 3  # similarity heatmap, attention map, training curves
    assert os.path.exists(tiny_workdir / "metrics.jsonl")
