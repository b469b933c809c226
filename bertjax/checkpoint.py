"""Orbax checkpoints of a run, under WORKDIR/checkpoints/<step>/: the train state
(`state`), and as JSON (`data`) where each host's input stream stands and a
fingerprint of each array of the state.

The train state holds the step, from which the dropout rng follows, and the
data item lets the input continue where it stood (train.py), so restoring a
checkpoint resumes a run exactly. The other files of a workdir belong to workdir.py.

A fingerprint is a 32-bit sum of an array's bits weighted by position, computed
where the array lives: a save dispatches jitted reductions (a sharded array sends
the host one number, not its bytes) and reads them while orbax writes the arrays.
Every restore computes them again (on a CPU, with numpy over the arrays in place)
and compares: a flipped bit, a truncated or missing file, missing or unreadable
metadata, a data item without its fingerprints or edited (its checksum) makes the
checkpoint Damaged, with one line naming the step and what is wrong.
`restore_newest_good` then falls back to the newest step that verifies; a run moves
the damaged step aside to WORKDIR/damaged_checkpoints/ (never deleting it), a reader
leaves the workdir as it is. A checkpoint whose arrays do not fit the model asked for
(their names or shapes) is no damage but a checkpoint of another config: a
CheckpointError, and nothing moves.
"""

import contextlib
import dataclasses
import functools
import json
import logging
import os
import re
import shutil
import sys
import threading
import traceback
import zlib
from collections.abc import Callable
from concurrent import futures

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
from data_pipeline.errors import UserError

ITEM = "state"
DATA_ITEM = "data"
ITEMS = (ITEM, DATA_ITEM)
# The data item's key for the state's fingerprints (in it, not an item of their own:
# each item costs a save and a restore a few tenths of a second of files and commits).
FINGERPRINTS = "fingerprints"
# The data item's key for a CRC-32 of the rest of it (stream positions, fingerprints).
CHECKSUM = "checksum"
# Where a run moves the checkpoints that fail to restore, in the workdir.
DAMAGED_DIR = "damaged_checkpoints"
# What every complete step directory holds; orbax writes it before the commit.
_STEP_METADATA = "_CHECKPOINT_METADATA"
# The state item's tree metadata: the names, shapes and types of its arrays.
_TREE_METADATA = "_METADATA"


class Damaged(CheckpointError):
    """A checkpoint that cannot be restored as written: its `step` and what is wrong."""

    def __init__(self, directory: str, step: int, reason: str):
        super().__init__(f"{directory}/{step}: damaged, {reason}")
        self.step = step


def make_manager(
    workdir: str, *, max_to_keep: int | None, keep: tuple[int, ...] = ()
) -> ocp.CheckpointManager:
    """Saves of a run: the newest `max_to_keep` steps are kept (None: all), and the steps
    `keep` whatever their age (the checkpoint a run resumed from: the newest known to
    verify, until a later one is read back)."""
    directory = epath.Path(workdir_lib.checkpoint_dir(workdir))
    check_step_dirs(directory, move=True)
    policies = ocp.checkpoint_managers
    options = ocp.CheckpointManagerOptions(
        create=True,
        enable_async_checkpointing=True,
        preservation_policy=policies.AnyPreservationPolicy(
            [policies.LatestN(max_to_keep), policies.CustomSteps(keep)]
        ),
    )
    return ocp.CheckpointManager(directory, options=options, item_names=ITEMS)


def _read_only_manager(workdir: str) -> ocp.CheckpointManager:
    directory = epath.Path(workdir_lib.checkpoint_dir(workdir))
    check_step_dirs(directory)
    # The options a read-only manager keeps (orbax warns about each one it changes), and
    # without orbax's warning that the directory is read-only: reading is what was asked.
    options = ocp.CheckpointManagerOptions(
        read_only=True,
        create=False,
        save_interval_steps=0,
        max_to_keep=None,
        cleanup_tmp_directories=False,
    )
    absl_logger = absl_logging.get_absl_logger()
    absl_logger.addFilter(_not_read_only_notice)
    try:
        return ocp.CheckpointManager(directory, options=options, item_names=ITEMS)
    finally:
        absl_logger.removeFilter(_not_read_only_notice)


def _not_read_only_notice(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Given directory is read only")


def check_step_dirs(directory: epath.Path, *, move: bool = False) -> None:
    """Fails, naming it, on a step directory that is not a complete checkpoint (a stray
    or foreign folder, or a save cut short), which orbax would take as the latest step;
    with `move` (a run's own workdir), moves it to damaged_checkpoints/ and says so.
    Orbax's own unfinished saves (`N.orbax-checkpoint-tmp-*`) are not steps; it cleans
    them up."""
    if not directory.is_dir():
        return
    for step_dir in sorted(directory.iterdir()):
        if not step_dir.name.isdigit():
            continue
        if not (step_dir / _STEP_METADATA).exists() or not (step_dir / ITEM).is_dir():
            problem = f"not a complete bertjax checkpoint (no {_STEP_METADATA} or {ITEM}/)"
        elif not ocp.step.is_path_finalized(step_dir):
            problem = "an unfinished checkpoint"
        else:
            continue
        if not move:
            raise CheckpointError(
                f"{step_dir}: {problem}; move it out of {directory} to use the other steps"
            )
        where = _move_aside(str(directory), int(step_dir.name))
        absl_logging.warning("%s: %s; moved to %s", step_dir, problem, where)


def save(manager: ocp.CheckpointManager, step: int, state, data: dict) -> None:
    """Starts an asynchronous save of the state and the JSON `data`; `wait` completes it.

    The state's fingerprints are computed while its arrays are written: dispatched here,
    before a later step may reuse a donated buffer, and read in the data item's commit.
    The previous save's failure (a full disk, no permission) raises here, as a
    CheckpointError; a save that fails is never listed as a step.
    """
    pending = _Fingerprints(state)
    with _save_errors(manager):
        manager.save(
            step,
            args=ocp.args.Composite(
                **{
                    ITEM: ocp.args.StandardSave(state),
                    DATA_ITEM: _DataSave({**data, FINGERPRINTS: pending}),
                }
            ),
            force=True,
        )


class _DataHandler(ocp.JsonCheckpointHandler):
    """The data item: orbax's JSON file, whose fingerprints are read from the devices in
    the background commit (a save does not wait for them)."""

    async def _save_fn(self, x, directory):
        x = {**x, FINGERPRINTS: x[FINGERPRINTS].result()}
        await super()._save_fn({**x, CHECKSUM: _checksum(x)}, directory)


def _checksum(data: dict) -> int:
    """CRC-32 of the data item's JSON without its checksum, its keys sorted."""
    rest = {key: value for key, value in data.items() if key != CHECKSUM}
    return zlib.crc32(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode())


@ocp.args.register_with_handler(_DataHandler, for_save=True)
@dataclasses.dataclass
class _DataSave(ocp.args.CheckpointArgs):
    item: dict


@ocp.args.register_with_handler(_DataHandler, for_restore=True)
@dataclasses.dataclass
class _DataRestore(ocp.args.CheckpointArgs):
    pass


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
        if name not in saved:
            raise Damaged(directory, step, f"{name} has no fingerprint in {DATA_ITEM}/")
        if saved[name] != value:
            raise Damaged(
                directory, step, f"{name} differs from what was written (fingerprint mismatch)"
            )


# How tensorstore and orbax word a storage failure: an absl status code first.
_STORAGE_FAILURE = re.compile(
    r"^(RESOURCE_EXHAUSTED|PERMISSION_DENIED|NOT_FOUND|UNAVAILABLE|DEADLINE_EXCEEDED|"
    r"UNAUTHENTICATED|FAILED_PRECONDITION|DATA_LOSS|ABORTED):"
)


@contextlib.contextmanager
def _save_errors(manager: ocp.CheckpointManager):
    """Turns a storage failure of a save into one CheckpointError line."""
    try:
        yield
    except BaseException as error:
        if not (isinstance(error, OSError) or _STORAGE_FAILURE.match(str(error))):
            raise
        latest = manager.latest_step()
        kept = f"step {latest}" if latest is not None else "none"
        raise CheckpointError(
            f"saving a checkpoint in {manager.directory} failed ({str(error).strip()}); "
            f"the latest complete checkpoint: {kept}"
        ) from error


class _QuietBackgroundSaveErrors(logging.Filter):
    """Orbax logs a failed background save with its traceback, then raises it to the
    caller, which reports it in one line; the log is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            record.levelno >= logging.ERROR
            and "orbax" in record.pathname
            and (record.exc_info or "raised an exception" in record.getMessage())
        )


logging.getLogger("absl").addFilter(_QuietBackgroundSaveErrors())


def check_space(manager: ocp.CheckpointManager, state) -> None:
    """Fails before a save, in one line, when a local disk lacks room for `state`
    (the bytes of its arrays: what a checkpoint of it takes, within a few percent)."""
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


def wait(manager: ocp.CheckpointManager, timeout_s: float | None = None) -> bool:
    """Waits for the save in flight to commit; False if it has not within `timeout_s`.

    A failed save raises here (a CheckpointError for a storage failure). Only a
    save that commits is listed as a step.
    """
    if timeout_s is None:
        with _save_errors(manager):
            manager.wait_until_finished()
        return True
    errors = []

    def finish():
        try:
            with _save_errors(manager):
                manager.wait_until_finished()
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(error)

    waiter = threading.Thread(target=finish, daemon=True)
    waiter.start()
    waiter.join(timeout_s)
    if errors:
        raise errors[0]
    return not waiter.is_alive()


def restore(manager: ocp.CheckpointManager, step: int, abstract_state) -> tuple:
    """(state on the shardings of `abstract_state`, the data item), verified against the
    step's fingerprints; Damaged when it cannot be, a CheckpointError when its arrays are
    not those of `abstract_state` (another config's)."""
    directory = str(manager.directory)
    data = _read_data(manager, directory, step)
    _check_fits(directory, step, abstract_state, data[FINGERPRINTS], partial=False)
    with _read_errors(directory, step):
        state = manager.restore(
            step, args=ocp.args.Composite(**{ITEM: ocp.args.StandardRestore(abstract_state)})
        )[ITEM]
    _verify(directory, step, state, data[FINGERPRINTS])
    return state, {k: v for k, v in data.items() if k not in (FINGERPRINTS, CHECKSUM)}


def _read_data(manager: ocp.CheckpointManager, directory: str, step: int) -> dict:
    """The step's data item, its checksum verified; Damaged when it is missing, edited, or
    has no fingerprints (every checkpoint bertjax writes has them)."""
    if not (epath.Path(directory) / str(step) / DATA_ITEM).exists():
        raise Damaged(directory, step, f"its {DATA_ITEM}/ item (the fingerprints) is missing")
    with _read_errors(directory, step):
        restored = manager.restore(step, args=ocp.args.Composite(**{DATA_ITEM: _DataRestore()}))
    data = restored[DATA_ITEM]
    for key in (FINGERPRINTS, CHECKSUM):
        if not isinstance(data, dict) or key not in data:
            raise Damaged(directory, step, f"{DATA_ITEM}/ has no {key}")
    if data[CHECKSUM] != _checksum(data):
        raise Damaged(
            directory, step, f"{DATA_ITEM}/ differs from what was written (checksum mismatch)"
        )
    return dict(data)


def _check_fits(directory: str, step: int, abstract_tree, fingerprints: dict, *, partial: bool):
    """Before reading an array. Damaged when the step's tree metadata is missing,
    unreadable or lists other arrays than its fingerprints (both written by the save); a
    CheckpointError when those arrays are not the ones of `abstract_tree` (with `partial`,
    a part of them), by name and shape: a checkpoint of another config, not damage."""
    step_dir = epath.Path(directory) / str(step)
    if not (step_dir / ITEM / _TREE_METADATA).exists():
        raise Damaged(directory, step, f"its metadata file {ITEM}/{_TREE_METADATA} is missing")
    with _read_errors(directory, step):
        metadata = ocp.PyTreeCheckpointHandler().metadata(step_dir / ITEM)
    saved = {name: _shape(leaf) for name, leaf in _named_leaves(metadata.tree)}
    if saved.keys() != fingerprints.keys():
        odd = sorted(saved.keys() ^ fingerprints.keys())[0]
        raise Damaged(
            directory,
            step,
            f"{ITEM}/{_TREE_METADATA} and {DATA_ITEM}/ disagree on the arrays written ({odd})",
        )
    wanted = {name: _shape(leaf) for name, leaf in _named_leaves(abstract_tree)}
    unknown, extra = sorted(wanted.keys() - saved.keys()), sorted(saved.keys() - wanted.keys())
    if unknown:
        problem = f"has no {unknown[0]}"
    elif extra and not partial:
        problem = f"has {extra[0]}, which this model has not"
    else:
        problem = next(
            (
                f"has {name} of shape {saved[name]}, this model {shape}"
                for name, shape in wanted.items()
                if None not in (saved[name], shape) and saved[name] != shape
            ),
            None,
        )
    if problem:
        raise CheckpointError(f"{step_dir}: {problem}; {_OTHER_CONFIG}")


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
    manager: ocp.CheckpointManager, abstract_state, report: Callable[[str], None]
) -> tuple[int, object, dict | None] | None:
    """(step, state, data) of the newest checkpoint that restores and verifies, or None
    when there is none at all. Each damaged step is moved to WORKDIR/damaged_checkpoints/
    and `report`ed in one line; with no good step left, a CheckpointError."""
    directory = str(manager.directory)
    moved = []
    for step in sorted(manager.all_steps(), reverse=True):
        try:
            state, data = restore(manager, step, abstract_state)
        except Damaged as damage:
            moved.append(step)
            report(f"{damage}; moved to {_move_aside(directory, step)}")
            continue
        if moved:
            manager.reload()
            report(f"resuming from step {step}, the newest checkpoint that verifies")
        return step, state, data
    if not moved:
        return None
    manager.reload()
    raise CheckpointError(
        f"{directory}: no checkpoint verifies (steps {', '.join(map(str, moved))} are damaged "
        f"and now in {os.path.join(os.path.dirname(directory), DAMAGED_DIR)}); start the run "
        "in a new workdir"
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


# A storage failure that says nothing about the checkpoint's bytes: report, never move.
_TRANSIENT = re.compile(
    r"\b(UNAVAILABLE|DEADLINE_EXCEEDED|RESOURCE_EXHAUSTED|PERMISSION_DENIED|UNAUTHENTICATED|"
    r"CANCELLED)\b"
)


@contextlib.contextmanager
def _read_errors(directory: str, step: int):
    """Turns a failure to read step `step` into one line: Damaged for what the bytes
    caused (a truncated or missing file, unreadable metadata), a CheckpointError for a
    failure of the storage or the machine (nothing is wrong with the checkpoint)."""
    if not isinstance(sys.unraisablehook, _QuietAbandonedReads):
        sys.unraisablehook = _QuietAbandonedReads(sys.unraisablehook)
    try:
        yield
    except UserError:
        raise
    except Exception as error:
        text = str(error)
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        reason = lines[0] if lines else type(error).__name__
        reason = reason if len(reason) <= 300 else reason[:297] + "..."
        where = f"{directory}/{step}"
        if isinstance(error, MemoryError) or _TRANSIENT.search(text):
            raise CheckpointError(f"{where}: could not be read ({reason})") from None
        if _MISMATCH.search(text):
            raise CheckpointError(f"{where}: {reason}; {_OTHER_CONFIG}") from None
        raise Damaged(directory, step, _unreadable(error, reason)) from None


# Orbax's words for arrays that are not those asked for: another config's, not damage.
_MISMATCH = re.compile(r"is not compatible with the stored shape|pytree structure error")


def _unreadable(error: BaseException, reason: str) -> str:
    """What a failed read says: the array and the file it failed on when tensorstore
    names them somewhere in the chain of causes (orbax's own message holds the
    array's whole TensorStore spec instead)."""
    chain = []
    while error is not None and len(chain) < 8:
        chain.append(str(error).split(" [tensorstore_spec")[0].strip())
        error = error.__cause__ or error.__context__
    text = "\n".join(chain)
    array = re.search(r'(?:Error reading|Metadata at) "([^"]+?)/[^"/]*"', text)
    if not array:
        return f"unreadable: {reason}"
    name = array.group(1).replace(".", "/")
    files = re.findall(r'local file "([^"]+)"', text)
    data_files = [file for file in files if not file.endswith("/")]
    where = data_files[-1] if data_files else files[-1] if files else "its item"
    short = re.search(r"byte range \[\d+, (\d+)\) is not valid for value of size (\d+)", text)
    if short:
        end, size = short.groups()
        file = f"a file in {where}" if where.endswith("/") else where
        return f"{name} is unreadable: {file} is truncated ({size} bytes, {end} needed)"
    innermost = chain[-1]
    code = re.match(r"([A-Z][A-Z_]+): ", innermost)
    if innermost.endswith("does not exist"):
        detail = "its metadata does not exist"
    else:
        detail = innermost.rsplit('": ', 1)[-1]
        detail = detail if len(detail) <= 120 else detail[:117] + "..."
    return f"{name} is unreadable in {where}: {detail}" + (f" ({code.group(1)})" if code else "")


class _QuietAbandonedReads:
    """When one array of a checkpoint fails to read, orbax closes its event loop with the
    reads of the others in flight; as they end, tensorstore's callbacks meet the closed
    loop and orbax's abandoned coroutines raise the same failure again, each printed
    with a traceback after the one-line report. Those are dropped; any other
    exception without a caller goes to the `previous` hook."""

    def __init__(self, previous):
        self.previous = previous

    def __call__(self, unraisable) -> None:
        error, source = unraisable.exc_value, unraisable.object
        code = getattr(source, "cr_code", None)
        closed_loop = isinstance(error, RuntimeError) and str(error) == "Event loop is closed"
        if closed_loop or (code is not None and f"{os.sep}orbax{os.sep}" in code.co_filename):
            return
        self.previous(unraisable)


class _QuietAbandonedGathers(logging.Filter):
    """The same abandoned reads, as asyncio reports them when it collects their futures:
    "_GatheringFuture exception was never retrieved", with orbax's traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (
            "exception was never retrieved" in record.getMessage()
            and error is not None
            and any(
                f"{os.sep}orbax{os.sep}" in frame.f_code.co_filename
                for frame, _ in traceback.walk_tb(error.__traceback__)
            )
        )


logging.getLogger("asyncio").addFilter(_QuietAbandonedGathers())


def latest_step(workdir: str, *, own: bool = False) -> int | None:
    """The newest complete step of a workdir, or None. A step folder that is not a
    complete checkpoint fails, naming it; for the run that holds the workdir (`own`),
    it is moved aside instead (a kill -9 while rotation deleted a step leaves one)."""
    directory = epath.Path(workdir_lib.checkpoint_dir(workdir))
    if not directory.is_dir():
        return None
    if own:
        check_step_dirs(directory, move=True)
    with _read_only_manager(workdir) as manager:
        return manager.latest_step()


def restore_params(
    workdir: str, abstract_params, step: int | None = None, *, what: str = "workdir"
):
    """(the parameters of a workdir's checkpoint, or the subtree `abstract_params` names;
    its step). Without `step`, the newest checkpoint that verifies; a damaged newer one
    is reported in one line and left in place (the workdir is only read). `what` names
    the workdir in errors ("init_checkpoint", "workdir")."""
    directory = workdir_lib.checkpoint_dir(workdir)
    with _read_only_manager(workdir) as manager:
        steps = sorted(manager.all_steps(), reverse=True)
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
                params = _restore_params(manager, directory, candidate, abstract_params)
            except Damaged as damage:
                absl_logging.warning("%s", damage)
                damages.append(damage)
                continue
            if damages:
                absl_logging.warning(
                    "using step %d, the newest checkpoint that verifies", candidate
                )
            return params, candidate
    if len(damages) == 1:
        raise damages[0]
    raise CheckpointError(f"{what}={workdir!r}: no checkpoint verifies; the newest: {damages[0]}")


def _restore_params(manager, directory: str, step: int, abstract_params):
    fingerprints = _read_data(manager, directory, step)[FINGERPRINTS]
    _check_fits(directory, step, {"params": abstract_params}, fingerprints, partial=True)
    args = ocp.args.PyTreeRestore(
        item={"params": abstract_params},
        restore_args={"params": ocp.checkpoint_utils.construct_restore_args(abstract_params)},
        partial_restore=True,
    )
    with _read_errors(directory, step):
        restored = manager.restore(step, args=ocp.args.Composite(**{ITEM: args}))
    params = restored[ITEM]["params"]
    _verify(directory, step, {"params": params}, fingerprints)
    return params
