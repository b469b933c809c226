"""The training loop of every task: the pure train and eval steps and the run around them.

`train_step` and `eval_step` are module-level pure functions, jitted once with
explicit shardings; what differs between tasks (model, inputs, loss, data,
scores) comes from the task's `Setup` (tasks/contract.py). `train_and_evaluate(config,
workdir)` is the whole run: re-running it on the same workdir resumes from
the latest checkpoint and continues exactly (each checkpoint records where
every host's input stream stood, and dropout rngs are folded from the step).

A workdir belongs to one run at a time (workdir.claim) and holds one run's
history: a run must have the config.json of the run there, checkpoint or not
(workdir.check_same_run), and a resumed run cuts the metrics back to its
checkpoint's step (metrics.cut_history). SIGTERM and Ctrl-C save
the step in hand and raise `Preempted` (preemption.py). Nothing non-finite is
saved: the loss and the parameters are checked before every save, and an
error waits for the save in flight, so the last good checkpoint survives.
"""

import dataclasses
import functools
import json
import time
from collections.abc import Callable, Sequence
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

from bertjax import (
    checkpoint,
    events,
    flops,
    metrics,
    optim,
    preemption,
    profiling,
    sharding,
    tasks,
)
from bertjax import hooks as hooks_lib
from bertjax import workdir as workdir_lib
from bertjax.hooks import Hook
from bertjax.model import stack_layers, unstack_layers
from bertjax.tasks.contract import Setup, Task, Teacher, apply_model, host_share
from data_pipeline import streams
from data_pipeline.errors import ConfigError, UserError
from data_pipeline.finetune import records


class TrainingError(UserError):
    """The run cannot go on (a non-finite loss)."""


@flax.struct.dataclass
class TrainState:
    step: jax.Array
    params: Any
    opt_state: Any
    # A distillation's teacher parameters (Setup.teacher), or None: restored from the
    # teacher's workdir at every start, never updated and never checkpointed.
    teacher: Any = None


# The batch column that holds the teacher's outputs.
TEACHER = "teacher"


def train_step(
    state, batch, rng, *, setup: Setup, tx, num_microbatches: int, skip_non_finite: bool = False
):
    """One optimizer step on a global batch; returns the new state and metric sums.

    With `num_microbatches` > 1 the batch is split and gradients are summed
    over the pieces; each piece's loss divides by the whole batch's
    denominators, so the update equals the one of the full batch. With
    `skip_non_finite` (tx then leaves the parameters alone on such a step) a
    step whose gradients are not finite adds nothing to the metric sums.
    """
    step_rng = jax.random.fold_in(rng, state.step)
    model, objective = setup.model, setup.objective
    if setup.teacher is not None and TEACHER not in batch:
        batch = {**batch, TEACHER: teacher_outputs(setup, state.teacher, batch, num_microbatches)}
    denominators = objective.denominators(batch)

    def forward(params, microbatch, dropout_rng):
        return apply_model(
            model.module,
            params,
            microbatch,
            model.inputs,
            deterministic=False,
            rngs={"dropout": dropout_rng},
        )

    def loss_of_outputs(outputs, microbatch):
        sums = objective.sums(outputs, microbatch)
        return objective.loss(sums, denominators), sums

    if objective.whole_batch and num_microbatches > 1:
        grads, sums = cached_gradients(
            forward, loss_of_outputs, state.params, batch, step_rng, num_microbatches
        )
    else:

        def loss_fn(params, microbatch, dropout_rng):
            return loss_of_outputs(forward(params, microbatch, dropout_rng), microbatch)

        grads, sums = accumulate_gradients(loss_fn, state.params, batch, step_rng, num_microbatches)
    if skip_non_finite:
        finite = all_finite(grads)
        sums = jax.tree.map(lambda s: jnp.where(finite, s, jnp.zeros_like(s)), sums)
    return apply_gradients(state, grads, tx), sums


def teacher_outputs(setup: Setup, params, batch, num_microbatches: int):
    """The teacher's outputs for a global batch, without a gradient, a microbatch at a
    time (its activations are never kept for a backward pass)."""
    inputs = {name: batch[name] for name in setup.model.inputs}

    def forward(piece):
        return apply_model(
            setup.teacher.module, params, piece, setup.model.inputs, deterministic=True
        )

    if num_microbatches == 1:
        outputs = forward(inputs)
    else:
        outputs = join_microbatches(
            jax.lax.map(forward, split_microbatches(inputs, num_microbatches))
        )
    return jax.lax.stop_gradient(outputs)


def _ready_teacher_cache(run: "Run") -> None:
    """A cached teacher's outputs (Setup.teacher_cache) computed if they are missing."""
    cache = run.setup.teacher_cache
    if cache is not None and not cache.complete:
        fill_teacher_cache(run)
    elif cache is not None:
        _first_host_says(f"the teacher's outputs: stored in {cache.directory}")


def fill_teacher_cache(run: "Run") -> None:
    """Computes and stores the teacher outputs the run's batches carry (Setup.teacher_cache,
    bertjax/tasks/teacher_cache.py): every training row once, in order, the teacher's parameters
    sharded as in a step; each host computes its share, the first host writes."""
    cache, setup = run.setup.teacher_cache, run.setup
    abstract, _ = _teacher_params(cache.teacher, setup.model.inputs, run.mesh)
    params, _ = checkpoint.restore_params(
        cache.teacher.workdir, abstract, what="config.distill.teacher"
    )
    with_teacher_setup = dataclasses.replace(setup, teacher=cache.teacher)
    microbatches = run.optimizer.num_microbatches
    forward = jax.jit(
        lambda params, batch: teacher_outputs(with_teacher_setup, params, batch, microbatches)
    )
    rows, started = cache.fingerprints["rows"], time.monotonic()
    _first_host_says(
        f"computing the teacher's outputs of {rows:,} training rows into {cache.directory}"
    )
    hosts = jax.process_count()
    batches = cache.rows_dataset(
        batch_size=run.config.train_batch_size // hosts,
        process_index=jax.process_index(),
        process_count=hosts,
    )
    outputs = None
    for host_batch in batches.as_numpy_iterator():
        inputs = {name: host_batch[name] for name in setup.model.inputs}
        computed = forward(params, sharding.make_global_batch(inputs, run.mesh))
        computed = multihost_utils.process_allgather(computed, tiled=True)
        index = multihost_utils.process_allgather(host_batch[records.ROW_INDEX], tiled=True)
        if outputs is None:
            outputs = tuple(np.zeros((rows, *x.shape[1:]), np.float32) for x in computed)
        for stored, values in zip(outputs, computed, strict=True):
            stored[index[index >= 0]] = np.asarray(values, np.float32)[index >= 0]
    if jax.process_index() == 0:
        cache.write(outputs)
    multihost_utils.sync_global_devices("teacher cache written")
    _first_host_says(
        f"stored the teacher's outputs in {cache.directory} "
        f"({time.monotonic() - started:.0f} s); the teacher is not run again"
    )


def _first_host_says(line: str) -> None:
    if jax.process_index() == 0:
        print(line, flush=True)


def all_finite(tree) -> jax.Array:
    """Whether every element of every array in `tree` is finite (a scalar bool)."""
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


def split_microbatches(batch, num_microbatches: int):
    """[B, ...] arrays as [M, B / M, ...], microbatch m holding rows m, m + M, m + 2M, ...:
    a batch sharded over the data axes in blocks of rows keeps every microbatch spread
    over all the devices (one microbatch per block would leave the others idle)."""
    return jax.tree.map(
        lambda x: jnp.swapaxes(
            x.reshape(x.shape[0] // num_microbatches, num_microbatches, *x.shape[1:]), 0, 1
        ),
        batch,
    )


def join_microbatches(pieces):
    """split_microbatches undone: [M, B / M, ...] back to [B, ...] in the batch's order."""
    return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:]), pieces)


def accumulate_gradients(loss_fn, params, batch, rng, num_microbatches: int):
    """Gradients and metric sums of `loss_fn(params, batch, rng) -> (loss, sums)`.

    With `num_microbatches` > 1 the batch is split along its first axis and
    the pieces' gradients and sums are added (a scan, so one piece's
    activations live at a time); each piece gets its own rng folded from `rng`.
    """
    grad_fn = jax.grad(loss_fn, has_aux=True)
    if num_microbatches == 1:
        return grad_fn(params, batch, rng)
    pieces = split_microbatches(batch, num_microbatches)

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


def cached_gradients(forward, loss_of_outputs, params, batch, rng, num_microbatches: int):
    """Gradients and metric sums of a loss that reads the whole batch's outputs together
    (in-batch negatives), with one microbatch's activations alive at a time: GradCache
    (Gao et al., 2021, arXiv:2101.06983).

    The microbatches' outputs are computed first, without gradients; the loss and its
    gradients with respect to those outputs come from the whole batch at once; then each
    microbatch is run again (with the same dropout rng) and its parameter gradients are
    its outputs' gradients pulled back through it. The result is the whole batch's
    gradient: `forward(params, microbatch, rng) -> outputs`, `loss_of_outputs(outputs,
    batch) -> (loss, sums)`.
    """
    pieces = split_microbatches(batch, num_microbatches)
    indices = jnp.arange(num_microbatches)

    def piece_outputs(inputs):
        index, microbatch = inputs
        return forward(params, microbatch, jax.random.fold_in(rng, index))

    outputs = join_microbatches(jax.lax.map(piece_outputs, (indices, pieces)))
    (_, sums), output_grads = jax.value_and_grad(loss_of_outputs, has_aux=True)(outputs, batch)
    output_grads = split_microbatches(output_grads, num_microbatches)

    def accumulate(carry, inputs):
        index, microbatch, cotangent = inputs
        _, pull_back = jax.vjp(
            lambda p: forward(p, microbatch, jax.random.fold_in(rng, index)), params
        )
        (grads,) = pull_back(cotangent)
        return jax.tree.map(jnp.add, carry, grads), None

    zeros = jax.tree.map(jnp.zeros_like, params)
    grads, _ = jax.lax.scan(accumulate, zeros, (indices, pieces, output_grads))
    return grads, sums


def apply_gradients(state, grads, tx):
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    return state.replace(step=state.step + 1, params=params, opt_state=opt_state)


def eval_step(params, batch, *, setup: Setup):
    """What the task keeps of one held-out batch (metric sums, or outputs to score)."""
    outputs = apply_model(setup.model.module, params, batch, setup.model.inputs, deterministic=True)
    return setup.evaluation.outputs(outputs, batch)


# ------------------------------------------------------------------------------ setup


@dataclasses.dataclass(frozen=True, eq=False)
class Run:
    """Everything the loop needs, built and checked before anything compiles."""

    config: ml_collections.ConfigDict
    task: Task
    setup: Setup
    optimizer: optim.OptimizerConfig
    tx: optax.GradientTransformation
    mesh: jax.sharding.Mesh
    state_shardings: Any
    abstract_state: Any

    @functools.cached_property
    def eval_batches(self):
        """This host's eval batches (a tf.data.Dataset): `num_eval_steps` of them (0: the
        whole split), the same ones each time it is read. Made once per run: making the
        pipeline traces its functions, a second or more of CPU each time."""
        dataset = self.setup.data.eval(**host_share(self.config, "eval_batch_size"))
        if self.setup.evaluation.num_steps:
            dataset = dataset.take(self.setup.evaluation.num_steps)
        return streams.without_autotune_thread(dataset)


def check_config(config: ml_collections.ConfigDict) -> None:
    """Raises ConfigError for a bad option that shows without reading data or devices: the
    task's own checks (Task.check_config)."""
    tasks.for_config(config).check_config(config)


def check_devices(
    config: ml_collections.ConfigDict, *, devices: int, hosts: int, slices: int, per_host: int
) -> None:
    """What build_run checks of the config against its devices, from their counts alone
    (`devices` over `hosts` hosts of `per_host` each, in `slices` slices): for a run whose
    machines are not at hand (bertjax.tpu.launch), after check_config. Reads no data and
    starts no backend."""
    tasks.for_config(config).check_hosts(config, hosts)
    shape = sharding.mesh_shape(config.mesh, devices)
    sharding.check_slices(shape, slices)
    sharding.check_tensor_within_host(config.mesh, shape, per_host)
    check_batch_sizes(config, shape, hosts, config.optimizer.num_microbatches)


def check_batch_sizes(config, shape, processes: int, num_microbatches: int) -> None:
    """The global batches split evenly over the batch axes of a mesh of `shape` and over
    `processes` hosts, and so do the train batch's microbatches."""
    for key in ("train_batch_size", "eval_batch_size"):
        sharding.check_batch_split(config[key], shape, processes, option=f"config.{key}")
    if config.train_batch_size % num_microbatches:
        raise ConfigError(
            f"config.train_batch_size={config.train_batch_size} is not divisible by "
            f"config.optimizer.num_microbatches={num_microbatches}"
        )
    sharding.check_batch_split(
        config.train_batch_size // num_microbatches, shape, processes, option="the microbatch size"
    )


def build_run(
    config: ml_collections.ConfigDict, workdir: str, *, task: Task | None = None, devices=None
) -> Run:
    """Checks every option, reads the task's data and builds model, optimizer, mesh and
    shardings; compiles nothing. `task` defaults to the one `config.task` names, `devices`
    to all devices; the mesh uses exactly these.
    """
    task = task or tasks.for_config(config)
    devices = jax.devices() if devices is None else devices
    sharding.check_platform(config.platform, devices)
    mesh = sharding.make_mesh(config.mesh, devices)
    task.check_hosts(config, jax.process_count())
    with jax.set_mesh(mesh):  # for a task that shapes its batches to it (packing)
        setup = task.setup(config, workdir)
    optimizer = optim.from_config(setup.objective.optimizer)
    check_batch_sizes(config, mesh.shape, jax.process_count(), optimizer.num_microbatches)
    tx = optim.make_optimizer(optimizer, setup.objective.num_train_steps)
    state_shardings, abstract_state = sharded_abstract_state(
        functools.partial(_init_state, setup=setup, tx=tx),
        functools.partial(_init_params, module=setup.model.module, inputs=setup.model.inputs),
        mesh,
    )
    if setup.teacher is not None:
        teacher, teacher_shardings = _teacher_params(setup.teacher, setup.model.inputs, mesh)
        state_shardings = state_shardings.replace(teacher=teacher_shardings)
        abstract_state = abstract_state.replace(teacher=teacher)
    return Run(config, task, setup, optimizer, tx, mesh, state_shardings, abstract_state)


def _teacher_params(teacher: Teacher, inputs: dict[str, int], mesh):
    """A teacher's abstract parameters, placed, and their shardings: by their logical axis
    names, as the student's are."""
    boxed = jax.eval_shape(
        functools.partial(_init_params, module=teacher.module, inputs=inputs), jax.random.key(0)
    )
    shardings = sharding.logical_shardings(boxed, mesh)
    # Shapes only: no sharding constraint, which a mesh in context would apply to them.
    params = jax.tree.map(
        lambda x: x.unbox(apply_constraint=False) if isinstance(x, nn.meta.AxisMetadata) else x,
        boxed,
        is_leaf=lambda x: isinstance(x, nn.meta.AxisMetadata),
    )
    sharding.check_divisible(params, shardings)
    return _placed(params, shardings), shardings


def _init_params(rng, *, module: nn.Module, inputs: dict[str, int]):
    """A model's parameters boxed with their logical axis names, for `inputs` (Model.inputs)."""
    zeros = [jnp.zeros((1, length), jnp.int32) for length in inputs.values()]
    return module.init(rng, *zeros, deterministic=True)["params"]


def _init_state(rng, *, setup: Setup, tx):
    params = nn.meta.unbox(_init_params(rng, module=setup.model.module, inputs=setup.model.inputs))
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
    return shardings, _placed(abstract, shardings)


def _placed(abstract, shardings):
    """Abstract arrays (shapes and dtypes) with their shardings."""
    return jax.tree.map(
        lambda leaf, s: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=s),
        abstract,
        shardings,
    )


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


# ------------------------------------------------------------------------------- state


def create_state(run: Run):
    """The initial state, with the init checkpoint's parameters where the task takes them,
    and the teacher's."""
    init = jax.jit(
        functools.partial(_init_state, setup=run.setup, tx=run.tx),
        out_shardings=run.state_shardings.replace(teacher=None),
    )
    state = init(jax.random.key(run.config.seed))
    if not run.setup.init.keys:
        return with_teacher(run, state)
    params = {**state.params, **_init_checkpoint_params(run)}
    for path in run.setup.init.fresh:
        key, module = path.split("/")
        params[key] = {**params[key], module: state.params[key][module]}
    state = state.replace(params=params, opt_state=run.tx.init(params))
    return with_teacher(run, jax.device_put(state, run.state_shardings.replace(teacher=None)))


def with_teacher(run: Run, state):
    """`state` with the teacher's parameters from its workdir (Setup.teacher), if any."""
    if run.setup.teacher is None:
        return state
    params, _ = checkpoint.restore_params(
        run.setup.teacher.workdir, run.abstract_state.teacher, what="config.distill.teacher"
    )
    return state.replace(teacher=params)


def _init_checkpoint_params(run: Run) -> dict:
    """The init checkpoint's parameters under `setup.init.keys`, in this run's layer layout."""
    init, model_config = run.setup.init, run.setup.model.config
    wanted = {key: run.abstract_state.params[key] for key in init.keys}
    for path in init.fresh:
        key, module = path.split("/")
        wanted[key] = {k: v for k, v in wanted[key].items() if k != module}
    if init.scan_layers == model_config.scan_layers or "bert" not in wanted:
        return checkpoint.restore_params(init.checkpoint, wanted, what="config.init_checkpoint")[0]
    # The checkpoint's layout, restored whole on every device, then rearranged.
    layers = model_config.num_hidden_layers
    to_saved, to_run = (
        (stack_layers, unstack_layers) if init.scan_layers else (unstack_layers, stack_layers)
    )
    replicated = sharding.replicated(run.mesh)
    saved = jax.eval_shape(lambda p: {**p, "bert": to_saved(p["bert"], layers)}, wanted)
    saved = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated), saved
    )
    restored, _ = checkpoint.restore_params(init.checkpoint, saved, what="config.init_checkpoint")
    return {**restored, "bert": to_run(restored["bert"], layers)}


def jit_steps(run: Run):
    """The train step with the state donated, and the eval step.

    Batches are split over the batch axes; metrics and eval outputs come back
    replicated, so every host holds the whole global result.
    """
    batch_sharding = sharding.batch_sharding(run.mesh)
    replicated = sharding.replicated(run.mesh)
    jitted_train_step = jax.jit(
        functools.partial(
            train_step,
            setup=run.setup,
            tx=run.tx,
            num_microbatches=run.optimizer.num_microbatches,
            skip_non_finite=run.optimizer.skip_non_finite_steps > 0,
        ),
        in_shardings=(run.state_shardings, batch_sharding, replicated),
        out_shardings=(run.state_shardings, replicated),
        donate_argnums=0,
    )
    jitted_eval_step = jax.jit(
        functools.partial(eval_step, setup=run.setup),
        in_shardings=(run.state_shardings.params, batch_sharding),
        out_shardings=replicated,
    )
    return jitted_train_step, jitted_eval_step


# -------------------------------------------------------------------------------- loop


def train_and_evaluate(
    config: ml_collections.ConfigDict,
    workdir: str,
    *,
    task: Task | None = None,
    stop_after: int | None = None,
    devices=None,
    hooks: Sequence[Callable[["Session"], Hook]] = (),
) -> dict:
    """Trains `task` (default: the one `config.task` names) per `config` in `workdir`,
    resuming from its latest checkpoint if any.

    `stop_after` ends this invocation after that step with a checkpoint, as a
    preempted or time-sliced job would; running again continues the same run.
    `devices` (default: all) are the ones the mesh spans. Returns what
    results.json holds: {"eval": the last evaluation, "best": the best by the
    task's metric, "best_metric": that metric's name and direction,
    "init_checkpoint"} (no "eval" when the run never evaluates). Raises `Preempted`
    after saving when asked to stop. `hooks` are factories of hooks of your own,
    `factory(session) -> hooks.Hook`, made after config.hooks' (bertjax/hooks.py).
    """
    events.compile_seconds()  # counted from here, for the event log
    with workdir_lib.claim(workdir) as claim, preemption.StopRequests() as stop:
        # Also without a checkpoint: a run killed before its first one has logged steps.
        workdir_lib.check_same_run(workdir, config, kind=(task or tasks.for_config(config)).name)
        start_step = checkpoint.latest_step(workdir, own=True) or 0
        run = build_run(config, workdir, task=task, devices=devices)
        hook_factories = (*hooks_lib.from_config(config.hooks), *hooks)
        num_train_steps = run.setup.objective.num_train_steps
        if start_step > num_train_steps:
            raise workdir_lib.CheckpointError(
                f"{workdir}: its latest checkpoint is of step {start_step}, beyond the "
                f"{num_train_steps} steps this config trains"
            )
        check_eval_shares(run)
        if not start_step:
            check_init_checkpoint(run)
        if stop.pending:
            raise preemption.Preempted(f"{stop.signal_name} before step {start_step + 1}")
        with jax.set_mesh(run.mesh), nn.logical_axis_rules(sharding.RULES):
            return _train(run, workdir, start_step, stop_after, claim, stop, hook_factories)


def _train(
    run: Run, workdir: str, start_step: int, stop_after, claim, stop, hook_factories
) -> dict:
    config, setup = run.config, run.setup
    restored, restore_time = _restore_newest_good(run, workdir, start_step)
    start_step = restored[0] if restored else 0
    # The train stream before config.json and anything compiles: data that cannot feed
    # the run (an empty corpus, evaluation off or not) is one line, and leaves a new
    # workdir free for the corrected config.
    saved = (restored[2] or {}).get("stream_positions") if restored else None
    _ready_teacher_cache(run)
    batches = _train_stream(run, start_step, saved, f"{workdir}: checkpoint {start_step}")
    # The run's config.json, before its first step: from here on the workdir takes no
    # other run (check_same_run), whether or not this one lives to save a checkpoint.
    workdir_lib.write_run_description(
        workdir,
        config,
        setup.model.config,
        setup.data.vocab_file,
        kind=run.task.name,
        description=setup.description.to_json(),
    )
    # From here on this process works in the workdir: where its time goes is logged.
    event_log = events.EventLog(workdir)
    event_log.start(start_step)
    if restored:
        event_log.write("restore", step=start_step, **restore_time.fields())
    # Rotation never deletes the step resumed from: the newest known to verify.
    manager = checkpoint.make_manager(
        workdir, max_to_keep=config.checkpoints_to_keep, keep=(start_step,) if start_step else ()
    )
    num_steps = setup.objective.num_train_steps
    last_step = num_steps if stop_after is None else min(stop_after, num_steps)
    try:
        state = create_state(run) if restored is None else with_teacher(run, restored[1])
        held = (state, batches, manager, claim, stop, event_log, hook_factories)
        results = _loop(Session(run, workdir, start_step, last_step, *held))
    except BaseException as error:
        # Let the save in flight commit, so the last good checkpoint survives the error.
        try:
            checkpoint.wait(manager, config.preemption_save_seconds)
        except Exception as save_error:  # noqa: BLE001 - the first error is the one to report
            if str(save_error) != str(error):
                logging.error("the checkpoint save in flight failed too: %s", save_error)
        try:
            event_log.stop(error)
        except Exception as log_error:  # noqa: BLE001 - a full disk: the run's error is reported
            logging.error(
                "the stop event could not be written to %s either (%s)",
                workdir_lib.EVENTS_FILE,
                type(log_error).__name__,
            )
        raise
    else:
        event_log.stop(None, paused=last_step < num_steps)
    finally:
        manager.close()
        event_log.close()
    return results


def _restore_newest_good(run: Run, workdir: str, start_step: int) -> tuple:
    """((step, state, data) of the newest checkpoint that verifies, damaged newer ones
    moved aside; None with no checkpoint (`start_step` 0)), and the time it took."""
    restore_time = events.Stopwatch()
    if not start_step:
        return None, restore_time
    with checkpoint.make_manager(workdir, max_to_keep=None) as reader:
        restored = checkpoint.restore_newest_good(
            reader, run.abstract_state.replace(teacher=None), logging.warning
        )
    restore_time.stop()
    logging.info("resuming from %s at step %d", workdir, restored[0])
    return restored, restore_time


@dataclasses.dataclass(frozen=True, eq=False)
class Session:
    """What this process's part of a run holds, from its restore to its last save; the
    loop and its hooks read it. When the run logs, evaluates and saves is decided here."""

    run: Run
    workdir: str
    start_step: int  # the step resumed after (0: none)
    last_step: int  # the last step this process trains (train_and_evaluate's stop_after)
    state: Any  # at start_step: the first step takes it (donated), so read it before only
    batches: "TrainBatches"
    manager: Any  # checkpoint.make_manager's
    claim: workdir_lib.Claim
    stop: preemption.StopRequests  # a hook asks the run to stop with stop.request(why)
    event_log: events.EventLog
    # Of hooks from outside train.py, `factory(session) -> hooks.Hook`: config.hooks',
    # then train_and_evaluate's.
    hook_factories: tuple = ()

    @property
    def num_steps(self) -> int:
        return self.run.setup.objective.num_train_steps

    def logs(self, step: int) -> bool:
        """Whether `step` has a train line: every config.log_every_steps, and the last."""
        return step % self.run.config.log_every_steps == 0 or step == self.num_steps

    def evaluates(self, step: int) -> bool:
        """Whether `step` has an evaluation: every eval_every_steps (0: never), and the last."""
        every = self.run.setup.evaluation.every_steps
        return bool(every) and (step % every == 0 or step == self.num_steps)

    def saves(self, step: int) -> bool:
        """Whether `step` has a checkpoint: every config.checkpoint_every_steps (0: none),
        each evaluation's where the task asks, and the last step this process trains."""
        every = self.run.config.checkpoint_every_steps
        return bool(
            (every and step % every == 0)
            or (self.evaluates(step) and self.run.setup.evaluation.checkpoint_each)
            or step == self.last_step
        )

    def renew_claim(self, step: int, state) -> None:
        """A hook: after every step the workdir claim's lease renewed, and the workdir kept
        whatever the run ends with (workdir.Claim.stepped)."""
        del step, state
        self.claim.stepped()


def _loop(session: Session) -> dict:
    """Trains the steps after session.start_step to session.last_step, each followed by the
    hooks in order; returns what results.json holds."""
    run, start_step = session.run, session.start_step
    state, step = session.state, start_step
    checkpoint.check_space(session.manager, state)  # before the first step, not at the first save
    jitted_train_step, jitted_eval_step = jit_steps(run)
    writer = metrics.MetricWriter(
        session.workdir, num_train_steps=session.num_steps, start_step=start_step
    )
    profiler = profiling.Profiler(run.config.profile, session.workdir, session.event_log)
    rng = jax.random.key(run.config.seed)
    log = TrainLog(session, writer)  # its clocks start here
    evaluator = Evaluator(session, jitted_eval_step, log)
    saver = Saver(session, log)
    hooks = _hooks(session, profiler, log, evaluator, saver)
    try:
        for step in range(start_step + 1, session.last_step + 1):
            profiler.before(step)
            host_batch = log.next_batch(session.batches)  # timed: the wait for input
            features = {name: host_batch[name] for name in run.setup.objective.features}
            batch = sharding.make_global_batch(features, run.mesh)
            state, sums = jitted_train_step(state, batch, rng)
            log.add(step, sums, host_batch, rows=len(batch[run.setup.objective.features[0]]))
            for hook in hooks:
                hook.call(step, state)
        if start_step >= session.last_step and run.setup.evaluation.every_steps:
            # Nothing left to train (a finished run started again): report where it stands.
            # Every host evaluates (the steps are collective), whatever results.json says.
            evaluator.record(start_step, state.params)
        with log.times.span("checkpoint_commit", step):
            checkpoint.wait(session.manager)
    finally:
        log.times.flush(step)
        profiler.close(step)
    writer.close()
    return evaluator.results


def _hooks(session: Session, profiler, log, evaluator, saver) -> tuple[Hook, ...]:
    """The hooks after each step, in their order, each with what it needs of the other
    hosts; the rules between them are bertjax/hooks.py's, checked here."""
    return hooks_lib.checked(
        Hook(profiler.after, collective=False),
        Hook(session.renew_claim, collective=False),
        Hook(log.write, collective=False),  # its values are global: every host logs alike
        # JAX's preemption sync point on several hosts: called at every step on each.
        Hook(saver.stop_if_requested, collective=True, stops=True),
        Hook(evaluator.evaluate_if_due, collective=True),
        *hooks_lib.made(session.hook_factories, session),
        # Also stops, on a request seen during the hooks after the stop check.
        Hook(saver.save_if_due, collective=True, stops=True, saves=True),
    )


class TrainLog:
    """The train lines: the metric sums of the steps since the last line, turned into
    means, rates, MFU and a line on the console at the steps that have one (`write`, a
    hook); and the `steps` events of the event log (`times`)."""

    def __init__(self, session: Session, writer: metrics.MetricWriter):
        run, start_step = session.run, session.start_step
        self.session, self.run, self.writer, self.start_step = session, run, writer, start_step
        self.schedule = optim.learning_rate_schedule(
            run.optimizer, run.setup.objective.num_train_steps
        )
        # Before the timed steps: on CPU the peak is a matmul probe (once per host, cached).
        model_config = run.setup.model.config
        self.peak_flops, source = flops.peak_flops(run.mesh.devices.flat, model_config.dtype)
        if self.peak_flops:
            logging.info("MFU against a peak of %.3e FLOP/s: %s", self.peak_flops, source)
        else:
            logging.warning("%s", source)
        self.input_wait_warned = False
        self.window = metrics.TrainWindow(start_step)
        self.times = events.StepTimes(session.event_log, start_step, peak_flops=self.peak_flops)
        self.flops_of = {}  # (rows, input lengths) -> model FLOPs of a step
        self.started = time.perf_counter()

    def next_batch(self, batches) -> dict:
        """The next host batch, the time waited for it counted as input wait."""
        waiting = time.perf_counter()
        batch = next(batches)
        seconds = time.perf_counter() - waiting
        self.window.waited(seconds)
        self.times.waited(seconds)
        return batch

    def add(self, step: int, sums, host_batch: dict, *, rows: int) -> None:
        """A step's metric sums; `rows` is the global batch's."""
        step_flops = self.step_flops(host_batch, rows)
        self.window.add(sums, metrics.real_tokens(host_batch), step_flops)
        self.writer.progress_bar(step, self.started, self.start_step)
        self.times.stepped(step, step_flops)

    def step_flops(self, host_batch: dict, rows: int) -> float:
        """The model FLOPs of a step of `rows` rows at this batch's input lengths (a run
        has a few: packed rows, length buckets)."""
        inputs = {
            name: host_batch[name].shape[1] if name in host_batch else length
            for name, length in self.run.setup.model.inputs.items()
        }
        key = (rows, *inputs.values())
        if key not in self.flops_of:
            self.flops_of[key] = flops.flops_per_step(self.run.task, self.run.setup, rows, inputs)
        return self.flops_of[key]

    def write(self, step: int, state) -> None:
        """A hook: at the steps that have one (Session.logs), the train line of the steps
        since the last."""
        if not self.session.logs(step):
            return
        run = self.run
        check_bad_steps(state, run.optimizer, step)
        summary = checked_finite(run.setup.objective.summarize(self.window.sums), step)
        summary["learning_rate"] = float(self.schedule(step - 1))
        # Every host reads as many tokens as this one, give or take its padding.
        summary |= self.window.rates(
            step,
            peak_flops=self.peak_flops,
            hosts=jax.process_count(),
        )
        if run.optimizer.skip_non_finite_steps:
            summary["skipped_steps"] = int(state.opt_state.total_notfinite)
        self.times.flush(step)
        self.writer.write(step, "train", summary)
        num_steps = run.setup.objective.num_train_steps
        self.writer.console(
            metrics.train_line(step, num_steps, summary, run.setup.objective.console)
        )
        # The first window of a process waits for the pipeline to start: not a stall.
        if self.window.step > self.start_step:
            self._warn_of_input_stalls(step, summary["input_wait_fraction"])
        self.window = metrics.TrainWindow(step)

    def _warn_of_input_stalls(self, step: int, fraction: float) -> None:
        limit = self.run.config.input_wait_warning
        if self.input_wait_warned or not limit or fraction <= limit:
            return
        self.input_wait_warned = True
        data = self.run.config.data
        more = [
            hint
            for key, hint in (
                ("num_workers", "config.data.num_workers=N (worker processes make the examples)"),
                ("source", "config.data.source='tfrecord' (examples made offline)"),
            )
            if key in data
        ]
        logging.warning(
            "input: steps %d to %d waited for the host pipeline %.0f%% of their time "
            "(config.input_wait_warning=%g)%s; data_pipeline.benchmark measures it",
            self.window.step + 1,
            step,
            100 * fraction,
            limit,
            "; for more host throughput: " + ", or ".join(more) if more else "",
        )


class Saver:
    """Checkpoints of the run, each after the checks that keep non-finite values out,
    each a span of the event log (the log's `times`); its hooks save at the checkpoint
    steps and on a stop request."""

    def __init__(self, session: Session, log: TrainLog):
        self.session, self.run, self.log = session, session.run, log
        self.params_finite = jax.jit(all_finite)

    def stop_if_requested(self, step: int, state) -> None:
        """A hook: on a stop request (seen at the same step on every host), saves and stops."""
        if self.session.stop.requested(step):
            self.save_and_stop(step, state, saved=False)

    def save_if_due(self, step: int, state) -> None:
        """A hook: saves at the steps that have a checkpoint (Session.saves); then stops
        if a request arrived during the evaluation, which it cut short."""
        due = self.session.saves(step)
        if due:
            self.save(step, state)
        if self.session.stop.pending:
            self.save_and_stop(step, state, saved=due)

    def save(self, step: int, state) -> None:
        """Saves `state` and every host's stream position, unless a value went non-finite
        (the parameters, or the loss of the steps not yet logged). A teacher is not saved."""
        state = state.replace(teacher=None)
        nbytes = sum(x.nbytes for x in jax.tree.leaves(state))
        window, batches = self.log.window, self.session.batches
        with self.log.times.span("checkpoint", step, bytes=nbytes):
            if window.sums is not None:
                checked_finite(self.run.setup.objective.summarize(window.sums), step)
            check_bad_steps(state, self.run.optimizer, step)
            if not self.params_finite(state.params):
                raise TrainingError(
                    f"non-finite parameters after step {step}; not saved. Lower "
                    "config.optimizer.learning_rate or check the data."
                )
            checkpoint.check_space(self.session.manager, state)
            checkpoint.save(
                self.session.manager,
                step,
                state,
                {"stream_positions": batches.record()},
            )

    def save_and_stop(self, step: int, state, *, saved: bool):
        """Saves (unless `saved`), waits up to preemption_save_seconds for the save to
        commit, and raises Preempted saying whether it did."""
        started = time.perf_counter()
        why = self.session.stop.signal_name or "a preemption notice"
        self.session.event_log.write("signal", name=why, step=step)
        if not saved:
            self.save(step, state)
        budget = self.run.config.preemption_save_seconds
        with self.log.times.span("checkpoint_commit", step):
            committed = checkpoint.wait(self.session.manager, budget)
        took = time.perf_counter() - started
        if not committed:
            raise preemption.Preempted(
                f"{why} at step {step}: its checkpoint did not commit within "
                f"config.preemption_save_seconds={budget}; the run resumes from the latest "
                "complete one"
            )
        raise preemption.Preempted(
            f"{why} at step {step}: checkpoint {step} saved in {took:.1f} s; run the same "
            "command to resume"
        )


class Evaluator:
    """Evaluations of the run, recorded in metrics, results.json and, at the last step,
    the task's prediction files."""

    def __init__(self, session: Session, jitted_eval_step, log: TrainLog):
        self.session, self.run, self.workdir = session, session.run, session.workdir
        self.eval_step, self.log, self.writer = jitted_eval_step, log, log.writer
        self.metric = metric = self.run.task.best_metric(self.run.config)
        self.results = workdir_lib.read_results(self.workdir)
        self.results.update(
            init_checkpoint=self.run.setup.init.checkpoint,
            # What "best" follows, for tools that compare runs (bertjax.sweep).
            best_metric={"name": metric.name, "higher_is_better": metric.higher_is_better},
        )
        # Rotation spares the best evaluation's checkpoint (the one of a resumed run too).
        session.manager.keep_best(self.results.get("best", {}).get("step"))

    def evaluate_if_due(self, step: int, state) -> None:
        """A hook: at the steps that have an evaluation (Session.evaluates), records one,
        left out of the train line's rates, which are of training alone."""
        if self.session.evaluates(step):
            with self.log.window.paused(), self.log.times.span("eval", step):
                self.record(step, state.params)

    def record(self, step: int, params) -> None:
        evaluated = evaluate(self.run, params, self.eval_step, stop=self.session.stop)
        if evaluated is None:
            return  # cut short by a stop request
        values, predictions = evaluated
        self.writer.write(step, "eval", values)
        shown = "  ".join(f"{k} {v:.4f}" for k, v in values.items() if isinstance(v, float))
        self.writer.console(f"eval at step {step}: {shown}")
        self.results["eval"] = {"step": step, **values}
        best = self.results.get("best")
        if best is None or self.metric.is_better(
            values[self.metric.name], best.get(self.metric.name)
        ):
            self.results["best"] = {"step": step, **values}
            self.session.manager.keep_best(step)
        workdir_lib.write_results(self.workdir, self.results)
        evaluation = self.run.setup.evaluation
        last = step == self.run.setup.objective.num_train_steps
        if last and evaluation.write_predictions and jax.process_index() == 0:
            evaluation.write_predictions(predictions, self.workdir)


def check_bad_steps(state, optimizer: optim.OptimizerConfig, step: int) -> None:
    """Stops the run when more steps in a row had non-finite gradients than
    optimizer.skip_non_finite_steps allows."""
    in_a_row = optim.consecutive_non_finite_steps(state.opt_state)
    if in_a_row is not None and in_a_row > optimizer.skip_non_finite_steps:
        raise TrainingError(
            f"{in_a_row} steps in a row with non-finite gradients by step {step} "
            f"(config.optimizer.skip_non_finite_steps={optimizer.skip_non_finite_steps}); "
            "no checkpoint written after them. Lower config.optimizer.learning_rate or "
            "check the data."
        )


class TrainBatches:
    """This host's train batches (an iterator), the plan of the streams they come from
    (`how`, data_pipeline/streams.py), what their positions mean (`meaning`; by default,
    a stream's without positions) and where those streams stand after the last batch
    taken (`position`, its POSITIONS; None before the first, or when the stream has none)."""

    def __init__(self, batches, how: streams.Plan, meaning=streams.NO_POSITIONS):
        self.batches, self.how, self.meaning, self.position = batches, how, meaning, None

    def __next__(self) -> dict:
        batch = next(self.batches)
        if streams.POSITIONS in batch:
            self.position = batch[streams.POSITIONS]
        return batch

    def record(self) -> dict | None:
        """What a checkpoint keeps of every stream's position (every host takes part): a
        streams.Positions record; None if the stream has none."""
        positions = _gather_positions(self.position, self.how)
        return None if positions is None else self.meaning.record(positions)


def _train_stream(run: Run, start_step: int, saved, where: str) -> TrainBatches:
    """This host's train batches from the step after `start_step`: from the stream
    positions the checkpoint recorded (`saved`, its streams.Positions record; `where`
    names it), whatever the number of hosts that wrote it, or else by replaying the
    streams to that step. Positions that mean something else stop the run here."""
    data = run.setup.data
    meaning = streams.Positions(
        data.position_fields, _stream_config(run.config), streams.files_read(data.train_files())
    )
    positions = None if saved is None else meaning.read(saved, where)
    hosts, host = jax.process_count(), jax.process_index()
    how = streams.plan(len(positions) if positions else hosts, hosts, host)
    replay = 0
    if how is None:
        logging.warning(
            "the checkpoint of step %d has the input of %d streams (a run started on %d "
            "hosts), which %d hosts cannot read in the same order (one count must divide "
            "the other): replaying the input of %d hosts to step %d; the batches from here "
            "on differ from an uninterrupted run's",
            start_step,
            len(positions),
            len(positions),
            hosts,
            hosts,
            start_step,
        )
        how, positions, replay = streams.Plan(hosts, hosts, host), None, start_step
    elif positions is None and start_step:
        logging.warning(
            "the checkpoint of step %d has no input positions (the task's stream has "
            "none): replaying the input stream to it",
            start_step,
        )
        replay = start_step
    dataset = streams.host_batches(
        run.setup.data.train,
        how,
        batch_size=run.config.train_batch_size,
        seed=run.config.seed,
        positions=positions,
        skip=replay,
    )
    spec = dataset.element_spec.get(streams.POSITIONS)
    if spec is not None and spec.shape[-1] != len(meaning.fields):
        raise ValueError(
            f"the task's train batches carry {streams.POSITION} of {spec.shape[-1]} integers, "
            f"its Data.position_fields names {len(meaning.fields)}"
        )
    return TrainBatches(dataset.as_numpy_iterator(), how, meaning)


def _stream_config(config: ml_collections.ConfigDict) -> dict:
    """What the train streams are made from: config.seed, config.train_batch_size and
    config.data, as {key: value} (nested keys joined by dots), less the keys a resume may
    change (workdir.RESUMABLE_CHANGES)."""
    values = json.loads(config.to_json_best_effort())
    flat = {"seed": values["seed"], "train_batch_size": values["train_batch_size"]}
    pending = [(f"data.{k}", v) for k, v in values["data"].items()]
    while pending:
        key, value = pending.pop()
        if isinstance(value, dict):
            pending += [(f"{key}.{k}", v) for k, v in value.items()]
        else:
            flat[key] = value
    resumable = workdir_lib.RESUMABLE_CHANGES
    return {
        key: flat[key]
        for key in sorted(flat)
        if not any(key == k or (k.endswith(".") and key.startswith(k)) for k in resumable)
    }


def _gather_positions(position, how: streams.Plan) -> list | None:
    """Every stream's position (a list per stream) from this host's (`position`, the
    POSITIONS of its last batch, per stream it reads) and the other hosts'; None if
    the stream has none."""
    if position is None:
        return None
    if jax.process_count() == 1:
        return streams.gather(np.asarray([position], np.int64), [how])
    gathered = multihost_utils.process_allgather(np.asarray(position, np.int64))
    hows = [streams.Plan(how.streams, how.hosts, host) for host in range(how.hosts)]
    return streams.gather(gathered, hows)


def check_init_checkpoint(run: Run) -> None:
    """Fails before anything compiles when the task takes parameters from an init
    checkpoint that has none (a run killed before its first save, a placeholder)."""
    init = run.setup.init
    if init.keys and checkpoint.latest_step(init.checkpoint) is None:
        raise workdir_lib.CheckpointError(
            f"config.init_checkpoint={init.checkpoint!r}: no checkpoint under "
            f"{init.checkpoint} to take the parameters from"
        )


def check_eval_shares(run: Run) -> None:
    """Fails before training, on every host alike, when the eval split is too small: no
    batch at all, or on several hosts a share short of `num_eval_steps`.

    Eval steps are collective: a host that runs out of batches while the
    others go on hangs the run. Padding a short share would need a weight per
    example, which the pretraining batch schema lacks, and repeating batches
    would count examples twice; so a short share is a config error, found
    by reading every host's first `num_eval_steps` batches once (the eval set
    is fixed, so every later eval sees the same).
    """
    evaluation = run.setup.evaluation
    if not evaluation.every_steps:
        return
    hosts = jax.process_count()
    wanted = evaluation.num_steps if hosts > 1 and evaluation.num_steps else 1
    count = sum(1 for _ in run.eval_batches.take(wanted).as_numpy_iterator())
    if hosts == 1:
        if not count:
            raise ConfigError(
                "the eval split gives no batch of "
                f"config.eval_batch_size={run.config.eval_batch_size}; lower it, or turn "
                "evaluation off with config.eval_every_steps=0"
            )
        return
    counts = multihost_utils.process_allgather(np.int32(count))
    for host, host_count in enumerate(counts):
        if host_count < wanted:
            raise ConfigError(
                f"config.num_eval_steps={evaluation.num_steps}: host {host}'s share of the "
                f"eval split gives only {host_count} batches of "
                f"{run.config.eval_batch_size // jax.process_count()} "
                f"(config.eval_batch_size={run.config.eval_batch_size} over "
                f"{jax.process_count()} hosts); set it to at most {int(min(counts))}"
            )


def evaluate(run: Run, params, jitted_eval_step, stop=None) -> tuple[dict, Any] | None:
    """The task's held-out metrics over `num_eval_steps` batches (0: the whole split),
    and the predictions they scored; None if `stop` (StopRequests) cut it short."""
    evaluation = run.setup.evaluation
    outputs = []
    for batch in run.eval_batches.as_numpy_iterator():
        if stop is not None and stop.pending:
            return None
        batch = sharding.make_global_batch(batch, run.mesh)
        outputs.append(jax.tree.map(np.asarray, jitted_eval_step(params, batch)))
    if not outputs:
        raise ConfigError(
            f"the eval split gives no batch of config.eval_batch_size={run.config.eval_batch_size}"
        )
    return evaluation.score(outputs)


def checked_finite(summary: dict, step: int) -> dict:
    """`summary`, unless its loss is not finite: then the run stops, naming the step."""
    if not np.isfinite(summary["loss"]):
        raise TrainingError(
            f"non-finite loss ({summary['loss']}) by step {step}; no checkpoint written after "
            "it. Lower config.optimizer.learning_rate or check the data."
        )
    return summary
