"""BERT pretraining: the train step, evaluation, and the loop that checkpoints and resumes.

`train_step` and `eval_step` are pure module-level functions, jitted once with
explicit shardings. `train_and_evaluate(config, workdir)` is the whole run:
re-running it on the same workdir resumes from the latest checkpoint and
continues exactly (the data stream is replayed to the checkpoint's step, and
dropout rngs are folded from the step).
"""

import dataclasses
import functools
import time
from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl import logging
from flax import linen as nn
from jax.experimental import multihost_utils

from bertjax import checkpoint, losses, metrics, optim, sharding
from bertjax import model as model_lib
from bertjax.model import BertConfig, BertForPreTraining
from data_pipeline import config as data_config_lib
from data_pipeline import make_pretraining_dataset
from data_pipeline.build_vocab import resolve_vocab_file
from data_pipeline.vocab import load_vocab

TOP_LEVEL_KEYS = (
    "seed",
    "num_train_steps",
    "train_batch_size",
    "eval_batch_size",
    "num_eval_steps",
    "eval_every_steps",
    "checkpoint_every_steps",
    "checkpoints_to_keep",
    "log_every_steps",
    "init_checkpoint",
    "mesh",
    "model",
    "data",
    "optimizer",
)


class TrainingError(RuntimeError):
    """The run cannot go on (a non-finite loss)."""


@flax.struct.dataclass
class TrainState:
    step: jax.Array
    params: Any
    opt_state: Any


def _model_inputs(batch):
    return (
        batch["input_ids"],
        batch["input_mask"],
        batch["segment_ids"],
        batch["masked_lm_positions"],
    )


def train_step(state, batch, rng, *, model, tx, num_microbatches):
    """One optimizer step on a global batch; returns the new state and metric sums.

    With `num_microbatches` > 1 the batch is split and gradients are summed
    over the pieces; each piece's loss is divided by the whole batch's
    denominators, so the update equals the one of the full batch.
    """
    step_rng = jax.random.fold_in(rng, state.step)
    mlm_weight = jnp.sum(batch["masked_lm_weights"].astype(jnp.float32))
    nsp_count = jnp.asarray(batch["next_sentence_labels"].shape[0], jnp.float32)

    def loss_fn(params, microbatch, dropout_rng):
        mlm_logits, nsp_logits = model.apply(
            {"params": params},
            *_model_inputs(microbatch),
            deterministic=False,
            rngs={"dropout": dropout_rng},
        )
        sums = losses.pretraining_sums(mlm_logits, nsp_logits, microbatch)
        return losses.total_loss(sums, mlm_weight=mlm_weight, nsp_count=nsp_count), sums

    grads, sums = accumulate_gradients(loss_fn, state.params, batch, step_rng, num_microbatches)
    return apply_gradients(state, grads, tx), sums


def accumulate_gradients(loss_fn, params, batch, rng, num_microbatches: int):
    """Gradients and metric sums of `loss_fn(params, batch, rng) -> (loss, sums)`.

    With `num_microbatches` > 1 the batch is split along its first axis and
    the pieces' gradients and sums are added (a scan, so one piece's
    activations live at a time); each piece gets its own rng folded from `rng`.
    """
    grad_fn = jax.grad(loss_fn, has_aux=True)
    if num_microbatches == 1:
        return grad_fn(params, batch, rng)
    pieces = jax.tree.map(
        lambda x: x.reshape(num_microbatches, x.shape[0] // num_microbatches, *x.shape[1:]),
        batch,
    )

    def accumulate(carry, inputs):
        index, microbatch = inputs
        grads, sums = grad_fn(params, microbatch, jax.random.fold_in(rng, index))
        return jax.tree.map(jnp.add, carry, (grads, sums)), None

    first = jax.tree.map(lambda x: x[0], pieces)
    zeros = jax.tree.map(
        lambda leaf: jnp.zeros(leaf.shape, leaf.dtype), jax.eval_shape(grad_fn, params, first, rng)
    )
    (grads, sums), _ = jax.lax.scan(accumulate, zeros, (jnp.arange(num_microbatches), pieces))
    return grads, sums


def apply_gradients(state, grads, tx):
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    return state.replace(step=state.step + 1, params=params, opt_state=opt_state)


def eval_step(params, batch, *, model):
    mlm_logits, nsp_logits = model.apply(
        {"params": params}, *_model_inputs(batch), deterministic=True
    )
    return losses.pretraining_sums(mlm_logits, nsp_logits, batch)


def _add(total, sums):
    return sums if total is None else jax.tree.map(jnp.add, total, sums)


# ------------------------------------------------------------------------------ setup


@dataclasses.dataclass
class Run:
    """Everything the loop needs, built and checked before anything compiles."""

    config: ml_collections.ConfigDict
    data: data_config_lib.DataConfig
    model_config: BertConfig
    model: BertForPreTraining
    tx: optax.GradientTransformation
    mesh: jax.sharding.Mesh
    state_shardings: Any
    abstract_state: Any
    vocab_file: str


def check_keys(config: ml_collections.ConfigDict, keys, *, positive=()) -> None:
    """Exactly `keys` at the top level, and each of `positive` at least 1; names the key."""
    unknown = sorted(set(config.keys()) - set(keys))
    if unknown:
        raise data_config_lib.ConfigError(f"unknown config key: config.{unknown[0]}")
    missing = sorted(set(keys) - set(config.keys()))
    if missing:
        raise data_config_lib.ConfigError(f"missing config key: config.{missing[0]}")
    for key in positive:
        if config[key] < 1:
            raise data_config_lib.ConfigError(f"config.{key}={config[key]}: must be at least 1")


def check_config(config: ml_collections.ConfigDict) -> None:
    check_keys(
        config,
        TOP_LEVEL_KEYS,
        positive=("num_train_steps", "train_batch_size", "eval_batch_size", "log_every_steps"),
    )
    for key in ("num_eval_steps", "eval_every_steps", "checkpoint_every_steps"):
        if config[key] < 0:
            raise data_config_lib.ConfigError(f"config.{key}={config[key]}: must be >= 0")
    if jax.process_count() > 1 and config.eval_every_steps and not config.num_eval_steps:
        # Every host must run the same number of eval steps (they are collective),
        # and hosts' shares of the held-out split differ in size.
        raise data_config_lib.ConfigError(
            "config.num_eval_steps=0 (the whole split) works on one host only; "
            f"set it for this {jax.process_count()}-host run"
        )
    microbatches = optim.from_config(config.optimizer).num_microbatches
    if config.train_batch_size % microbatches:
        raise data_config_lib.ConfigError(
            f"config.train_batch_size={config.train_batch_size} is not divisible by "
            f"config.optimizer.num_microbatches={microbatches}"
        )


def build_run(config: ml_collections.ConfigDict, workdir: str, *, devices=None) -> Run:
    """Checks every option and builds model, optimizer, mesh and shardings; compiles nothing.

    `devices` defaults to all devices; the mesh must use exactly these.
    """
    check_config(config)
    data = data_config_lib.from_config(config.data)
    model_config = model_lib.from_config(config.model)
    data_config_lib.check_max_positions(data, model_config.max_position_embeddings)

    saved_model_config = checkpoint.read_model_config(workdir)
    if saved_model_config is not None:
        checkpoint.check_same_shapes(saved_model_config, model_config, where=f"workdir {workdir}")
    if config.init_checkpoint:
        init_model_config = checkpoint.read_model_config(config.init_checkpoint)
        if init_model_config is None:
            raise checkpoint.CheckpointError(
                f"config.init_checkpoint={config.init_checkpoint!r}: no "
                f"{checkpoint.MODEL_CONFIG_FILE} there"
            )
        checkpoint.check_same_shapes(
            init_model_config,
            model_config,
            where=f"config.init_checkpoint={config.init_checkpoint!r}",
        )

    vocab_file = _vocab_file(workdir, data)
    vocab_size = len(load_vocab(vocab_file))
    if vocab_size != model_config.vocab_size:
        raise data_config_lib.ConfigError(
            f"the vocabulary {vocab_file} has {vocab_size} entries but "
            f"config.model.vocab_size={model_config.vocab_size}"
        )
    data = data.replace(vocab_file=vocab_file)

    mesh = sharding.make_mesh(config.mesh, devices)
    sharding.check_batch_size(config.train_batch_size, mesh, option="config.train_batch_size")
    sharding.check_batch_size(config.eval_batch_size, mesh, option="config.eval_batch_size")
    microbatch = config.train_batch_size // config.optimizer.num_microbatches
    sharding.check_batch_size(microbatch, mesh, option="the microbatch size")

    model = BertForPreTraining(model_config)
    tx = optim.make_optimizer(config.optimizer, config.num_train_steps)
    shardings, abstract_state = sharded_abstract_state(
        functools.partial(_init_state, model=model, tx=tx, data=data),
        functools.partial(_init_params, model=model, data=data),
        mesh,
    )
    return Run(
        config=config,
        data=data,
        model_config=model_config,
        model=model,
        tx=tx,
        mesh=mesh,
        state_shardings=shardings,
        abstract_state=abstract_state,
        vocab_file=vocab_file,
    )


def _vocab_file(workdir: str, data) -> str:
    """The run's vocabulary: the workdir's copy when resuming, else the configured or learned one."""
    return checkpoint.workdir_vocab(workdir) or resolve_vocab_file(data)


def _init_params(rng, *, model, data):
    """Parameters boxed with their logical axis names."""
    ids = jnp.zeros((1, data.max_seq_length), jnp.int32)
    positions = jnp.zeros((1, data.max_predictions_per_seq), jnp.int32)
    return model.init(rng, ids, ids, ids, positions, deterministic=True)["params"]


def _init_state(rng, *, model, tx, data):
    params = nn.meta.unbox(_init_params(rng, model=model, data=data))
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))


def sharded_abstract_state(init_state_fn, init_params_fn, mesh):
    """(shardings, abstract state with them) from init functions of an rng; runs nothing.

    `init_params_fn` returns the parameters boxed with their logical names, which
    decide the shardings; a dimension that does not split evenly fails here.
    """
    abstract = jax.eval_shape(init_state_fn, jax.random.key(0))
    boxed_params = jax.eval_shape(init_params_fn, jax.random.key(0))
    shardings = state_shardings(abstract, boxed_params, mesh)
    sharding.check_divisible(abstract.params, shardings.params)
    abstract_state = jax.tree.map(
        lambda leaf, s: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=s),
        abstract,
        shardings,
    )
    return shardings, abstract_state


def state_shardings(abstract_state, boxed_params, mesh):
    """Parameters by their logical names; optimizer moments like the parameter they track."""
    param_shardings = sharding.logical_shardings(boxed_params, mesh)
    by_path = {
        path: (leaf_sharding, leaf.shape)
        for (path, leaf_sharding), leaf in zip(
            jax.tree_util.tree_flatten_with_path(param_shardings)[0],
            jax.tree.leaves(abstract_state.params),
            strict=True,
        )
    }

    def like_a_parameter(path, leaf):
        # Adam's mu and nu sit under paths ending in a parameter's path.
        for start in range(len(path)):
            match = by_path.get(tuple(path[start:]))
            if match is not None and match[1] == leaf.shape:
                return match[0]
        return sharding.replicated(mesh)

    return TrainState(
        step=sharding.replicated(mesh),
        params=param_shardings,
        opt_state=jax.tree_util.tree_map_with_path(like_a_parameter, abstract_state.opt_state),
    )


# ------------------------------------------------------------------------------- loop


def create_state(run: Run):
    """The initial state, or the latest checkpoint's, or init_checkpoint's parameters."""
    init = jax.jit(
        functools.partial(_init_state, model=run.model, tx=run.tx, data=run.data),
        out_shardings=run.state_shardings,
    )
    state = init(jax.random.key(run.config.seed))
    if run.config.init_checkpoint:
        params = checkpoint.restore_params(run.config.init_checkpoint, run.abstract_state.params)
        state = state.replace(params=params, opt_state=run.tx.init(params))
        state = jax.device_put(state, run.state_shardings)
    return state


def jit_steps(run: Run):
    """The train and eval steps, jitted with explicit shardings; the state is donated."""
    return jit_train_and_eval(
        functools.partial(
            train_step,
            model=run.model,
            tx=run.tx,
            num_microbatches=run.config.optimizer.num_microbatches,
        ),
        functools.partial(eval_step, model=run.model),
        run.state_shardings,
        run.mesh,
    )


def jit_train_and_eval(train_fn, eval_fn, state_shardings, mesh):
    """`train_fn(state, batch, rng)` with the state donated, and `eval_fn(params, batch)`.

    Batches are split over the batch axes; metrics and eval outputs come back
    replicated, so every host holds the whole global result.
    """
    batch_sharding = sharding.batch_sharding(mesh)
    replicated = sharding.replicated(mesh)
    p_train_step = jax.jit(
        train_fn,
        in_shardings=(state_shardings, batch_sharding, replicated),
        out_shardings=(state_shardings, replicated),
        donate_argnums=0,
    )
    p_eval_step = jax.jit(
        eval_fn,
        in_shardings=(state_shardings.params, batch_sharding),
        out_shardings=replicated,
    )
    return p_train_step, p_eval_step


def train_and_evaluate(
    config: ml_collections.ConfigDict, workdir: str, *, stop_after: int | None = None
) -> dict:
    """Pretrains per `config` in `workdir`, resuming from its latest checkpoint if any.

    `stop_after` ends this invocation after that step with a checkpoint, as a
    preempted or time-sliced job would; running again continues the same run.
    Returns the last evaluation's metrics (empty when the run never evaluates).
    """
    run = build_run(config, workdir)
    check_eval_shares(run)
    with jax.set_mesh(run.mesh), nn.logical_axis_rules(sharding.RULES):
        return _train(run, config, workdir, stop_after)


def _train(run: Run, config, workdir: str, stop_after: int | None) -> dict:
    vocab_file = checkpoint.write_run_description(workdir, config, run.model_config, run.vocab_file)
    run.data = run.data.replace(vocab_file=vocab_file)
    manager = checkpoint.make_manager(workdir, max_to_keep=config.checkpoints_to_keep)
    start_step = manager.latest_step() or 0
    if start_step:
        logging.info("resuming from %s at step %d", workdir, start_step)
        state = checkpoint.restore(manager, start_step, run.abstract_state)
    else:
        state = create_state(run)

    p_train_step, p_eval_step = jit_steps(run)
    schedule = optim.learning_rate_schedule(config.optimizer, config.num_train_steps)
    writer = metrics.MetricWriter(workdir, num_train_steps=config.num_train_steps)
    rng = jax.random.key(config.seed)

    host_batch_size = config.train_batch_size // jax.process_count()
    train_data = make_pretraining_dataset(
        run.data,
        split="train",
        batch_size=host_batch_size,
        process_index=jax.process_index(),
        process_count=jax.process_count(),
        seed=config.seed,
    )
    # The stream is deterministic for a seed: skipping the batches the
    # checkpointed steps consumed puts a resumed run exactly where it stopped.
    train_batches = train_data.skip(start_step).as_numpy_iterator()

    tokens_per_step = config.train_batch_size * run.data.max_seq_length
    window, window_start, window_step = None, time.perf_counter(), start_step
    started = time.perf_counter()
    last_eval: dict = {}
    last_step = (
        config.num_train_steps if stop_after is None else min(stop_after, config.num_train_steps)
    )
    for step in range(start_step + 1, last_step + 1):
        batch = sharding.make_global_batch(next(train_batches), run.mesh)
        state, sums = p_train_step(state, batch, rng)
        window = _add(window, sums)
        writer.progress_bar(step, started, start_step)

        last = step == config.num_train_steps
        if step % config.log_every_steps == 0 or last:
            summary = checked_finite(losses.summarize(window), step)
            elapsed = time.perf_counter() - window_start
            steps_per_s = (step - window_step) / max(elapsed, 1e-9)
            summary["learning_rate"] = float(schedule(step - 1))
            summary["steps_per_second"] = steps_per_s
            summary["tokens_per_second"] = steps_per_s * tokens_per_step
            writer.write(step, "train", summary)
            eta = (config.num_train_steps - step) / max(steps_per_s, 1e-9)
            writer.console(
                f"step {step:>6}/{config.num_train_steps}  loss {summary['loss']:.4f}  "
                f"mlm_acc {summary['mlm_accuracy']:.3f}  nsp_acc {summary['nsp_accuracy']:.3f}  "
                f"lr {summary['learning_rate']:.2e}  {steps_per_s:.2f} steps/s  "
                f"{summary['tokens_per_second']:,.0f} tokens/s  eta {metrics.format_duration(eta)}"
            )
            window, window_start, window_step = None, time.perf_counter(), step

        if config.eval_every_steps and (step % config.eval_every_steps == 0 or last):
            last_eval = evaluate(run, state.params, p_eval_step)
            writer.write(step, "eval", last_eval)
            writer.console(
                f"eval at {step}: loss {last_eval['loss']:.4f}  "
                f"mlm_acc {last_eval['mlm_accuracy']:.3f}  "
                f"perplexity {last_eval['mlm_perplexity']:.2f}  "
                f"nsp_acc {last_eval['nsp_accuracy']:.3f}"
            )

        if (
            (config.checkpoint_every_steps and step % config.checkpoint_every_steps == 0)
            or last
            or step == last_step
        ):
            # Never write parameters that a non-finite loss may have spoiled.
            if window is not None:
                checked_finite(losses.summarize(window), step)
            checkpoint.save(manager, step, state)
    if start_step >= last_step and config.eval_every_steps:
        # Nothing left to train (a finished run started again): report where it stands.
        last_eval = evaluate(run, state.params, p_eval_step)
    manager.wait_until_finished()
    manager.close()
    writer.close()
    return last_eval


def check_eval_shares(run: Run) -> None:
    """On several hosts, fails on all of them alike if one's eval share is short.

    Eval steps are collective: a host that runs out of batches while the
    others go on hangs the run. Padding a short share would need a weight per
    example for NSP, which the batch schema lacks, and repeating batches would
    count examples twice; so a short share is a config error, found before
    training by reading every host's first `num_eval_steps` batches once (the
    eval set is fixed by data.eval_seed, so every later eval sees the same).
    """
    config = run.config
    if jax.process_count() == 1 or not config.eval_every_steps:
        return
    host_batch_size = config.eval_batch_size // jax.process_count()
    dataset = _eval_dataset(run).take(config.num_eval_steps)
    count = sum(1 for _ in dataset.as_numpy_iterator())
    counts = multihost_utils.process_allgather(np.int32(count))
    for host, host_count in enumerate(counts):
        if host_count < config.num_eval_steps:
            raise data_config_lib.ConfigError(
                f"config.num_eval_steps={config.num_eval_steps}: host {host}'s share of the "
                f"eval split gives only {host_count} batches of {host_batch_size} "
                f"(config.eval_batch_size={config.eval_batch_size} over "
                f"{jax.process_count()} hosts); set it to at most {int(min(counts))}"
            )


def _eval_dataset(run: Run):
    """This host's share of the eval split, one pass, in batches of its share of eval_batch_size."""
    return make_pretraining_dataset(
        run.data,
        split="eval",
        batch_size=run.config.eval_batch_size // jax.process_count(),
        process_index=jax.process_index(),
        process_count=jax.process_count(),
        seed=run.config.seed,
    )


def evaluate(run: Run, params, p_eval_step) -> dict:
    """Held-out MLM/NSP metrics over `num_eval_steps` batches (0: the whole eval split)."""
    config = run.config
    dataset = _eval_dataset(run)
    if config.num_eval_steps:
        dataset = dataset.take(config.num_eval_steps)
    total = None
    for host_batch in dataset.as_numpy_iterator():
        total = _add(total, p_eval_step(params, sharding.make_global_batch(host_batch, run.mesh)))
    if total is None:
        raise data_config_lib.ConfigError(
            f"the eval split gives no batch of config.eval_batch_size={config.eval_batch_size}"
        )
    return losses.summarize(total)


def checked_finite(summary: dict, step: int) -> dict:
    """`summary`, unless its loss is not finite: then the run stops, naming the step."""
    if not np.isfinite(summary["loss"]):
        raise TrainingError(
            f"non-finite loss ({summary['loss']}) by step {step}; no checkpoint written after "
            "it. Lower config.optimizer.learning_rate or check the data."
        )
    return summary
