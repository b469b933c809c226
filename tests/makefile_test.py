"""The Makefile's own targets beyond demo and test: `make minilm`."""

import json
import subprocess
import sys

import pytest
from support import REPO


@pytest.mark.integration
def test_make_minilm_imports_a_real_checkpoint_once(tmp_path):
    """The README's step to a real pretrained checkpoint, offline, with this interpreter."""
    workdir = tmp_path / "minilm"
    stamp = f"{sys.prefix}/.installed"
    command = [
        "make",
        "-s",
        "minilm",
        "-o",
        stamp,  # installed already: never reinstall from a test
        f"VENV={sys.prefix}",
        f"PY={sys.executable}",
        f"MINILM={workdir}",
    ]
    first = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "6 layers, hidden 384" in first.stdout + first.stderr
    model = json.loads((workdir / "model_config.json").read_text())
    assert (model["num_hidden_layers"], model["hidden_size"]) == (6, 384)
    assert (workdir / "checkpoints" / "0").is_dir()
    assert not (tmp_path / "minilm.hf").exists()  # the unpacked package is removed

    again = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "is there already" in again.stdout
