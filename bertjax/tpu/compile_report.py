"""What an experiment's train and eval steps need on a Cloud TPU slice, compiled on any host:
python -m bertjax.tpu.aot's work (its usage says what is printed).
"""

import dataclasses
import importlib.util
import json
import os
import sys
import tempfile

import jax
from absl import logging
from flax import linen as nn

from bertjax import flops, sharding, tasks, train
from bertjax.tpu import slices
from data_pipeline import progress
from data_pipeline.errors import UserError

# Config keys that lower the HBM a train step needs, in the order worth trying.
MEMORY_KEYS = (
    "config.train_batch_size (fewer sequences per chip)",
    "config.optimizer.num_microbatches (gradient accumulation: same batch, less activation memory)",
    "config.model.remat_policy=full (recompute activations in the backward pass)",
    "config.mesh.fsdp=-1 (shard parameters and Adam moments over the chips)",
)


@dataclasses.dataclass
class Compiled:
    """What the TPU compiler says of one step, per chip."""

    fits: bool
    argument_bytes: int = 0
    output_bytes: int = 0
    alias_bytes: int = 0
    temp_bytes: int = 0
    code_bytes: int = 0
    flops: float = 0.0
    bytes_accessed: float = 0.0
    xla_seconds: float = 0.0
    error: str = ""  # the compiler's out-of-memory message when it does not fit
    seconds: float = 0.0  # to lower and compile it

    @property
    def peak_bytes(self) -> int:
        """Live at once: inputs, outputs not written over inputs, temporaries and the program."""
        return (
            self.argument_bytes
            + self.output_bytes
            - self.alias_bytes
            + self.temp_bytes
            + self.code_bytes
        )


def check_libtpu() -> None:
    if importlib.util.find_spec("libtpu") is None:
        raise UserError(
            "bertjax.tpu.aot needs the TPU compiler, which comes with libtpu: "
            "pip install -e '.[tpu]' (`make install` puts it in this checkout's .venv)"
        )


def prepare(config, workdir: str, task=None):
    """(config, task) ready to build on a host without the run's data where the task can
    (Task.without_data: pretraining builds with a placeholder vocabulary). `task`
    defaults to the one config.task names."""
    config = config.copy_and_resolve_references()
    task = task or tasks.for_config(config)
    return task.without_data(config, workdir), task


def build(config, task, tpu_slice: slices.Slice, devices, workdir: str):
    """The run (model, optimizer, mesh, shardings) on the slice's devices; compiles nothing."""
    for key in ("train_batch_size", "eval_batch_size"):
        if config[key] % tpu_slice.hosts:
            raise UserError(
                f"config.{key}={config[key]} is not divisible by the {tpu_slice.hosts} hosts "
                f"of {tpu_slice.name}"
            )
    return train.build_run(config, os.path.join(workdir, "run"), task=task, devices=devices)


def abstract_batch(run, split: str, batch_size: int) -> dict:
    """Shapes and dtypes of a global batch of `split` (Task.batch_shapes), sharded over the
    batch axes."""
    with jax.set_mesh(run.mesh):  # packed rows are planned to split over the slice
        specs = run.task.batch_shapes(run.setup, split, batch_size)
    if split == "train":
        specs = {name: specs[name] for name in run.setup.objective.features}
    batch_sharding = sharding.batch_sharding(run.mesh)
    return {
        name: jax.ShapeDtypeStruct(shape, dtype, sharding=batch_sharding)
        for name, (shape, dtype) in specs.items()
        if name != "stream_position"
    }


def compile_step(run, split: str, expected_s: float | None = None) -> Compiled:
    """Lowers and compiles the train (or eval) step; an out-of-HBM compile does not fit.
    Says so on stderr as it starts, then every 30 s how long it has taken, and the time
    left where an earlier compile of the step took `expected_s`."""
    batch_size = run.config.train_batch_size if split == "train" else run.config.eval_batch_size
    what = f"compiling the {split} step, batch {batch_size} on {run.mesh.devices.size} chips"
    compiling = progress.Progress(what, expected=expected_s).start()
    with jax.set_mesh(run.mesh), nn.logical_axis_rules(sharding.RULES), compiling.heartbeat():
        train_step, eval_step = train.jit_steps(run)
        if split == "train":
            rng = jax.eval_shape(lambda: jax.random.key(0))
            rng = jax.ShapeDtypeStruct(rng.shape, rng.dtype, sharding=sharding.replicated(run.mesh))
            batch = abstract_batch(run, "train", batch_size)
            lowered = train_step.lower(run.abstract_state, batch, rng)
        else:
            batch = abstract_batch(run, "eval", batch_size)
            lowered = eval_step.lower(run.abstract_state.params, batch)
        try:
            compiled = lowered.compile()
        except jax.errors.JaxRuntimeError as e:
            message = str(e)
            if "RESOURCE_EXHAUSTED" not in message:
                raise
            error = message.splitlines()[0]
            return Compiled(fits=False, error=error, seconds=compiling.elapsed())
    memory = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    return Compiled(
        fits=True,
        argument_bytes=memory.argument_size_in_bytes,
        output_bytes=memory.output_size_in_bytes,
        alias_bytes=memory.alias_size_in_bytes,
        temp_bytes=memory.temp_size_in_bytes,
        code_bytes=memory.generated_code_size_in_bytes,
        flops=float(cost.get("flops", 0.0)),
        bytes_accessed=float(cost.get("bytes accessed", 0.0)),
        # Negative when the compiler has no estimate.
        xla_seconds=max(float(cost.get("optimal_seconds", -1.0)), 0.0),
        seconds=compiling.elapsed(),
    )


def analyse(run, tpu_slice: slices.Slice, step: Compiled) -> dict:
    """The figures of a compiled train step: memory, FLOPs, roofline time, tokens/s, MFU."""
    config, model_config, chip = run.config, run.setup.model.config, tpu_slice.chip
    inputs = run.setup.model.inputs
    seq_len = sum(inputs[name] for name in run.setup.model.token_inputs)  # tokens a row
    batch = config.train_batch_size
    analytic = flops.flops_per_step(run.task, run.setup, batch)
    chips = tpu_slice.devices_count
    result = {
        "topology": tpu_slice.name,
        "accelerator_type": tpu_slice.accelerator_type,
        "num_slices": tpu_slice.num_slices,
        "chips": chips,
        "hosts": tpu_slice.hosts,
        "train_batch_size": batch,
        "batch_per_chip": batch / chips,
        "seq_len": seq_len,
        "dtype": model_config.dtype,
        "remat_policy": model_config.remat_policy,
        "scan_layers": model_config.scan_layers,
        "num_microbatches": run.optimizer.num_microbatches,
        "mesh": dict(run.mesh.shape),
        "hbm_capacity_bytes": chip.hbm_bytes,
        "fits": step.fits and step.peak_bytes <= chip.hbm_bytes,
        "analytic_flops_per_step": analytic,
    }
    if not step.fits:
        return {**result, "compiler_error": step.error}
    # The compiler counts a loop's body once: with scan_layers, one layer; with
    # microbatches, one microbatch. The analytic FLOPs are then the better figure of the
    # two, and the traffic (so the roofline) a lower bound.
    # GradCache (a whole-batch loss over microbatches) runs every forward pass twice:
    # four passes' FLOPs where the model's count has three.
    cached = run.setup.objective.whole_batch and run.optimizer.num_microbatches > 1
    executed = analytic * (4 / 3 if cached else 1)
    flops_time = max(step.flops, executed / chips) / chip.peak_flops
    memory_time = step.bytes_accessed / chip.hbm_bandwidth
    roofline = max(flops_time, memory_time)
    return {
        **result,
        "hbm_peak_bytes": step.peak_bytes,
        "hbm_argument_bytes": step.argument_bytes,
        "hbm_temp_bytes": step.temp_bytes,
        "hbm_output_bytes": step.output_bytes - step.alias_bytes,
        "hbm_code_bytes": step.code_bytes,
        "xla_flops_per_chip": step.flops,
        "xla_flops_per_step": step.flops * chips,
        "bytes_accessed_per_chip": step.bytes_accessed,
        "xla_estimate_s": step.xla_seconds,
        "counts_cover_one_loop": model_config.scan_layers or run.optimizer.num_microbatches > 1,
        "roofline_step_s": roofline,
        "roofline_bound": "compute" if flops_time >= memory_time else "HBM bandwidth",
        "roofline_tokens_per_s": batch * seq_len / roofline,
        "roofline_mfu": analytic / (roofline * chips * chip.peak_flops),
        "largest_batch_estimate": largest_batch_estimate(step, batch / chips, chip.hbm_bytes),
    }


def largest_batch_estimate(step: Compiled, per_chip: float, capacity: int) -> int:
    """The per-chip batch at which the temporaries, scaled linearly with the batch, would fill
    the chip. Conservative: part of the temporaries (the gradients) does not grow with the
    batch. --find_batch compiles to find the real limit."""
    fixed = step.peak_bytes - step.temp_bytes
    return int((capacity - fixed) / (step.temp_bytes / per_chip))


def find_batch(
    config, task, tpu_slice: slices.Slice, devices, workdir: str, *, fits_now: bool, expected_s
):
    """The largest per-chip train batch whose step compiles within HBM (0: not even one),
    searched from the config's batch (`fits_now`: whether that one fits, `expected_s`: how
    long it took to compile).

    Batches keep the config's microbatch count, so a per-chip batch is a multiple of it.
    """
    step = config.optimizer.num_microbatches
    chips = tpu_slice.devices_count

    def fits(per_chip: int) -> bool:
        trial = config.copy_and_resolve_references()
        with trial.unlocked():
            trial.train_batch_size = per_chip * chips
        compiled = compile_step(
            build(trial, task, tpu_slice, devices, workdir), "train", expected_s=expected_s
        )
        fit = compiled.fits and compiled.peak_bytes <= tpu_slice.chip.hbm_bytes
        logging.info("per-chip batch %d: %s", per_chip, "fits" if fit else "does not fit")
        return fit

    start = max(config.train_batch_size // chips // step * step, step)
    return largest_fitting(fits, step=step, start=start, start_fits=fits_now)


def largest_fitting(fits, *, step: int, start: int, start_fits: bool) -> int:
    """The largest multiple of `step` for which `fits` holds (0 if none), given whether it
    holds at `start`, assuming that what fits a batch fits every smaller one: doubling up
    from a batch that fits, then bisecting."""
    low, high = 0, start
    if start_fits:
        low, high = start, start * 2
        while fits(high):
            low, high = high, high * 2
    while high - low > step:
        middle = (low + high) // 2 // step * step
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


def compile_report(
    config, tpu_slice: slices.Slice, *, task=None, with_eval=True, with_find_batch=False
):
    """Everything --json prints: the train step's figures, the eval step's HBM, the batch.
    `task` defaults to the one config.task names."""
    check_libtpu()
    devices = tpu_slice.compile_devices()
    with tempfile.TemporaryDirectory() as workdir:
        config, task = prepare(config, workdir, task)
        run = build(config, task, tpu_slice, devices, workdir)
        train_step = compile_step(run, "train")
        result = analyse(run, tpu_slice, train_step)
        if with_eval:
            evaluation = compile_step(run, "eval")
            result["eval_fits"] = evaluation.fits
            result["eval_hbm_peak_bytes"] = evaluation.peak_bytes if evaluation.fits else None
        if with_find_batch:
            result["largest_batch_per_chip"] = find_batch(
                config,
                task,
                tpu_slice,
                devices,
                workdir,
                fits_now=result["fits"],
                expected_s=train_step.seconds,
            )
    return result


def format_report(r: dict) -> str:
    gib = 2**30
    lines = [
        f"{r['topology']}: {r['chips']} chips, {r['hosts']} host(s), mesh {r['mesh']}; "
        f"batch {r['train_batch_size']} x {r['seq_len']} ({r['batch_per_chip']:g} per chip), "
        f"{r['dtype']}, remat {r['remat_policy']}, scan_layers {r['scan_layers']}, "
        f"{r['num_microbatches']} microbatch(es)"
    ]
    capacity = r["hbm_capacity_bytes"] / gib
    if "compiler_error" in r:
        lines.append(f"HBM per chip   does not fit in {capacity:.1f} GiB: {r['compiler_error']}")
    else:
        lines += [
            f"HBM per chip   peak {r['hbm_peak_bytes'] / gib:.2f} GiB of {capacity:.1f} GiB "
            f"({r['hbm_peak_bytes'] / r['hbm_capacity_bytes']:.0%}): arguments "
            f"{r['hbm_argument_bytes'] / gib:.2f}, temporaries {r['hbm_temp_bytes'] / gib:.2f}, "
            f"outputs {r['hbm_output_bytes'] / gib:.2f}, code {r['hbm_code_bytes'] / gib:.2f}",
            f"FLOPs/step     XLA {r['xla_flops_per_chip']:.3e} per chip, "
            f"{r['xla_flops_per_step']:.3e} in all; analytic {r['analytic_flops_per_step']:.3e} "
            f"({r['xla_flops_per_step'] / r['analytic_flops_per_step']:.2f}x)",
            f"HBM traffic    {r['bytes_accessed_per_chip'] / gib:.2f} GiB per chip per step",
            *(
                [
                    "(scan_layers or microbatches: XLA's FLOPs and traffic count a loop's body "
                    "once; the roofline takes the analytic FLOPs, and is a lower bound)"
                ]
                if r["counts_cover_one_loop"]
                else []
            ),
            f"step time      roofline {r['roofline_step_s'] * 1000:.1f} ms "
            f"({r['roofline_bound']} bound); XLA's estimate "
            + (f"{r['xla_estimate_s'] * 1000:.1f} ms" if r["xla_estimate_s"] else "none"),
            f"at roofline    {r['roofline_tokens_per_s']:,.0f} tokens/s, "
            f"MFU {r['roofline_mfu']:.0%}",
        ]
    if "eval_fits" in r:
        if r["eval_fits"]:
            lines.append(f"eval step      peak {r['eval_hbm_peak_bytes'] / gib:.2f} GiB per chip")
        else:
            lines.append("eval step      does not fit: lower config.eval_batch_size")
    if "largest_batch_estimate" in r:
        lines.append(
            f"largest batch  about {r['largest_batch_estimate']} per chip by a linear estimate "
            "(conservative; --find_batch compiles to find it)"
        )
    if "largest_batch_per_chip" in r:
        lines.append(
            f"largest batch  {r['largest_batch_per_chip']} per chip "
            f"({r['largest_batch_per_chip'] * r['chips']} global) fits"
        )
    lines.append("fits" if r["fits"] else "does not fit")
    return "\n".join(lines)


def main(args):
    logging.set_verbosity(logging.ERROR)
    tpu_slice = slices.parse(args.topology, num_slices=args.num_slices)
    result = compile_report(
        args.config, tpu_slice, with_eval=args.eval, with_find_batch=args.find_batch
    )
    print(json.dumps(result) if args.json else format_report(result))
    if not result["fits"]:
        print(
            f"error: the train step does not fit in the HBM of a {tpu_slice.chip.generation} "
            "chip; change " + "; ".join(MEMORY_KEYS),
            file=sys.stderr,
        )
        return 1
    return None
