"""Running the notebooks of experiments/notebooks as a user's Jupyter would."""

import nbclient
import nbformat

from support import REPO

NOTEBOOKS = REPO / "experiments" / "notebooks"


def run_notebook(name: str, monkeypatch) -> tuple[str, int]:
    """Executes experiments/notebooks/NAME: (the text its cells printed, how many images)."""
    # The kernel sees one CPU device, as a notebook on a laptop would.
    monkeypatch.setenv("XLA_FLAGS", "")
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": NOTEBOOKS}}
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    text = "".join(output.get("text", "") for output in outputs)
    return text, sum("image/png" in output.get("data", {}) for output in outputs)
