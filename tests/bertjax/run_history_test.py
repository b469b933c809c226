"""One run's history per workdir, on `python -m bertjax.main` in subprocesses: after a
kill -9 the workdir takes no other config, checkpoint or not, and a resumed run logs each
step once, in metrics.jsonl and in TensorBoard."""

import os
import re
import shutil
import signal

import pytest
import tensorflow as tf
from faults_test import PREEMPTED, finish, last_line, start, steps, train_lines, wait_until

pytestmark = pytest.mark.integration


def read(workdir, name) -> str:
    with open(os.path.join(workdir, name), encoding="utf-8") as f:
        return f.read()


def logged_step(process) -> int | None:
    """Reads the run's console to its next train line: that line's step, or None once
    the run has ended."""
    for line in process.stdout:
        match = re.match(r"step +(\d+)/", line)
        if match:
            return int(match.group(1))
    return None


def tensorboard_steps(workdir) -> list[int]:
    """The steps of the train/loss points of every event file, in order."""
    folder = os.path.join(workdir, "tensorboard")
    return sorted(
        event.step
        for name in os.listdir(folder)
        for event in tf.compat.v1.train.summary_iterator(os.path.join(folder, name))
        for value in event.summary.value
        if value.tag == "train/loss"
    )


def test_a_workdir_without_a_checkpoint_takes_no_other_config(
    killed_run, tmp_path, small_vocab_file
):
    # A run killed with kill -9 after 5 steps (conftest.py's killed_run), copied.
    workdir = str(tmp_path / "run")
    shutil.copytree(killed_run["workdir"], workdir, ignore=shutil.ignore_patterns(".lock"))
    run = killed_run["overrides"]
    assert not steps(workdir)
    config, history = read(workdir, "config.json"), read(workdir, "metrics.jsonl")

    other = start(workdir, small_vocab_file, *run, "--config.optimizer.learning_rate=5e-4")
    if logged_step(other) is not None:
        other.kill()
        pytest.fail(f"a run with another learning rate was accepted: {other.communicate()[1]}")
    code, stderr = finish(other)
    assert code == 2, stderr
    assert last_line(stderr) == (
        f"error: {workdir} holds a run with another config (optimizer.learning_rate 0.002 "
        "-> 0.0005); resume it with its config.json (a run may only get longer), or use a "
        "new workdir"
    )
    assert "Traceback" not in stderr
    assert read(workdir, "config.json") == config
    assert read(workdir, "metrics.jsonl") == history

    # The same config is the same run: with nothing saved, it starts again at step 1.
    again = start(workdir, small_vocab_file, *run)
    assert logged_step(again) == 1
    while (step := logged_step(again)) is not None and step < 3:
        pass
    again.send_signal(signal.SIGTERM)
    code, stderr = finish(again)
    assert code == PREEMPTED, stderr
    stopped = int(re.match(r"stopped: SIGTERM at step (\d+):", last_line(stderr)).group(1))
    assert [r["step"] for r in train_lines(workdir)] == list(range(1, stopped + 1))
    assert tensorboard_steps(workdir) == list(range(1, stopped + 1))
    assert read(workdir, "config.json") == config


def test_a_resumed_run_logs_each_step_once(tmp_path, small_vocab_file):
    workdir = str(tmp_path / "run")
    run = ("--config.num_train_steps=120", "--config.checkpoint_every_steps=50")
    first = start(workdir, small_vocab_file, *run)
    # Killed some steps after the checkpoint of step 50 committed, before the next one.
    wait_until(lambda: len(train_lines(workdir)) >= 60 and steps(workdir) == [50], first)
    first.kill()
    first.wait()
    checkpointed = max(steps(workdir))
    killed = {r["step"]: r for r in train_lines(workdir)}
    assert max(killed) > checkpointed  # steps the resumed run logs again

    code, stderr = finish(start(workdir, small_vocab_file, *run))
    assert code == 0, stderr
    lines = train_lines(workdir)
    assert [r["step"] for r in lines] == list(range(1, 121))
    assert tensorboard_steps(workdir) == list(range(1, 121))
    for record in lines:
        before = killed.get(record["step"])
        if record["step"] <= checkpointed:
            assert record == before  # kept as the killed run wrote it
        elif before is not None:
            # Written again by the resumed run (its own rates), which trains the same steps.
            assert record != before and record["loss"] == before["loss"], record["step"]
