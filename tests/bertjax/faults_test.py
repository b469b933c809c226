"""Faults as a user meets them, on `python -m bertjax.main` in subprocesses: SIGTERM and
Ctrl-C at several moments, kill -9, two runs on one workdir, a full disk."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
from support import REPO, SMALL_VOCAB_SIZE

pytestmark = pytest.mark.integration

# A tiny model on the built-in corpus with conftest's small vocabulary: seconds to start.
SMALL = (
    f"--config.data.vocab_size={SMALL_VOCAB_SIZE}",
    "--config.data.max_seq_length=64",
    "--config.data.max_predictions_per_seq=10",
    "--config.data.document_buffer_size=32",
    "--config.model.hidden_size=64",
    "--config.model.num_attention_heads=2",
    "--config.model.intermediate_size=128",
    "--config.model.max_position_embeddings=64",
    "--config.train_batch_size=8",
    "--config.eval_batch_size=8",
    "--config.num_eval_steps=2",
    "--config.eval_every_steps=0",
    "--config.optimizer.warmup_steps=2",
    "--config.log_every_steps=1",
)
PREEMPTED = 75


def command(workdir, vocab, *overrides) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bertjax.main",
        "--config",
        os.path.join(REPO, "experiments/pretrain/tiny_cpu.py"),
        f"--workdir={workdir}",
        f"--config.data.vocab_file={vocab}",
        *SMALL,
        *overrides,
    ]


def start(workdir, vocab, *overrides) -> subprocess.Popen:
    # The compiled steps come from the session's compilation cache (conftest.py).
    return subprocess.Popen(
        command(workdir, vocab, *overrides),
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen, timeout=240) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=timeout)
    return process.returncode, stderr


def last_line(stderr: str) -> str:
    """The one line bertjax printed last (TensorFlow's C++ logging aside)."""
    ours = [line for line in stderr.splitlines() if re.match(r"(error|stopped): ", line)]
    return ours[-1] if ours else stderr[-2000:]


def train_lines(workdir) -> list[dict]:
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [r for r in map(json.loads, f) if r["split"] == "train"]


def wait_until(condition, process: subprocess.Popen, timeout=180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"exited with {process.returncode}: {process.stderr.read()}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError("timed out")
        time.sleep(0.2)


def steps(workdir) -> list[int]:
    """The complete checkpoints: the step folders with their manifest."""
    folder = os.path.join(workdir, "checkpoints")
    return sorted(
        int(name)
        for name in os.listdir(folder)
        if name.isdigit() and os.path.exists(os.path.join(folder, name, "manifest.json"))
    )


def test_sigterm_saves_the_step_in_hand_and_the_resumed_run_matches(tmp_path, small_vocab_file):
    run = (
        "--config.num_train_steps=60",
        "--config.checkpoint_every_steps=50",
        "--config.model.hidden_dropout_prob=0.1",  # dropout on: its rngs must resume too
    )
    straight, stopped = str(tmp_path / "straight"), str(tmp_path / "stopped")
    # Trained to the end, then stopped during the end-of-run report.
    process = start(straight, small_vocab_file, *run, "--fill_mask_examples=200")
    for line in process.stdout:
        if line.startswith("fill-mask on held-out sentences"):
            process.send_signal(signal.SIGTERM)
            break
    code, stderr = finish(process)
    assert code == PREEMPTED, stderr
    assert last_line(stderr) == (
        "stopped: SIGTERM during the end-of-run report; the run was saved before it"
    )
    assert steps(straight) == [50, 60]

    process = start(stopped, small_vocab_file, *run)
    wait_until(lambda: len(train_lines(stopped)) >= 20, process)
    process.send_signal(signal.SIGTERM)
    code, stderr = finish(process)
    assert code == PREEMPTED, stderr
    match = re.fullmatch(
        r"stopped: SIGTERM at step (\d+): checkpoint \1 saved in ([\d.]+) s; run the same "
        r"command to resume",
        last_line(stderr),
    )
    assert match, last_line(stderr)
    step = int(match.group(1))
    assert 20 <= step < 50 and steps(stopped) == [step]
    print(f"\nSIGTERM at step {step}: saved in {match.group(2)} s")

    code, stderr = finish(start(stopped, small_vocab_file, *run))
    assert code == 0, stderr
    assert "replaying" not in stderr  # the checkpoint said where the input stood
    by_step = {r["step"]: r["loss"] for r in train_lines(stopped)}
    assert by_step == {r["step"]: r["loss"] for r in train_lines(straight)}
    # The step resumed from stays: the newest checkpoint known to verify (checkpoint.py).
    assert steps(stopped) == [step, 50, 60]


def test_one_run_per_workdir_ctrl_c_and_kill_9(killed_run, tmp_path, small_vocab_file):
    # A second run on the workdir while the first trained (conftest.py's killed_run).
    killed, second = killed_run["workdir"], killed_run["second"]
    assert second["code"] == 2
    assert second["last_line"].startswith(
        f"error: {killed}: in use by the run of process {killed_run['pid']} on "
    ), second["last_line"]

    # kill -9 leaves the lock file but not the lock: the next run starts at once.
    assert os.path.exists(os.path.join(killed, ".lock")) and not steps(killed)
    workdir = str(tmp_path / "run")
    shutil.copytree(killed, workdir)  # its lock file too
    run = killed_run["overrides"]
    again = start(workdir, small_vocab_file, *run)
    first_line = next(line for line in again.stdout if line.startswith("step "))
    assert re.match(r"step +1/", first_line), first_line  # nothing was saved to resume from

    # Ctrl-C while it trains.
    again.send_signal(signal.SIGINT)
    code, stderr = finish(again)
    assert code == PREEMPTED, stderr
    step = int(re.match(r"stopped: SIGINT at step (\d+):", last_line(stderr)).group(1))
    assert step >= 1 and steps(workdir) == [step]
    assert [r["step"] for r in train_lines(workdir)] == list(range(1, step + 1))


def test_a_full_disk_is_one_line_before_the_first_step(tmp_path, small_vocab_file):
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a small tmpfs as a full disk")
    disk = tmp_path / "disk"
    disk.mkdir()
    workdir = disk / "run"
    # A 1 MiB disk in a private mount namespace; a checkpoint of this model takes ~3 MiB.
    script = f"mount -t tmpfs -o size=1m tmpfs {disk} && exec " + " ".join(
        command(workdir, small_vocab_file, "--config.num_train_steps=20")
    )
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs tmpfs {disk}"])
    if probe.returncode:
        pytest.skip("cannot mount a tmpfs in a user namespace here")
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 2, result.stderr
    assert re.fullmatch(
        rf"error: {workdir}/checkpoints: \d+ MiB free, a checkpoint needs about \d+ MiB; "
        r"free some space \(the latest complete checkpoint: none\)",
        last_line(result.stderr),
    )
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("space_comes_back", [False, True], ids=["stays_full", "freed"])
def test_a_disk_that_fills_during_a_save_is_one_line_naming_the_latest_complete_checkpoint(
    tmp_path, small_vocab_file, space_comes_back
):
    # Once: 51 tracebacks, exit 1, and "the latest complete checkpoint: step 9" (orbax's
    # unfinished save) or "none" while step 6 was complete: a user told "none" may
    # throw the workdir away.
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a small tmpfs as a full disk")
    disk = tmp_path / "disk"
    disk.mkdir()
    workdir = disk / "run"
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs tmpfs {disk}"])
    if probe.returncode:
        pytest.skip("cannot mount a tmpfs in a user namespace here")
    # Checkpoints at 3, 6 and 9, one kept; the disk is filled as soon as the save of
    # step 9 begins (its folder appears), and with `space_comes_back` emptied again.
    run = command(workdir, small_vocab_file, "--config.num_train_steps=12",
                  "--config.checkpoint_every_steps=3", "--config.checkpoints_to_keep=1")  # fmt: skip
    fill = (
        f"while [ ! -d {workdir}/checkpoints/9 ]; do sleep 0.005; done; "
        # All but 1 MiB: the save fails, not first a line of metrics or events.
        f"dd if=/dev/zero of={disk}/filler bs=64k 2>/dev/null; "
        f"truncate -s -1M {disk}/filler; "
        + (f"sleep 2; rm {disk}/filler" if space_comes_back else "true")
    )
    script = f"mount -t tmpfs -o size=30m tmpfs {disk} && {{ ({fill}) & exec {' '.join(run)}; }}"
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 2, result.stderr
    assert re.fullmatch(
        rf"error: .*{workdir}/checkpoints.*the latest complete checkpoint: step 6\)?",
        last_line(result.stderr),
    ), result.stderr[-3000:]
    # Nothing after it, and no traceback: neither orbax's threads' nor the ~100 of
    # TensorStore's writes calling back into orbax's closed event loop, nor (its cause
    # hidden) a second failure of orbax's own close, nor TensorFlow finalizing the
    # input's iterator after the interpreter.
    assert result.stderr.rstrip().splitlines()[-1] == last_line(result.stderr), result.stderr
    assert "Traceback" not in result.stderr, result.stderr[-3000:]


def test_a_non_finite_loss_ends_the_run_after_the_save_in_flight(tmp_path, small_vocab_file):
    workdir = str(tmp_path / "run")
    # Step 1 moves the parameters to about 1e30 (finite, so saved); step 2's loss is not.
    blow_up = (
        "--config.num_train_steps=20",
        "--config.checkpoint_every_steps=1",
        "--config.optimizer.learning_rate=1e30",
        "--config.optimizer.warmup_steps=0",
        "--config.optimizer.max_grad_norm=0",
    )
    code, stderr = finish(start(workdir, small_vocab_file, *blow_up))
    assert code == 2, stderr
    assert re.fullmatch(
        r"error: non-finite loss \(\S+\) by step 2; no checkpoint written after it\. .*",
        last_line(stderr),
    ), last_line(stderr)
    assert os.listdir(os.path.join(workdir, "checkpoints")) == ["1"]  # committed, nothing partial


def test_a_corpus_of_three_documents_is_too_small_in_one_line(tmp_path, small_vocab_file):
    # It was told to raise config.data.eval_fraction, as if the split were at fault.
    corpus = tmp_path / "three.txt"
    corpus.write_text("One sentence.\n\nAnother one.\n\nA third.\n", encoding="utf-8")
    workdir = tmp_path / "run"
    code, stderr = finish(
        start(workdir, small_vocab_file, "--config.data.source=text",
              f"--config.data.text_files={corpus}", "--config.eval_every_steps=2")
    )  # fmt: skip
    assert code == 2, stderr
    assert last_line(stderr) == (
        f"error: config.data.text_files={str(corpus)!r}: the corpus is too small, 3 documents: "
        "next-sentence prediction needs 2 in each split, about 20 at "
        "config.data.eval_fraction=0.1; add documents"
    )
    assert "Traceback" not in stderr


def test_a_full_disk_under_the_tensorboard_summaries_is_one_line(tmp_path, small_vocab_file):
    # Once three lines of TensorFlow's ("{{function_node __wrapped__...}} ...; No space left
    # on device", "Failed to flush 1 events to ...", ...).
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a small tmpfs as a full disk")
    workdir = tmp_path / "run"
    summaries = workdir / "tensorboard"
    summaries.mkdir(parents=True)
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs tmpfs {summaries}"])
    if probe.returncode:
        pytest.skip("cannot mount a tmpfs in a user namespace here")
    # A 64 KiB disk with one 4 KiB page free: the summaries of a few steps fill it.
    fill = f"dd if=/dev/zero of={summaries}/filler bs=4k count=15 2>/dev/null"
    script = f"mount -t tmpfs -o size=64k tmpfs {summaries} && {fill} && exec " + " ".join(
        command(workdir, small_vocab_file, "--config.num_train_steps=40")
    )
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 2, result.stderr
    assert last_line(result.stderr) == (
        f"error: {workdir}: the disk is full (no space left for the TensorBoard summaries in "
        f"{summaries}); free some space, then run the same command to resume"
    )
    assert "Traceback" not in result.stderr and "Failed to flush" not in result.stderr
