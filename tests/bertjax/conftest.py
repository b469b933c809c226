"""The runs of `python -m bertjax.main` that several fault tests start from, each made
once a run (support.once): faults_test.py's tiny model on conftest's small vocabulary.
Read them only: a test that runs on one, or changes it, copies its workdir first."""

import os

import pytest
from faults_test import finish, last_line, start, steps, train_lines, wait_until
from support import once


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory, worker_id, small_vocab_file) -> dict:
    """A run of 4 steps to its end, checkpoints at steps 2 and 4, all kept (the damaged
    checkpoints, a finished run's goodput, a double Ctrl-C while it resumes):
    {"workdir", "overrides": what its command adds to faults_test's, "stdout"}."""
    overrides = [
        "--config.num_train_steps=4",
        "--config.checkpoint_every_steps=2",
        "--config.checkpoints_to_keep=10",
    ]

    def make(folder):
        workdir = str(folder / "run")
        process = start(workdir, small_vocab_file, *overrides)
        stdout, stderr = process.communicate(timeout=240)
        assert process.returncode == 0, stderr
        assert steps(workdir) == [2, 4]
        return {"workdir": workdir, "overrides": overrides, "stdout": stdout}

    return once(tmp_path_factory, worker_id, "finished_run", make)


@pytest.fixture(scope="session")
def killed_run(tmp_path_factory, worker_id, small_vocab_file) -> dict:
    """A long run killed with kill -9 once it logged 5 steps, before any checkpoint (one
    run a workdir, a resume with nothing saved, another config refused), and what a
    second run on the same workdir said while the first trained: {"workdir",
    "overrides", "pid": the killed process's, "second": {"code", "last_line"}}."""
    overrides = ["--config.num_train_steps=100000", "--config.checkpoint_every_steps=100000"]

    def make(folder):
        workdir = str(folder / "run")
        first = start(workdir, small_vocab_file, *overrides)
        # config.json is written once the run holds the workdir and listens for signals.
        wait_until(lambda: os.path.exists(os.path.join(workdir, "config.json")), first)
        code, stderr = finish(start(workdir, small_vocab_file, *overrides))
        wait_until(lambda: len(train_lines(workdir)) >= 5, first)
        first.kill()
        first.wait()
        return {
            "workdir": workdir,
            "overrides": overrides,
            "pid": first.pid,
            "second": {"code": code, "last_line": last_line(stderr)},
        }

    return once(tmp_path_factory, worker_id, "killed_run", make)
