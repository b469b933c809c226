"""Damaged checkpoints as a user meets them, on `python -m bertjax.main` and
`python -m bertjax.convert export` in subprocesses: flipped bits and truncated files in
the newest checkpoint, every checkpoint damaged, and kill -9 after a fallback. No
damaged checkpoint is trained on or exported, and a good earlier one always survives."""

import os
import re
import subprocess
import sys

import pytest
from faults_test import finish, last_line, start, steps, train_lines, wait_until
from support import REPO

pytestmark = pytest.mark.integration

# Checkpoints at steps 2 and 4; all kept.
RUN = ("--config.checkpoint_every_steps=2", "--config.checkpoints_to_keep=10")


def data_files(workdir, step: int) -> list[str]:
    """The files of a step's arrays (not its metadata), largest first."""
    state_dir = os.path.join(workdir, "checkpoints", str(step), "state")
    found = [
        os.path.join(root, name)
        for root, _, names in os.walk(state_dir)
        if os.path.basename(root) == "d"
        for name in names
    ]
    return sorted(found, key=os.path.getsize, reverse=True)


def flip_low_bits(path: str, count: int = 100) -> None:
    with open(path, "rb") as f:
        data = bytearray(f.read())
    for i in range(len(data) // 2, min(len(data), len(data) // 2 + count)):
        data[i] ^= 1
    with open(path, "wb") as f:
        f.write(bytes(data))


def truncate(path: str) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def warnings(stderr: str) -> list[str]:
    """absl's warning lines, without their prefix."""
    return [re.sub(r"^W\d{4} [\d:.]+ +\d+ \S+\] ", "", line) for line in stderr.splitlines()
            if line.startswith("W")]  # fmt: skip


@pytest.fixture
def four_steps(tmp_path, small_vocab_file):
    """A run of 4 steps with checkpoints at 2 and 4: its workdir."""
    workdir = str(tmp_path / "run")
    code, stderr = finish(start(workdir, small_vocab_file, "--config.num_train_steps=4", *RUN))
    assert code == 0, stderr
    assert steps(workdir) == [2, 4]
    return workdir


@pytest.mark.parametrize(
    "damage, reason", [(flip_low_bits, r"\S+ differs from what was written"), (truncate, "unreadable: ")]
)  # fmt: skip
def test_a_damaged_newest_checkpoint_is_moved_aside_and_the_run_resumes_before_it(
    four_steps, small_vocab_file, damage, reason
):
    workdir = four_steps
    damage(data_files(workdir, 4)[0])
    before = {r["step"]: r for r in train_lines(workdir)}
    process = start(workdir, small_vocab_file, "--config.num_train_steps=6", *RUN)
    code, stderr = finish(process)
    assert code == 0, stderr
    moved = os.path.join(workdir, "damaged_checkpoints", "4")
    said = warnings(stderr)
    assert re.fullmatch(
        rf"{workdir}/checkpoints/4: damaged, {reason}.*; moved to {moved}", said[0]
    ), said
    assert said[1] == "resuming from step 2, the newest checkpoint that verifies"
    assert "Traceback" not in stderr
    assert os.path.isdir(moved)  # kept for a look, never deleted
    assert steps(workdir) == [2, 4, 6]
    # Steps 3 and 4 trained again from step 2's state: the same losses as the first time.
    after = {r["step"]: r for r in train_lines(workdir)}
    assert sorted(after) == list(range(1, 7))
    for step in (3, 4):
        assert after[step]["loss"] == before[step]["loss"]


def test_with_every_checkpoint_damaged_the_run_stops_in_one_line(four_steps, small_vocab_file):
    workdir = four_steps
    for step in (2, 4):
        flip_low_bits(data_files(workdir, step)[0])
    code, stderr = finish(start(workdir, small_vocab_file, "--config.num_train_steps=6", *RUN))
    assert code == 2, stderr
    assert last_line(stderr) == (
        f"error: {workdir}/checkpoints: no checkpoint verifies (steps 4, 2 are damaged and "
        f"now in {workdir}/damaged_checkpoints); start the run in a new workdir"
    )
    assert "Traceback" not in stderr
    assert sorted(os.listdir(os.path.join(workdir, "damaged_checkpoints"))) == ["2", "4"]


def test_a_kill_after_a_fallback_keeps_the_step_resumed_from(four_steps, small_vocab_file):
    workdir = four_steps
    flip_low_bits(data_files(workdir, 4)[0])
    # One checkpoint kept: without the rule, the save of step 4 would rotate out step 2.
    run = ("--config.num_train_steps=8", "--config.checkpoint_every_steps=2",
           "--config.checkpoints_to_keep=1", "--config.log_every_steps=1")  # fmt: skip
    process = start(workdir, small_vocab_file, *run)
    wait_until(lambda: 6 in steps(workdir), process)
    process.kill()
    process.wait()
    assert 2 in steps(workdir)  # the newest checkpoint known to verify
    code, stderr = finish(start(workdir, small_vocab_file, *run))
    assert code == 0, stderr
    assert not [line for line in warnings(stderr) if "damaged" in line]
    assert max(steps(workdir)) == 8


def test_export_skips_a_damaged_newest_checkpoint_and_leaves_the_workdir_as_it_is(
    four_steps, tmp_path
):
    workdir = four_steps
    for path in data_files(workdir, 4):  # the parameters are in one of them
        flip_low_bits(path)
    out = tmp_path / "exported"
    command = [sys.executable, "-m", "bertjax.convert", "export", "--format", "hf"]
    result = subprocess.run(
        [*command, workdir, str(out)], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"exported {workdir} step 2 to {out}")
    said = warnings(result.stderr)
    assert re.fullmatch(rf"{workdir}/checkpoints/4: damaged, .*", said[0]), said
    assert said[1] == "using step 2, the newest checkpoint that verifies"
    assert steps(workdir) == [2, 4]  # a reader moves nothing
