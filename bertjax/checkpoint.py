"""Checkpoints and the workdir that describes a run.

    WORKDIR/
      config.json         the resolved experiment config
      model_config.json   the BertConfig (bert_config.json field names plus ours)
      vocab.txt | *.model the vocabulary the run was trained with
      checkpoints/<step>/ orbax checkpoints of the train state (the last K)
      metrics.jsonl, tensorboard/

The train state holds the step; the data position and the dropout rng follow
from it (train.py), so restoring a checkpoint resumes a run exactly.
"""

import json
import os
import shutil

import jax
import orbax.checkpoint as ocp
from etils import epath

from bertjax.model import SHAPE_FIELDS, BertConfig

CONFIG_FILE = "config.json"
MODEL_CONFIG_FILE = "model_config.json"
CHECKPOINT_DIR = "checkpoints"


class CheckpointError(ValueError):
    """A workdir or checkpoint that does not fit this run."""


def make_manager(workdir: str, *, max_to_keep: int) -> ocp.CheckpointManager:
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep, create=True, enable_async_checkpointing=True
    )
    directory = epath.Path(os.path.abspath(os.path.join(workdir, CHECKPOINT_DIR)))
    return ocp.CheckpointManager(directory, options=options, item_names=("state",))


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
    directory = os.path.join(workdir, CHECKPOINT_DIR)
    if not os.path.isdir(directory):
        return None
    with ocp.CheckpointManager(
        epath.Path(os.path.abspath(directory)),
        options=ocp.CheckpointManagerOptions(read_only=True, create=False),
        item_names=("state",),
    ) as manager:
        return manager.latest_step()


def restore_params(workdir: str, abstract_params, step: int | None = None):
    """Only the parameters of another run's checkpoint (phase 2's init_checkpoint)."""
    step = latest_step(workdir) if step is None else step
    if step is None:
        raise CheckpointError(f"init_checkpoint={workdir!r}: no checkpoint under {workdir}")
    directory = epath.Path(os.path.abspath(os.path.join(workdir, CHECKPOINT_DIR)))
    with ocp.CheckpointManager(
        directory,
        options=ocp.CheckpointManagerOptions(read_only=True, create=False),
        item_names=("state",),
    ) as manager:
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


def read_model_config(workdir: str) -> BertConfig | None:
    path = os.path.join(workdir, MODEL_CONFIG_FILE)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return BertConfig.from_dict(json.load(f))


def check_same_shapes(saved: BertConfig, current: BertConfig, *, where: str) -> None:
    """Fails when a saved model's parameter shapes differ from this run's."""
    for name in SHAPE_FIELDS:
        if getattr(saved, name) != getattr(current, name):
            raise CheckpointError(
                f"{where}: the saved model has {name}={getattr(saved, name)}, this run "
                f"config.model.{name}={getattr(current, name)}"
            )


VOCAB_NAMES = ("vocab.txt", "vocab.json", "vocab.model")


def workdir_vocab(workdir: str) -> str | None:
    """The vocabulary write_run_description copied into the workdir, if any."""
    for name in VOCAB_NAMES:
        path = os.path.join(workdir, name)
        if os.path.exists(path):
            return path
    return None


def write_run_description(workdir: str, config, model_config: BertConfig, vocab_file: str) -> str:
    """Writes config, model config and vocab into the workdir; returns the workdir vocab path."""
    if jax.process_index() != 0:
        return vocab_file
    os.makedirs(workdir, exist_ok=True)
    write_json(os.path.join(workdir, CONFIG_FILE), json.loads(config.to_json_best_effort()))
    write_json(os.path.join(workdir, MODEL_CONFIG_FILE), model_config.to_dict())
    target = os.path.join(workdir, "vocab" + os.path.splitext(vocab_file)[1])
    if os.path.abspath(vocab_file) != os.path.abspath(target):
        shutil.copyfile(vocab_file, target + ".tmp")
        os.replace(target + ".tmp", target)
    return target


def write_json(path: str, value) -> None:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)
