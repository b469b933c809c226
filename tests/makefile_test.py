"""The Makefile's own targets beyond demo and test: `make minilm`, `make notebook`; and the
longest test files that `make test-all` starts first."""

import json
import os
import re
import subprocess
import sys

import pytest
from support import REPO, tiers


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


def requirement_names(name: str) -> set[str]:
    lines = (REPO / name).read_text().splitlines()
    return {line.split("==")[0].lower() for line in lines if line and not line.startswith("#")}


def test_jupyterlab_is_pinned_apart_from_what_make_install_installs():
    lines = (REPO / "requirements-notebook.txt").read_text().splitlines()
    pins = [line for line in lines if line and not line.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+==\d[\w.]*", pin) for pin in pins), pins
    assert "jupyterlab" in requirement_names("requirements-notebook.txt")
    for installed in ("requirements.txt", "requirements-test.txt"):
        assert "jupyterlab" not in requirement_names(installed)


def test_make_notebook_installs_jupyterlab_once_and_starts_it_on_the_venv(tmp_path):
    """Dry runs (`make -n`) for a venv without JupyterLab, then for one with it."""
    venv = tmp_path / "venv"
    # As a user types it: not as a sub-make of `make test`, which would say where it is.
    command = ["make", "--no-print-directory", "-n", "notebook", "-o", f"{venv}/.installed",
               f"VENV={venv}"]  # fmt: skip
    lab = (
        f"JUPYTER_PREFER_ENV_PATH=1 {venv}/bin/python -m jupyterlab "
        "--ServerApp.root_dir=experiments/notebooks"
    )

    def dry_run() -> list[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
        result = subprocess.run(
            command, cwd=REPO, capture_output=True, text=True, timeout=60, env=env
        )
        assert result.returncode == 0, result.stderr
        return [line.strip() for line in result.stdout.splitlines()]

    assert dry_run() == [
        f"{venv}/bin/python -m pip install --quiet -r requirements-notebook.txt",
        f"touch {venv}/.notebook-installed",
        lab,
    ]
    venv.mkdir()
    (venv / ".notebook-installed").touch()
    assert dry_run() == [lab]


def test_the_longest_files_make_test_all_starts_first_exist():
    # tiers.LONGEST_FILES is a scheduling hint: a renamed file would silently run last.
    tests = REPO / "tests"
    assert [name for name in tiers.LONGEST_FILES if not (tests / name).is_file()] == []
    assert len(set(tiers.LONGEST_FILES)) == len(tiers.LONGEST_FILES)
