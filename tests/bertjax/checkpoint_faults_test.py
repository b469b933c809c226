"""Damaged checkpoints as a user meets them, on `python -m bertjax.main` and
`python -m bertjax.convert export` in subprocesses: each kind of damage in one
checkpoint of a run, every checkpoint damaged, and kill -9 after a fallback. No
damaged checkpoint is trained on or exported, and a good earlier one always survives."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zlib

import numpy as np
import pytest
import tensorstore as ts
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


def flip_a_bit_of(workdir, step: int, part: str) -> str:
    """Flips the lowest bit of the first value of the first array of a step whose name
    holds `part`, writing it back through tensorstore so that it still reads: corruption
    no decoder notices. Returns the array's name as bertjax reports it."""
    base = f"file://{os.path.join(workdir, 'checkpoints', str(step), 'state')}"
    keys = ts.KvStore.open({"driver": "ocdbt", "base": base}).result().list().result()
    names = sorted(key.decode()[: -len("/.zarray")] for key in keys if key.endswith(b"/.zarray"))
    name = next(name for name in names if part in name)
    spec = {"driver": "zarr", "kvstore": {"driver": "ocdbt", "base": base}, "path": name}
    array = ts.open(spec).result()
    first = array[(0,) * array.rank]
    words = np.asarray(first.read().result()).reshape(1).view(np.uint32)
    first.write((words ^ 1).view(np.float32)[0]).result()
    return name.replace(".", "/")


def truncate(path: str) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def warnings(stderr: str) -> list[str]:
    """absl's warning lines, without their prefix."""
    return [re.sub(r"^W\d{4} [\d:.]+ +\d+ \S+\] ", "", line) for line in stderr.splitlines()
            if line.startswith("W")]  # fmt: skip


@pytest.fixture
def four_steps(finished_run, tmp_path):
    """A copy of conftest.py's finished_run (4 steps, checkpoints at 2 and 4, all kept, as
    RUN saves them), for one test to change."""
    workdir = str(tmp_path / "run")
    shutil.copytree(finished_run["workdir"], workdir, ignore=shutil.ignore_patterns(".lock"))
    return workdir


def edit_manifest(workdir, step: int, *, keep_checksum: bool = False, **values) -> None:
    """Sets keys of a step's manifest as a text editor would; with `keep_checksum`, its
    checksum is made again to match (a forged manifest)."""
    path = os.path.join(workdir, "checkpoints", str(step), "manifest.json")
    with open(path, encoding="utf-8") as f:
        manifest = json.load(f)
    manifest.update(values)
    if keep_checksum:
        rest = {key: value for key, value in manifest.items() if key != "checksum"}
        text = json.dumps(rest, sort_keys=True, separators=(",", ":"))
        manifest["checksum"] = zlib.crc32(text.encode())
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f)


def a_parameter_fingerprint_changed(workdir, step: int) -> None:
    path = os.path.join(workdir, "checkpoints", str(step), "manifest.json")
    with open(path, encoding="utf-8") as f:
        arrays = json.load(f)["arrays"]
    name = next(name for name in sorted(arrays) if name.startswith("params/"))
    arrays[name]["fingerprint"] ^= 1
    edit_manifest(workdir, step, keep_checksum=True, arrays=arrays)


# What bertjax says of a file of the state that is not as the manifest lists it.
CHANGED_FILE = (
    r"state/\S+ (differs from what was written \(CRC-32 mismatch\)"
    r"|is truncated or grown \(\d+ bytes, \d+ written\))"
)

# Each way a checkpoint is damaged, one a step, newest first, and what bertjax says of it.
# Every file of the state is checked, so readers, which need only the parameters, skip
# a step whose optimizer state alone is damaged too (its arrays share files).
DAMAGES = (
    (
        lambda w, step: open(
            os.path.join(w, "checkpoints", str(step), "manifest.json"), "w", encoding="utf-8"
        ).close(),
        "its manifest.json is not valid JSON",
    ),
    (
        lambda w, step: edit_manifest(w, step, data={"stream_positions": [[4, 0, 0, 0]]}),
        r"its manifest.json differs from what was written \(checksum mismatch\)",
    ),
    (
        lambda w, step: a_parameter_fingerprint_changed(w, step),
        r"params/\S+ differs from what was written \(fingerprint mismatch\)",
    ),
    (
        lambda w, step: (flip_low_bits(data_files(w, step)[0]), flip_a_bit_of(w, step, "params.")),
        CHANGED_FILE,
    ),
    (lambda w, step: [truncate(path) for path in data_files(w, step)], CHANGED_FILE),
    (
        lambda w, step: os.remove(os.path.join(w, "checkpoints", str(step), "state", "_METADATA")),
        "state/_METADATA is missing",
    ),
    # Trained on, a damaged Adam moment once ended in "non-finite parameters ... lower
    # config.optimizer.learning_rate", blaming the learning rate for a damaged file.
    (lambda w, step: flip_a_bit_of(w, step, ".mu."), CHANGED_FILE),
)


def test_each_damaged_checkpoint_is_named_skipped_by_readers_and_moved_aside_by_a_run(
    small_vocab_file, tmp_path
):
    workdir = str(tmp_path / "run")
    last = 2 * (len(DAMAGES) + 1)  # a checkpoint every 2 steps: one per damage, then step 2
    code, stderr = finish(
        start(workdir, small_vocab_file, f"--config.num_train_steps={last}", *RUN)
    )
    assert code == 0, stderr
    before = {r["step"]: r for r in train_lines(workdir)}
    damaged = []
    for (damage, reason), step in zip(DAMAGES, range(last, 2, -2), strict=True):
        damage(workdir, step)
        damaged.append(
            rf"{workdir}/checkpoints/{step}: damaged, {reason.format(w=workdir, step=step)}"
        )

    # A reader (a notebook's bertjax.restore, convert export) uses step 2, the newest
    # that verifies, and moves nothing.
    for reader in ("restore", "export"):
        printed, said = read(workdir, reader, str(tmp_path / "exported"))
        used = printed.strip() if reader == "restore" else printed.split()[3]
        assert used == "2", printed
        for pattern, line in zip(damaged, said, strict=False):
            assert re.fullmatch(pattern, line), (pattern, said)
        assert said[len(damaged)] == "using step 2, the newest checkpoint that verifies", said
        assert steps(workdir) == list(range(2, last + 1, 2))

    # The same run again moves each aside, kept for a look, and trains again from step 2.
    code, stderr = finish(
        start(workdir, small_vocab_file, f"--config.num_train_steps={last}", *RUN)
    )
    assert code == 0, stderr
    said = warnings(stderr)
    for pattern, line, step in zip(damaged, said, range(last, 2, -2), strict=False):
        moved = os.path.join(workdir, "damaged_checkpoints", str(step))
        assert re.fullmatch(rf"{pattern}; moved to {moved}", line), (pattern, said)
        assert os.path.isdir(moved)
    assert said[len(damaged)] == "resuming from step 2, the newest checkpoint that verifies"
    assert "Traceback" not in stderr and "learning_rate" not in stderr
    assert steps(workdir) == list(range(2, last + 1, 2))
    # Steps 3 on trained again from step 2's state: the same losses as the first time.
    after = {r["step"]: r for r in train_lines(workdir)}
    assert sorted(after) == list(range(1, last + 1))
    for step in range(3, last + 1):
        assert after[step]["loss"] == before[step]["loss"]


def test_a_kill_during_the_first_save_after_a_fallback_keeps_the_step_resumed_from(
    four_steps, small_vocab_file
):
    workdir = four_steps
    flip_low_bits(data_files(workdir, 4)[0])
    folder = os.path.join(workdir, "checkpoints")
    run = ("--config.num_train_steps=8", "--config.checkpoint_every_steps=2",
           "--config.checkpoints_to_keep=1")  # fmt: skip
    process = start(workdir, small_vocab_file, *run)
    # Killed as soon as the save of step 4 (the first after falling back to 2) has begun,
    # before its manifest makes it complete.
    deadline = time.monotonic() + 180
    moved = os.path.join(workdir, "damaged_checkpoints", "4")
    while not (os.path.isdir(moved) and "4" in os.listdir(folder)):
        assert process.poll() is None and time.monotonic() < deadline, "no save of step 4 seen"
        time.sleep(0.001)
    process.kill()
    process.wait()
    assert 4 not in steps(workdir) and 2 in steps(workdir)
    code, stderr = finish(start(workdir, small_vocab_file, *run))
    assert code == 0, stderr
    assert not [line for line in warnings(stderr) if ": damaged," in line]
    assert steps(workdir) == [2, 8]  # 2 kept: the run resumed from it
    assert sorted(os.listdir(folder)) == ["2", "8"]


def test_a_step_half_deleted_by_a_kill_during_rotation_is_moved_aside(four_steps, small_vocab_file):
    # kill -9 while rotation deletes a step leaves part of its folder, without its
    # manifest (deleted first); the next run once stopped on it.
    workdir = four_steps
    half = os.path.join(workdir, "checkpoints", "2")
    os.remove(os.path.join(half, "manifest.json"))
    os.remove(os.path.join(half, "state", "_METADATA"))
    code, stderr = finish(start(workdir, small_vocab_file, "--config.num_train_steps=6", *RUN))
    assert code == 0, stderr
    moved = os.path.join(workdir, "damaged_checkpoints", "2")
    assert warnings(stderr)[0] == (
        f"{half}: not a complete bertjax checkpoint (no manifest.json: a save cut short, or "
        f"not ours); moved to {moved}"
    )
    assert os.path.isdir(moved)
    assert steps(workdir) == [4, 6]


def test_with_every_checkpoint_damaged_the_run_stops_in_one_line_every_time(
    four_steps, small_vocab_file
):
    # Once the second run found no checkpoint (all moved aside) and trained from step 0.
    workdir = four_steps
    for step in (2, 4):
        flip_low_bits(data_files(workdir, step)[0])
    for _ in range(2):
        code, stderr = finish(start(workdir, small_vocab_file, "--config.num_train_steps=6", *RUN))
        assert code == 2, stderr
        assert last_line(stderr) == (
            f"error: {workdir}/checkpoints: no checkpoint verifies (steps 4, 2 are damaged, "
            "left in place for a look); start the run in a new workdir"
        )
        assert "Traceback" not in stderr
        assert steps(workdir) == [2, 4]
        assert not os.path.exists(os.path.join(workdir, "damaged_checkpoints"))


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
    # The kill may land while rotation deletes the step rotated out after 6 (4), or
    # during the next save: that folder is moved aside; nothing else is reported, step 2
    # least of all.
    reported = [line for line in warnings(stderr) if "damaged" in line]
    half_deleted = "not a complete bertjax checkpoint (no manifest.json"
    assert all(half_deleted in line for line in reported), reported
    assert not [line for line in reported if "/checkpoints/2:" in line], reported
    assert max(steps(workdir)) == 8


RESTORE = "import sys, bertjax; print(bertjax.restore(sys.argv[1]).step)"


def read(workdir, reader: str, out) -> tuple[str, list[str]]:
    """`bertjax.restore` or `convert export` on `workdir` as a user runs them: (what it
    printed, its warnings)."""
    if reader == "restore":
        command = [sys.executable, "-c", RESTORE, workdir]
    else:
        command = [
            sys.executable,
            "-m",
            "bertjax.convert",
            "export",
            "--format",
            "hf",
            workdir,
            out,
        ]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    if reader == "export":
        return result.stdout, warnings(result.stderr)
    # In a notebook's Python, absl's warnings go through the logging module's format.
    prefix = "WARNING:absl:"
    lines = result.stderr.splitlines()
    return result.stdout, [line[len(prefix) :] for line in lines if line.startswith(prefix)]


def listing(workdir) -> dict[str, float]:
    """Every file of a workdir but its lock, with its modification time."""
    return {
        os.path.relpath(os.path.join(root, name), workdir): os.stat(
            os.path.join(root, name)
        ).st_mtime
        for root, _, names in os.walk(workdir)
        for name in names
        if name != ".lock"
    }


def test_a_workdir_with_checkpoints_and_no_config_json_is_refused_before_compiling(
    four_steps, small_vocab_file
):
    # Without config.json, a run of another seed and learning rate resumed the run; with
    # model_config.json gone too, one of another head count called the shapes "damage"
    # and moved every good checkpoint aside.
    workdir = four_steps
    os.remove(os.path.join(workdir, "config.json"))
    before = listing(workdir)
    other_run = ("--config.seed=7", "--config.optimizer.learning_rate=0.01")
    code, stderr = finish(
        start(workdir, small_vocab_file, "--config.num_train_steps=6", *other_run)
    )
    refused = (
        f"error: {workdir}/config.json: missing, though {workdir}/checkpoints holds checkpoints; "
        "put back the config.json of the run that wrote them, or use a new workdir"
    )
    assert (code, last_line(stderr)) == (2, refused), stderr
    assert "Traceback" not in stderr
    assert listing(workdir) == before  # nothing moved or written
    os.remove(os.path.join(workdir, "model_config.json"))
    before = listing(workdir)
    code, stderr = finish(start(workdir, small_vocab_file, "--config.model.num_attention_heads=4"))
    assert (code, last_line(stderr)) == (2, refused), stderr
    assert listing(workdir) == before


def test_a_checkpoint_of_another_head_count_is_refused_and_never_moved(
    four_steps, small_vocab_file
):
    # The workdir's config files edited to 4 heads: its checkpoints are of 2.
    workdir = four_steps
    for name, key in (("config.json", "model"), ("model_config.json", None)):
        path = os.path.join(workdir, name)
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
        (values[key] if key else values)["num_attention_heads"] = 4
        with open(path, "w", encoding="utf-8") as f:
            json.dump(values, f)
    code, stderr = finish(start(workdir, small_vocab_file, "--config.model.num_attention_heads=4"))
    assert code == 2, stderr
    assert re.fullmatch(
        rf"error: {workdir}/checkpoints/4: has params/\S+ of shape \(.*\), this model \(.*\); "
        r"a checkpoint of another config \(left as it is\): run with the config that wrote "
        r"it, or use another workdir",
        last_line(stderr),
    ), stderr[-3000:]
    assert "damaged" not in stderr and "Traceback" not in stderr
    assert not os.path.exists(os.path.join(workdir, "damaged_checkpoints"))
    assert steps(workdir) == [2, 4]


READ_DAMAGED_STEPS = """
import sys
import jax
from bertjax import checkpoint

workdir = sys.argv[1]
state = {"params": {f"kernel_{i}": jax.random.normal(jax.random.key(i), (500, 500)) for i in range(16)}}
abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)
if sys.argv[2] == "save":
    with checkpoint.make_manager(workdir, max_to_keep=None) as manager:
        for step in (1, 2, 3, 4):
            checkpoint.save(manager, step, state, {})
            checkpoint.wait(manager)
else:
    with checkpoint.make_manager(workdir, max_to_keep=None) as manager:
        step, _, _ = checkpoint.restore_newest_good(manager, abstract, print)
    print("restored", step)
    import gc

    gc.collect()  # where asyncio reports the abandoned reads' futures
"""


def test_a_checkpoint_that_fails_to_read_is_reported_without_the_other_reads_noise(tmp_path):
    # When one read failed, orbax abandoned the others in flight; as they ended, and as
    # their futures were collected, each printed a traceback after the one-line report
    # ("Event loop is closed", "_GatheringFuture exception was never retrieved"). The
    # manifest now finds a damaged file before orbax reads anything.
    workdir = str(tmp_path / "run")
    command = [sys.executable, "-c", READ_DAMAGED_STEPS, workdir]
    saved = subprocess.run([*command, "save"], cwd=REPO, capture_output=True, text=True)
    assert saved.returncode == 0, saved.stderr
    for step in (2, 3, 4):
        truncate(data_files(workdir, step)[0])
    result = subprocess.run([*command, "read"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:3]] == [
        f"{workdir}/checkpoints/{step}" for step in (4, 3, 2)
    ]
    assert lines[3:] == ["resuming from step 1, the newest checkpoint that verifies", "restored 1"]
    assert "Traceback" not in result.stderr
    assert "Event loop is closed" not in result.stderr
    assert "never retrieved" not in result.stderr
