"""Checkpoints of a run, under WORKDIR/checkpoints/<step>/: the train state, written by
orbax (`state/`), and bertjax's manifest of the step (`manifest.json`), written last.

    checkpoints/<step>/
      state/          orbax's files of the train state (its own layout, never read here)
      manifest.json   {"format": FORMAT, "step", "bertjax", "files": {path: [bytes, crc32]},
                       "arrays": {name: {"shape", "dtype", "fingerprint"}},
                       "data": {"stream_positions": ...}, "checksum"}

A step is complete when its manifest is there: orbax commits the state first, then
the manifest is written whole (a rename, or one object in a bucket), so a save cut
short at any moment leaves a step without one, which a run moves aside and a reader
refuses. Rotation deletes a step's manifest before its files, so a step half-deleted
by a kill is incomplete too. The newest `max_to_keep` complete steps are kept, the
steps a run asks to keep whatever their age, and its best evaluation's.

Every verdict comes from the manifest, never from what orbax or TensorStore print:
a restore first checks every file the manifest lists (there, of the same size and
CRC-32) and the manifest itself (its checksum), then reads the arrays with orbax and
compares each one's fingerprint. A missing, truncated or changed file, an edited or
unreadable manifest, or an array that differs makes the checkpoint Damaged, with one
line naming the step and what is wrong; `restore_newest_good` then falls back to the
newest step that verifies, and a run moves the damaged step aside to
WORKDIR/damaged_checkpoints/ (never deleting it), a reader leaves the workdir as it is.
Whatever else goes wrong while reading (the storage, the machine) is raised as it is,
and nothing moves. A checkpoint whose arrays do not fit the model asked for (their
names or shapes, in the manifest) is no damage but a checkpoint of another config: a
CheckpointError, and nothing moves. So is a checkpoint of another format: one line
saying which bertjax reads it.

A fingerprint is a 32-bit sum of an array's bits weighted by position, computed
where the array lives: a save dispatches jitted reductions (a sharded array sends
the host one number, not its bytes) and reads them while orbax writes the arrays.
Every restore computes them again (on a CPU, with numpy over the arrays in place).
The train state holds the step, from which the dropout rng follows, and the
manifest's data lets the input continue where it stood (train.py), so restoring a
checkpoint resumes a run exactly. The other files of a workdir belong to workdir.py.
"""

import functools
import json
import logging
import os
import shutil
import threading
import traceback
import zlib
from collections.abc import Callable
from concurrent import futures
from importlib import metadata

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import tensorflow as tf
from absl import logging as absl_logging
from etils import epath
from jax.experimental import multihost_utils

from bertjax import workdir as workdir_lib
from bertjax.workdir import CheckpointError

ITEM = "state"
MANIFEST = workdir_lib.CHECKPOINT_MANIFEST
# The layout and manifest this bertjax writes and reads. Format 1 (bertjax up to commit
# df9a95b) had no manifest: an orbax "data" item held the fingerprints.
FORMAT = 2
_LAST_OF_FORMAT = {1: "commit df9a95b"}
_FORMAT_1_ITEM = "data"
# Where a run moves the checkpoints that fail to verify, in the workdir.
DAMAGED_DIR = "damaged_checkpoints"
_READ_CHUNK = 16 * 2**20


class Damaged(CheckpointError):
    """A checkpoint that cannot be restored as written: its `step` and what is wrong."""

    def __init__(self, directory: str, step: int, reason: str):
        super().__init__(f"{directory}/{step}: damaged, {reason}")
        self.step = step


def make_manager(workdir: str, *, max_to_keep: int | None, keep: tuple[int, ...] = ()):
    """The checkpoints of a run in `workdir`, to save and restore: the newest `max_to_keep`
    complete steps are kept (None: all), and the steps `keep` whatever their age (the
    checkpoint a run resumed from: the newest known to verify, until a later one is read
    back), and the best evaluation's (Checkpoints.keep_best). Steps left incomplete by an
    earlier process are moved aside first."""
    return Checkpoints(workdir, max_to_keep=max_to_keep, keep=keep)


class Checkpoints:
    """A run's checkpoints (a context manager): orbax writes each step's state in the
    background, and a thread of ours waits for it and then writes the step's manifest
    and applies the rotation (process 0), so that the train loop never waits for either.
    A failed save is raised by the next `save` or `wait` (or by `close`, if neither
    reported it), as one CheckpointError line."""

    def __init__(self, workdir: str, *, max_to_keep: int | None, keep: tuple[int, ...] = ()):
        self.directory = workdir_lib.checkpoint_dir(workdir)
        self.max_to_keep, self.keep = max_to_keep, tuple(keep)
        self.best: int | None = None  # the step of the best evaluation (keep_best)
        check_step_dirs(self.directory, move=True)
        if jax.process_index() == 0:
            tf.io.gfile.makedirs(self.directory)
        self._orbax = ocp.AsyncCheckpointer(ocp.StandardCheckpointHandler())
        self._committer: threading.Thread | None = None
        self._failure: BaseException | None = None  # of the save in flight, not yet raised
        self._failed = False
        self._last_saved: int | None = None
        self._retold = _Retold()
        for name in _RETELLING_LOGGERS:
            logging.getLogger(name).addFilter(self._retold)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def all_steps(self) -> list[int]:
        """The complete steps (those with a manifest), oldest first."""
        return complete_steps(self.directory)

    def latest_step(self) -> int | None:
        steps = self.all_steps()
        return steps[-1] if steps else None

    def keep_best(self, step: int | None) -> None:
        """Rotation spares `step` too, from the next save on: the step of the run's best
        evaluation, if it has a checkpoint (the one before it is no longer spared)."""
        self.best = step

    def save(self, step: int, state, data: dict) -> None:
        """Starts an asynchronous save of `state` and the JSON `data`; `wait` completes it.

        The state's fingerprints are computed while its arrays are written: dispatched
        here, before a later step may reuse a donated buffer, and read by the thread
        that writes the manifest. The previous save's failure raises here."""
        self.wait()
        self._last_saved = step
        step_dir = os.path.join(self.directory, str(step))
        pending = _Fingerprints(state)
        arrays = {
            name: {"shape": _shape(leaf), "dtype": str(leaf.dtype)}
            for name, leaf in _named_leaves(state)
        }
        try:
            if jax.process_index() == 0:
                tf.io.gfile.makedirs(step_dir)
            self._orbax.save(
                epath.Path(step_dir) / ITEM, args=ocp.args.StandardSave(state), force=True
            )
        except Exception as error:  # noqa: BLE001 - any failure to save is reported as one
            raise self._save_failed(step, error) from error
        spared = {*self.keep, self.best}
        self._committer = threading.Thread(
            target=self._commit,
            args=(step, step_dir, pending, arrays, data, spared),
            name=f"checkpoint {step}",
            daemon=True,
        )
        self._committer.start()

    def _commit(
        self, step: int, step_dir: str, pending, arrays: dict, data: dict, spared: set
    ) -> None:
        """In the background: waits for orbax to commit the state, writes the manifest
        (the step is then complete) and deletes the steps rotation drops."""
        try:
            self._orbax.wait_until_finished()
            prints = pending.result()
            if jax.process_index() != 0:
                return
            for name, value in prints.items():
                arrays[name]["fingerprint"] = value
            manifest = {
                "format": FORMAT,
                "step": step,
                "bertjax": _written_by(),
                "files": _list_files(step_dir),
                "arrays": arrays,
                "data": data,
            }
            _write_manifest(step_dir, manifest)
            self._rotate(spared)
        except BaseException as error:  # noqa: BLE001 - raised by the caller's next save or wait
            self._failure = self._save_failed(step, error)
            self._failure.__cause__ = error

    def _rotate(self, spared: set) -> None:
        if self.max_to_keep is None:
            return
        steps = self.all_steps()
        for step in steps[: max(0, len(steps) - self.max_to_keep)]:
            if step not in spared:
                step_dir = os.path.join(self.directory, str(step))
                # The manifest first: a kill in between leaves an incomplete step.
                tf.io.gfile.remove(os.path.join(step_dir, MANIFEST))
                tf.io.gfile.rmtree(step_dir)

    def _save_failed(self, step: int, error: BaseException) -> CheckpointError:
        """The one line that reports a failed save (raised by the caller)."""
        self._failed = True
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        reason = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
        reason = reason if len(reason) <= 300 else reason[:297] + "..."
        latest = self.latest_step()
        return CheckpointError(
            f"saving checkpoint {step} in {self.directory} failed ({reason}); the latest "
            f"complete checkpoint: {'none' if latest is None else f'step {latest}'}"
        )

    def wait(self, timeout_s: float | None = None) -> bool:
        """Waits for the save in flight to be complete (its manifest written); False if it
        is not within `timeout_s`. A failed save raises here, as a CheckpointError."""
        if self._committer is not None:
            self._committer.join(timeout_s)
            if self._committer.is_alive():
                return False
            self._committer = None
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        return True

    def close(self) -> None:
        """Waits for the save in flight; raises its failure if nothing reported it yet.
        After a failure already raised, orbax's own closing fails the same way (a full
        disk stays full): that is not raised over the failure reported."""
        try:
            self.wait()
        except BaseException:
            self._close_orbax()
            raise
        self._close_orbax()

    def _close_orbax(self) -> None:
        try:
            self._orbax.close()  # it writes the last save's metadata
        except Exception as error:  # noqa: BLE001 - any failure to save is reported as one
            if not self._failed:
                raise self._save_failed(self._last_saved, error) from error
        finally:
            # After a failed save, asyncio retells it as orbax's abandoned tasks are
            # collected, as late as the process's exit: the filter stays.
            if not self._failed:
                for name in _RETELLING_LOGGERS:
                    logging.getLogger(name).removeFilter(self._retold)


# The loggers through which orbax's threads, and asyncio for the tasks a failed save
# abandons, tell of the failure that Checkpoints raises in one line.
_RETELLING_LOGGERS = ("absl", "asyncio")
_ORBAX_DIR = os.path.dirname(ocp.__file__) + os.sep


class _Retold(logging.Filter):
    """While a Checkpoints is open, drops the exceptions orbax logs (from its own files,
    or raised through them): each is the failure of a save, which orbax also raises to
    Checkpoints, where it becomes one line. Installed by an open Checkpoints only; by the
    code that logs or raises, never by what it says."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR or not record.exc_info:
            return True
        if record.pathname.startswith(_ORBAX_DIR):
            return False
        error = record.exc_info[1]
        frames = traceback.walk_tb(error.__traceback__) if error is not None else ()
        return not any(frame.f_code.co_filename.startswith(_ORBAX_DIR) for frame, _ in frames)


def save(manager: Checkpoints, step: int, state, data: dict) -> None:
    """Starts an asynchronous save of the state and the JSON `data` (Checkpoints.save)."""
    manager.save(step, state, data)


def wait(manager: Checkpoints, timeout_s: float | None = None) -> bool:
    """Waits for the save in flight to be complete (Checkpoints.wait)."""
    return manager.wait(timeout_s)


def _written_by() -> str:
    try:
        return f"bertjax {metadata.version('bertjax')}"
    except metadata.PackageNotFoundError:
        return "bertjax"


def _list_files(step_dir: str) -> dict[str, list[int]]:
    """Every file under `step_dir` but the manifest: its path there -> [bytes, CRC-32]."""
    paths = {}
    for root, _, names in tf.io.gfile.walk(step_dir):
        for name in names:
            path = os.path.join(root, name)
            relative = os.path.relpath(path, step_dir)
            if relative != MANIFEST and not relative.startswith(MANIFEST + "."):
                paths[relative] = path
    # Files read on host threads at once (zlib and file reads let go of the GIL).
    sums = _host_threads().map(_size_and_crc, paths.values())
    return {relative: list(found) for relative, found in sorted(zip(paths, sums, strict=True))}


def _size_and_crc(path: str) -> tuple[int, int]:
    size, crc = 0, 0
    with tf.io.gfile.GFile(path, "rb") as f:
        while chunk := f.read(_READ_CHUNK):
            size, crc = size + len(chunk), zlib.crc32(chunk, crc)
    return size, crc


def _checksum(manifest: dict) -> int:
    """CRC-32 of the manifest's JSON without its checksum, its keys sorted."""
    rest = {key: value for key, value in manifest.items() if key != "checksum"}
    return zlib.crc32(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode())


def _write_manifest(step_dir: str, manifest: dict) -> None:
    """Written whole or not at all: a file renamed into place (an object in a bucket)."""
    text = json.dumps({**manifest, "checksum": _checksum(manifest)}, indent=1)
    final = os.path.join(step_dir, MANIFEST)
    partial = f"{final}.partial"
    with tf.io.gfile.GFile(partial, "w") as f:
        f.write(text)
    tf.io.gfile.rename(partial, final, overwrite=True)


def complete_steps(directory: str) -> list[int]:
    """The steps under a checkpoints folder that have a manifest, oldest first."""
    if not tf.io.gfile.isdir(directory):
        return []
    steps = [
        int(name.rstrip("/"))
        for name in tf.io.gfile.listdir(directory)
        if name.rstrip("/").isdigit()
    ]
    return sorted(s for s in steps if tf.io.gfile.exists(os.path.join(directory, str(s), MANIFEST)))


def check_step_dirs(directory: str, *, move: bool = False) -> None:
    """Fails, naming it, on a step folder that is not a complete checkpoint (a stray or
    foreign folder, or a save or a deletion cut short), or one of another format; with
    `move` (a run's own workdir), moves an incomplete one to damaged_checkpoints/ and
    says so. A checkpoint of another format is never moved. A reader passes over a
    folder that holds nothing but the state item: a save in flight (a notebook reads a
    live run), or one cut short, which the run moves aside when it starts again."""
    if not tf.io.gfile.isdir(directory):
        return
    for name in sorted(tf.io.gfile.listdir(directory)):
        name = name.rstrip("/")
        step_dir = os.path.join(directory, name)
        if not name.isdigit() or tf.io.gfile.exists(os.path.join(step_dir, MANIFEST)):
            continue
        if tf.io.gfile.isdir(os.path.join(step_dir, _FORMAT_1_ITEM)):
            raise _other_format(directory, int(name), 1)
        problem = (
            f"not a complete bertjax checkpoint (no {MANIFEST}: a save cut short, or not ours)"
        )
        if not move:
            held = [entry.rstrip("/") for entry in tf.io.gfile.listdir(step_dir)]
            if held and all(entry.startswith(ITEM) for entry in held):
                continue
            raise CheckpointError(
                f"{step_dir}: {problem}; move it out of {directory} to use the other steps"
            )
        where = _move_aside(directory, int(name))
        absl_logging.warning("%s: %s; moved to %s", step_dir, problem, where)


def _other_format(directory: str, step: int, found) -> CheckpointError:
    reads = _LAST_OF_FORMAT.get(found)
    how = (
        f"read it with bertjax at {reads} or earlier"
        if reads
        else "read it with the newer bertjax that wrote it"
    )
    return CheckpointError(
        f"{directory}/{step}: a checkpoint of format {found}; this bertjax reads format "
        f"{FORMAT}: {how}, or start the run in a new workdir"
    )


def check_space(manager: Checkpoints, state) -> None:
    """Fails before a save, in one line, when a local disk lacks room for `state`
    (the bytes of its arrays: what a checkpoint of it takes, within a few percent); the
    previous save's failure first (the next save would wait for it anyway)."""
    manager.wait()
    directory = str(manager.directory)
    if "://" in directory:
        return  # buckets have no disk to fill
    needed = sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(state))
    free = shutil.disk_usage(directory).free
    if free < 1.05 * needed:
        latest = manager.latest_step()
        raise CheckpointError(
            f"{directory}: {free / 2**20:,.0f} MiB free, a checkpoint needs about "
            f"{needed / 2**20:,.0f} MiB; free some space (the latest complete checkpoint: "
            f"{'none' if latest is None else f'step {latest}'})"
        )


# ----------------------------------------------------------------------------- fingerprints


def fingerprints(tree) -> dict[str, int]:
    """Each array of `tree` by its path ("params/bert/..."): the sum of its bits as words
    (an element each; 32-bit for float32), each times 2 * its row-major position + 1,
    modulo 2**32. A changed word changes it (an odd factor is invertible modulo 2**32),
    and so do two words swapped."""
    return _Fingerprints(tree, in_place=True).result()


class _Fingerprints:
    """The fingerprints of `tree`, computing where its arrays live from construction on.

    With `in_place`, an array in host memory (numpy's, or on one CPU device) is read
    where it is by host threads, two to three times faster than XLA's CPU reduction;
    not for a save, whose arrays the next step may donate while the threads read them."""

    def __init__(self, tree, *, in_place: bool = False):
        leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
        self.names = [jax.tree_util.keystr(path, simple=True, separator="/") for path, _ in leaves]
        arrays = [leaf for _, leaf in leaves]
        # An array on one device: a program of its own, which the host runs beside the
        # others (on a CPU, three times faster than one program for all). Arrays over
        # several devices: one program for all of them, since programs with collectives
        # dispatched one per array deadlocked XLA's CPU collectives on 8 devices.
        spread = [
            i
            for i, x in enumerate(arrays)
            if isinstance(x, jax.Array) and len(x.sharding.device_set) > 1
        ]
        sums, spread_set = [], set(spread)
        for i, x in enumerate(arrays):
            if i in spread_set:
                sums.append(None)  # below, in one program
            elif in_place and _in_host_memory(x):
                sums.append(_host_threads().submit(_fingerprint_in_place, x))
            else:
                sums.append(_fingerprint_one(x))
        for i, value in zip(spread, _fingerprint_all([arrays[i] for i in spread]), strict=True):
            sums[i] = value
        self.sums = sums

    def result(self) -> dict[str, int]:
        sums = [s.result() if isinstance(s, futures.Future) else s for s in self.sums]
        sums = jax.device_get(sums)
        return {name: int(value) for name, value in zip(self.names, sums, strict=True)}


@jax.jit
def _fingerprint_all(arrays):
    return [_fingerprint(x) for x in arrays]


def _fingerprint(x):
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
    unsigned = _UNSIGNED[x.dtype.itemsize]
    words = jax.lax.bitcast_convert_type(x, unsigned).astype(jnp.uint32)
    # Each element's row-major position, built per axis so that a sharded array stays so.
    position, stride = jnp.zeros(x.shape, jnp.uint32), 1
    for axis in reversed(range(x.ndim)):
        axis_index = jax.lax.broadcasted_iota(jnp.uint32, x.shape, axis)
        position = position + axis_index * jnp.uint32(stride % 2**32)
        stride *= x.shape[axis]
    return jnp.sum(words * (2 * position + 1), dtype=jnp.uint32)


_fingerprint_one = jax.jit(_fingerprint)


@functools.cache
def _host_threads() -> futures.ThreadPoolExecutor:
    return futures.ThreadPoolExecutor(min(8, os.cpu_count() or 1), "fingerprints")


def _in_host_memory(x) -> bool:
    if isinstance(x, np.ndarray):
        return x.dtype.itemsize in _UNSIGNED
    return (
        isinstance(x, jax.Array)
        and len(x.sharding.device_set) == 1
        and next(iter(x.sharding.device_set)).platform == "cpu"
        and not jnp.issubdtype(x.dtype, jax.dtypes.prng_key)
        and x.dtype.itemsize in _UNSIGNED
    )


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def _fingerprint_in_place(x) -> int:
    """_fingerprint in numpy, over a view of `x`: with the words as rows of K (the last
    axis), the sum over i of (2i + 1) w_i is 2 (K sum_r r R_r + sum_c c C_c) + sum_r R_r,
    R and C the row and column sums."""
    array = np.asarray(x)
    if array.size == 0:
        return 0
    words = array.reshape(array.shape or (1,)).view(_UNSIGNED[array.dtype.itemsize])
    words = words.reshape(-1, words.shape[-1])
    rows, width = words.shape
    row_sums = words.sum(axis=1, dtype=np.uint32)
    column_sums = words.sum(axis=0, dtype=np.uint32)
    by_row = np.dot(np.arange(rows, dtype=np.uint32), row_sums)
    by_column = np.dot(np.arange(width, dtype=np.uint32), column_sums)
    total = row_sums.sum(dtype=np.uint32)
    return (2 * (width * int(by_row) + int(by_column)) + int(total)) % 2**32


def _verify(directory: str, step: int, tree, saved: dict) -> None:
    """Fails with Damaged when an array of `tree` does not match its saved fingerprint."""
    for name, value in _Fingerprints(tree, in_place=True).result().items():
        if saved[name]["fingerprint"] != value:
            raise Damaged(
                directory, step, f"{name} differs from what was written (fingerprint mismatch)"
            )


# ----------------------------------------------------------------------------- reading


def read_manifest(directory: str, step: int) -> dict:
    """The step's manifest, its checksum and every file it lists verified (there, of the
    same size and CRC-32); Damaged when one is not, a CheckpointError when it is of
    another format."""
    step_dir = os.path.join(directory, str(step))
    path = os.path.join(step_dir, MANIFEST)
    if not tf.io.gfile.exists(path):
        if tf.io.gfile.isdir(os.path.join(step_dir, _FORMAT_1_ITEM)):
            raise _other_format(directory, step, 1)
        raise Damaged(directory, step, f"its {MANIFEST} is missing")
    with tf.io.gfile.GFile(path, "rb") as f:
        text = f.read()
    try:
        manifest = json.loads(text)
    except ValueError:
        raise Damaged(directory, step, f"its {MANIFEST} is not valid JSON") from None
    if not isinstance(manifest, dict) or "format" not in manifest:
        raise Damaged(directory, step, f"its {MANIFEST} has no format")
    if manifest["format"] != FORMAT:
        raise _other_format(directory, step, manifest["format"])
    if manifest.get("checksum") != _checksum(manifest):
        raise Damaged(
            directory, step, f"its {MANIFEST} differs from what was written (checksum mismatch)"
        )
    files = {relative: os.path.join(step_dir, relative) for relative in manifest["files"]}
    for relative, file in files.items():
        if not tf.io.gfile.exists(file):
            raise Damaged(directory, step, f"{relative} is missing")
    found = _host_threads().map(_size_and_crc, files.values())
    for (relative, (size, crc)), (found_size, found_crc) in zip(
        manifest["files"].items(), found, strict=True
    ):
        if found_size != size:
            raise Damaged(
                directory,
                step,
                f"{relative} is truncated or grown ({found_size} bytes, {size} written)",
            )
        if found_crc != crc:
            raise Damaged(
                directory, step, f"{relative} differs from what was written (CRC-32 mismatch)"
            )
    return manifest


def restore(manager: Checkpoints, step: int, abstract_state) -> tuple:
    """(state on the shardings of `abstract_state`, the data saved with it), verified
    against the step's manifest; Damaged when it cannot be, a CheckpointError when its
    arrays are not those of `abstract_state` (another config's)."""
    directory = manager.directory
    manifest = read_manifest(directory, step)
    _check_fits(directory, step, abstract_state, manifest["arrays"], partial=False)
    state = ocp.StandardCheckpointer().restore(
        epath.Path(directory) / str(step) / ITEM, abstract_state
    )
    _verify(directory, step, state, manifest["arrays"])
    return state, manifest["data"]


def _check_fits(directory: str, step: int, abstract_tree, saved: dict, *, partial: bool):
    """Before reading an array: a CheckpointError when the arrays the manifest lists are
    not the ones of `abstract_tree` (with `partial`, a part of them), by name and shape:
    a checkpoint of another config, not damage."""
    shapes = {name: None if a["shape"] is None else tuple(a["shape"]) for name, a in saved.items()}
    wanted = {name: _shape(leaf) for name, leaf in _named_leaves(abstract_tree)}
    unknown, extra = sorted(wanted.keys() - shapes.keys()), sorted(shapes.keys() - wanted.keys())
    if unknown:
        problem = f"has no {unknown[0]}"
    elif extra and not partial:
        problem = f"has {extra[0]}, which this model has not"
    else:
        problem = next(
            (
                f"has {name} of shape {shapes[name]}, this model {shape}"
                for name, shape in wanted.items()
                if None not in (shapes[name], shape) and shapes[name] != shape
            ),
            None,
        )
    if problem:
        raise CheckpointError(f"{directory}/{step}: {problem}; {_OTHER_CONFIG}")


_OTHER_CONFIG = (
    "a checkpoint of another config (left as it is): run with the config that wrote it, "
    "or use another workdir"
)


def _shape(leaf) -> tuple | None:
    """An array's shape; None for a PRNG key, whose stored shape is its key data's."""
    dtype = getattr(leaf, "dtype", None)
    if dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key):
        return None
    return tuple(getattr(leaf, "shape", ()))


def _named_leaves(tree) -> list:
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(jax.tree_util.keystr(path, simple=True, separator="/"), leaf) for path, leaf in leaves]


def restore_newest_good(
    manager: Checkpoints, abstract_state, report: Callable[[str], None]
) -> tuple[int, object, dict | None] | None:
    """(step, state, data) of the newest checkpoint that restores and verifies, or None
    when there is none at all. Each damaged step newer than it is moved to
    WORKDIR/damaged_checkpoints/ and `report`ed in one line. With no good step, each
    damage is reported, nothing moves (the same command says the same again, rather
    than train from step 0), and a CheckpointError."""
    directory = manager.directory
    damages = []
    for step in sorted(manager.all_steps(), reverse=True):
        try:
            state, data = restore(manager, step, abstract_state)
        except Damaged as damage:
            damages.append(damage)
            continue
        for damage in damages:
            report(f"{damage}; moved to {_move_aside(directory, damage.step)}")
        if damages:
            report(f"resuming from step {step}, the newest checkpoint that verifies")
        return step, state, data
    if not damages:
        return None
    for damage in damages:
        report(str(damage))
    steps = ", ".join(str(damage.step) for damage in damages)
    raise CheckpointError(
        f"{directory}: no checkpoint verifies (steps {steps} are damaged, left in place for "
        "a look); start the run in a new workdir"
    )


def _move_aside(directory: str, step: int) -> str:
    """Moves step `step` out of `directory` into the workdir's damaged_checkpoints/ (under
    a new name if that step was moved before); returns where."""
    target_dir = os.path.join(os.path.dirname(directory), DAMAGED_DIR)
    target = os.path.join(target_dir, str(step))
    if jax.process_index() == 0:
        tf.io.gfile.makedirs(target_dir)
        suffix = 1
        while tf.io.gfile.exists(target):
            suffix += 1
            target = os.path.join(target_dir, f"{step}.{suffix}")
        tf.io.gfile.rename(os.path.join(directory, str(step)), target)
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(f"moved damaged checkpoint {step}")
    return target


def latest_step(workdir: str, *, own: bool = False) -> int | None:
    """The newest complete step of a workdir, or None. A step folder that is not a
    complete checkpoint fails, naming it; for the run that holds the workdir (`own`),
    it is moved aside instead (a kill -9 during a save or a rotation leaves one)."""
    directory = workdir_lib.checkpoint_dir(workdir)
    check_step_dirs(directory, move=own)
    steps = complete_steps(directory)
    return steps[-1] if steps else None


def restore_params(
    workdir: str, abstract_params, step: int | None = None, *, what: str = "workdir"
):
    """(the parameters of a workdir's checkpoint, or the subtree `abstract_params` names;
    its step). Without `step`, the newest checkpoint that verifies; a damaged newer one
    is reported in one line and left in place (the workdir is only read). `what` names
    the workdir in errors ("init_checkpoint", "workdir")."""
    directory = workdir_lib.checkpoint_dir(workdir)
    check_step_dirs(directory)
    steps = sorted(complete_steps(directory), reverse=True)
    if not steps:
        raise CheckpointError(f"{what}={workdir!r}: no checkpoint under {workdir}")
    if step is not None and step not in steps:
        raise CheckpointError(
            f"{directory}/{step}: no such checkpoint; steps there: "
            f"{', '.join(map(str, sorted(steps)))}"
        )
    steps = steps if step is None else [step]
    damages = []
    for candidate in steps:
        try:
            params = _restore_params(directory, candidate, abstract_params)
        except Damaged as damage:
            absl_logging.warning("%s", damage)
            damages.append(damage)
            continue
        if damages:
            absl_logging.warning("using step %d, the newest checkpoint that verifies", candidate)
        return params, candidate
    if len(damages) == 1:
        raise damages[0]
    raise CheckpointError(f"{what}={workdir!r}: no checkpoint verifies; the newest: {damages[0]}")


def _restore_params(directory: str, step: int, abstract_params):
    manifest = read_manifest(directory, step)
    saved = manifest["arrays"]
    _check_fits(directory, step, {"params": abstract_params}, saved, partial=True)
    args = ocp.args.PyTreeRestore(
        item={"params": abstract_params},
        restore_args={"params": ocp.checkpoint_utils.construct_restore_args(abstract_params)},
        partial_restore=True,
    )
    path = epath.Path(directory) / str(step) / ITEM
    params = ocp.PyTreeCheckpointer().restore(path, args=args)["params"]
    _verify(directory, step, {"params": params}, saved)
    return params
