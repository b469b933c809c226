"""Orbax checkpoints of a run, under WORKDIR/checkpoints/<step>/: the train state
(`state`) and where each host's input stream stands (`data`, JSON).

The train state holds the step, from which the dropout rng follows, and the
data item lets the input continue where it stood (train.py), so restoring a
checkpoint resumes a run exactly. The other files of a workdir belong to workdir.py.
"""

import logging
import re
import shutil
import threading

import jax
import orbax.checkpoint as ocp
from absl import logging as absl_logging
from etils import epath

from bertjax import workdir as workdir_lib
from bertjax.workdir import CheckpointError

ITEM = "state"
DATA_ITEM = "data"
# What every complete step directory holds; orbax writes it before the commit.
_STEP_METADATA = "_CHECKPOINT_METADATA"


def make_manager(workdir: str, *, max_to_keep: int) -> ocp.CheckpointManager:
    directory = epath.Path(workdir_lib.checkpoint_dir(workdir))
    check_step_dirs(directory)
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep, create=True, enable_async_checkpointing=True
    )
    return ocp.CheckpointManager(directory, options=options, item_names=(ITEM, DATA_ITEM))


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
        return ocp.CheckpointManager(directory, options=options, item_names=(ITEM, DATA_ITEM))
    finally:
        absl_logger.removeFilter(_not_read_only_notice)


def _not_read_only_notice(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Given directory is read only")


def check_step_dirs(directory: epath.Path) -> None:
    """Fails, naming it, on a step directory that is not a complete checkpoint (a stray
    or foreign folder), which orbax would take as the latest step. Orbax's own
    unfinished saves (`N.orbax-checkpoint-tmp-*`) are not steps; it cleans them up."""
    if not directory.is_dir():
        return
    for step_dir in directory.iterdir():
        if not step_dir.name.isdigit():
            continue
        if not (step_dir / _STEP_METADATA).exists() or not (step_dir / ITEM).is_dir():
            raise CheckpointError(
                f"{step_dir}: not a complete bertjax checkpoint (no {_STEP_METADATA} or "
                f"{ITEM}/); move it out of {directory} to resume from the other steps"
            )
        if not ocp.step.is_path_finalized(step_dir):
            raise CheckpointError(f"{step_dir}: an unfinished checkpoint; move it out")


def save(manager: ocp.CheckpointManager, step: int, state, data: dict) -> None:
    """Starts an asynchronous save of the state and the JSON `data`; `wait` completes it.

    The previous save's failure (a full disk, no permission) raises here, as a
    CheckpointError; a save that fails is never listed as a step.
    """
    with _save_errors(manager):
        manager.save(
            step,
            args=ocp.args.Composite(
                **{ITEM: ocp.args.StandardSave(state), DATA_ITEM: ocp.args.JsonSave(data)}
            ),
            force=True,
        )


# How tensorstore and orbax word a storage failure: an absl status code first.
_STORAGE_FAILURE = re.compile(
    r"^(RESOURCE_EXHAUSTED|PERMISSION_DENIED|NOT_FOUND|UNAVAILABLE|DEADLINE_EXCEEDED|"
    r"UNAUTHENTICATED|FAILED_PRECONDITION|DATA_LOSS|ABORTED):"
)


class _save_errors:
    """Turns a storage failure of a save into one CheckpointError line."""

    def __init__(self, manager: ocp.CheckpointManager):
        self.manager = manager

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if error is None or not (isinstance(error, OSError) or _STORAGE_FAILURE.match(str(error))):
            return False
        latest = self.manager.latest_step()
        kept = f"step {latest}" if latest is not None else "none"
        raise CheckpointError(
            f"saving a checkpoint in {self.manager.directory} failed ({str(error).strip()}); "
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
    """(state on the shardings of `abstract_state`, the data item or None): checkpoints
    from before the data item have none."""
    args = {ITEM: ocp.args.StandardRestore(abstract_state)}
    has_data = (epath.Path(manager.directory) / str(step) / DATA_ITEM).exists()
    if has_data:
        args[DATA_ITEM] = ocp.args.JsonRestore()
    restored = manager.restore(step, args=ocp.args.Composite(**args))
    return restored[ITEM], restored[DATA_ITEM] if has_data else None


def latest_step(workdir: str) -> int | None:
    if not epath.Path(workdir_lib.checkpoint_dir(workdir)).is_dir():
        return None
    with _read_only_manager(workdir) as manager:
        return manager.latest_step()


def restore_params(workdir: str, abstract_params, step: int | None = None):
    """Only (a subtree of) the parameters of a workdir's checkpoint: an init_checkpoint's."""
    step = latest_step(workdir) if step is None else step
    if step is None:
        raise CheckpointError(f"init_checkpoint={workdir!r}: no checkpoint under {workdir}")
    with _read_only_manager(workdir) as manager:
        restored = manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.PyTreeRestore(
                    item={"params": abstract_params},
                    restore_args={
                        "params": ocp.checkpoint_utils.construct_restore_args(abstract_params)
                    },
                    partial_restore=True,
                )
            ),
        )
    return restored.state["params"]
