"""Orbax checkpoints of the train state, under WORKDIR/checkpoints/<step>/.

The train state holds the step; the data position and the dropout rng follow
from it (train.py), so restoring a checkpoint resumes a run exactly. The other
files of a workdir belong to workdir.py.
"""

import os

import orbax.checkpoint as ocp
from etils import epath

from bertjax import workdir as workdir_lib
from bertjax.workdir import CheckpointError

ITEM = "state"


def make_manager(workdir: str, *, max_to_keep: int) -> ocp.CheckpointManager:
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep, create=True, enable_async_checkpointing=True
    )
    directory = epath.Path(workdir_lib.checkpoint_dir(workdir))
    return ocp.CheckpointManager(directory, options=options, item_names=(ITEM,))


def _read_only_manager(workdir: str) -> ocp.CheckpointManager:
    return ocp.CheckpointManager(
        epath.Path(workdir_lib.checkpoint_dir(workdir)),
        options=ocp.CheckpointManagerOptions(read_only=True, create=False),
        item_names=(ITEM,),
    )


def save(manager: ocp.CheckpointManager, step: int, state) -> None:
    """Starts an asynchronous save; `manager.wait_until_finished()` completes it."""
    manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state)), force=True)


def restore(manager: ocp.CheckpointManager, step: int, abstract_state):
    """Restores onto the shardings of `abstract_state` (ShapeDtypeStructs with .sharding)."""
    restored = manager.restore(
        step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state))
    )
    return restored.state


def latest_step(workdir: str) -> int | None:
    if not os.path.isdir(workdir_lib.checkpoint_dir(workdir)):
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
