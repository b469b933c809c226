r"""Compiles the real pretraining train step and measures it.

    python -m bertjax.bench.throughput --config experiments/pretrain/tiny_cpu.py \
        [--config.model.preset=small] [--steps 20] [--json] [--compare_hf_flax] \
        [--profile DIR]

Prints compile time, median step time, tokens/s, model FLOPs utilisation
(MFU), the peak FLOP/s it divides by and where that figure comes from, the
share of the step spent outside the matmuls, the analytic model FLOPs per
step, XLA's cost-analysis FLOPs, and the compiled memory. With --json the last
line is one JSON object with the same figures. Batches are synthetic (random
ids of the configured shapes), so the data pipeline is not measured here
(data_pipeline.benchmark does that).

--profile DIR then traces 3 more steps (jax.profiler, after the timed ones, so
tracing does not slow what is timed) into DIR for TensorBoard's profile plugin
(`tensorboard --logdir DIR`, Profile tab).

MFU is the analytic matmul FLOPs of a step (bertjax.flops: 3x the forward
pass, attention included, the MLM head at the masked positions only) over
the median step time, divided by the devices' peak FLOP/s (bertjax.flops:
vendor figures on TPU and GPU, a measured matmul on CPU).

The share outside the matmuls is an estimate: before the timed steps, a large
matmul in the model's dtype is timed on one of the devices (on CPU this is the
cached peak probe); the step's analytic FLOPs at that rate is the time its
matmuls would take, and the rest of the median step time is taken to be
outside them (LayerNorm, activations, softmax, dropout, the optimizer,
transfers), 1 - matmul time / step time. It is an upper bound: the step's
smaller matmuls also run below the large one's rate, and that shortfall
counts as outside too.

--compare_hf_flax also times Hugging Face's FlaxBertForPreTraining on the same
batch, loss and optimizer. It needs transformers 4.x (5.x has no Flax models),
which `make bench-hf` installs in .venv-bench.
"""

import json
import os
import tempfile
import time

import numpy as np
from absl import flags, logging
from ml_collections import config_flags

from bertjax import program
from bertjax.bench import hf_flax

FLAGS = flags.FLAGS


def define_flags() -> None:
    config_flags.DEFINE_config_file("config", None, "Experiment config file.", lock_config=True)
    flags.DEFINE_integer("steps", 20, "Timed steps after the first.")
    flags.DEFINE_bool("json", False, "Also print the figures as one JSON object.")
    flags.DEFINE_bool(
        "compare_hf_flax",
        False,
        "Also time Hugging Face's FlaxBertForPreTraining train step "
        "(transformers 4.x: make bench-hf).",
    )
    flags.DEFINE_string(
        "profile", "", "Trace 3 steps after the timed ones into this directory (TensorBoard)."
    )
    flags.mark_flags_as_required(["config"])


def synthetic_batch(batch_size, seq_len, predictions, vocab_size, seed=0, sequences_per_row=0):
    """Random pretraining rows of full length; with `sequences_per_row` K, packed rows of K
    sequences of seq_len / K tokens each (data_pipeline/schema.py's packed columns)."""
    rng = np.random.default_rng(seed)
    positions = np.sort(rng.integers(1, seq_len - 1, (batch_size, predictions)), axis=1)
    batch = {
        "input_ids": rng.integers(5, vocab_size, (batch_size, seq_len)).astype(np.int32),
        "input_mask": np.ones((batch_size, seq_len), np.int32),
        "segment_ids": np.tile(np.arange(seq_len) >= seq_len // 2, (batch_size, 1)),
        "masked_lm_positions": positions.astype(np.int32),
        "masked_lm_ids": rng.integers(5, vocab_size, (batch_size, predictions)).astype(np.int32),
        "masked_lm_weights": np.ones((batch_size, predictions), np.float32),
        "next_sentence_labels": rng.integers(0, 2, (batch_size,)).astype(np.int32),
    }
    if sequences_per_row:
        slots, length = sequences_per_row, seq_len // sequences_per_row
        starts = np.arange(slots) * length
        sequence = np.minimum(np.arange(seq_len) // length, slots - 1)  # the rest joins the last
        batch["input_mask"] = np.tile(sequence + 1, (batch_size, 1)).astype(np.int32)
        second_half = (np.arange(seq_len) - starts[sequence]) >= length // 2
        batch["segment_ids"] = np.tile(second_half, (batch_size, 1))
        batch["cls_positions"] = np.tile(starts, (batch_size, 1)).astype(np.int32)
        batch["next_sentence_labels"] = rng.integers(0, 2, (batch_size, slots)).astype(np.int32)
        batch["next_sentence_weights"] = np.ones((batch_size, slots), np.float32)
    batch["segment_ids"] = batch["segment_ids"].astype(np.int32)
    return batch


PROFILED_STEPS = 3


def compiled_bytes(memory) -> int:
    """What a compiled program holds at its peak: temporaries, arguments and outputs,
    less what outputs share with donated arguments."""
    return int(
        memory.temp_size_in_bytes
        + memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        - memory.alias_size_in_bytes
    )


def trace_steps(profile: str, compiled, state, batch, rng) -> None:
    """PROFILED_STEPS steps of `compiled` from `state` traced into `profile`."""
    import jax

    with jax.profiler.trace(profile):
        # The first of them not timed, as in median_step_times.
        hf_flax.median_step_times([(compiled, state)], batch, rng, PROFILED_STEPS - 1)


def measure(
    config, workdir: str, steps: int, *, compare_hf_flax: bool = False, profile: str = ""
) -> dict:
    """The figures of the module docstring for a pretraining config's train step."""
    # Imported here, not at the top: `--help`, a bad flag or config key and a refused
    # --compare_hf_flax answer in a fraction of a second, before TensorFlow and JAX load.
    import jax
    from flax import linen as nn

    from bertjax import flops, sharding, train
    from bertjax import model as model_lib
    from bertjax.tasks import pretraining

    task = pretraining.TASK
    config = task.without_data(config, workdir)
    run = train.build_run(config, os.path.join(workdir, "run"), task=task)
    inputs, m = run.setup.model.inputs, run.setup.model.config
    batch_size, seq_len = config.train_batch_size, inputs["input_ids"]
    predictions = inputs["masked_lm_positions"]
    analytic = flops.flops_per_step(task, run.setup, batch_size)
    # Both before anything is timed: the peak MFU divides by, and the matmul rate.
    devices = list(run.mesh.devices.flat)
    peak, peak_source = flops.peak_flops(devices, m.dtype)
    matmul_flops_per_s = flops.measured_matmul_flops(devices, m.dtype)
    with jax.set_mesh(run.mesh), nn.logical_axis_rules(sharding.RULES):
        state = train.create_state(run)
        p_train_step, _ = train.jit_steps(run)
        host_batch = synthetic_batch(
            batch_size,
            seq_len,
            predictions,
            m.vocab_size,
            sequences_per_row=inputs.get("cls_positions", 0),
        )
        batch = sharding.make_global_batch(
            {name: host_batch[name] for name in run.setup.objective.features}, run.mesh
        )
        rng = jax.random.key(0)
        start = time.perf_counter()
        compiled = p_train_step.lower(state, batch, rng).compile()
        compile_s = time.perf_counter() - start
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list | tuple) else cost
        memory = compiled.memory_analysis()
        runs = [(compiled, state)]
        if compare_hf_flax:
            hf_step, hf_state, hf_compile_s = hf_flax.compile_hf_flax(run, batch)
            runs.append((hf_step, hf_state))
        step_times = hf_flax.median_step_times(runs, batch, rng, steps)
        if profile:
            trace_steps(profile, compiled, train.create_state(run), batch, rng)
    result = {
        # The fields a preset sets, then the vocabulary.
        **{k: getattr(m, k) for k in (*model_lib.PRESETS["base"], "vocab_size")},
        "batch_size": batch_size,
        "seq_len": seq_len,
        "max_predictions_per_seq": predictions,
        "compile_s": compile_s,
        "step_time_s": step_times[0],
        "tokens_per_s": batch_size * seq_len / step_times[0],
        "model_flops_per_s": analytic / step_times[0],
        "mfu": analytic / step_times[0] / peak if peak else None,
        "peak_flops": peak,
        "peak_source": peak_source,
        "matmul_flops_per_s": matmul_flops_per_s,
        "matmul_time_s": analytic / matmul_flops_per_s,
        "outside_matmul_share": 1.0 - analytic / matmul_flops_per_s / step_times[0],
        "analytic_flops_per_step": analytic,
        "xla_flops_per_step": float(cost.get("flops", float("nan"))),
        "memory_bytes": compiled_bytes(memory),
    }
    if compare_hf_flax:
        result["hf_flax_compile_s"] = hf_compile_s
        result["hf_flax_step_time_s"] = step_times[1]
        result["hf_flax_tokens_per_s"] = batch_size * seq_len / step_times[1]
        result["speedup_vs_hf_flax"] = step_times[1] / step_times[0]
    return result


def main(argv):
    del argv  # cli.run refuses positional arguments
    logging.set_verbosity(logging.ERROR)
    if FLAGS.compare_hf_flax:
        hf_flax.import_hf_flax_bert()  # fail before compiling anything
    with tempfile.TemporaryDirectory() as workdir:
        result = measure(
            FLAGS.config,
            workdir,
            FLAGS.steps,
            compare_hf_flax=FLAGS.compare_hf_flax,
            profile=FLAGS.profile,
        )
    import jax

    r = result
    print(
        f"model L={r['num_hidden_layers']} H={r['hidden_size']} A={r['num_attention_heads']} "
        f"I={r['intermediate_size']} V={r['vocab_size']}; batch {r['batch_size']} x {r['seq_len']}, "
        f"{r['max_predictions_per_seq']} predictions; {jax.device_count()} {jax.devices()[0].platform} device(s)"
    )
    print(f"compile        {r['compile_s']:.1f} s")
    mfu = f"MFU {r['mfu']:.1%}" if r["mfu"] is not None else "MFU n/a"
    print(
        f"step (median)  {r['step_time_s'] * 1000:.1f} ms   {r['tokens_per_s']:,.0f} tokens/s   "
        f"{mfu} ({r['model_flops_per_s']:.3e} model FLOP/s)"
    )
    peak = f"{r['peak_flops']:.3e} FLOP/s: " if r["peak_flops"] else ""
    print(f"peak           {peak}{r['peak_source']}")
    print(
        f"matmuls        {r['matmul_time_s'] * 1000:.1f} ms of the step at the measured "
        f"{r['matmul_flops_per_s']:.3e} FLOP/s: {r['outside_matmul_share']:.0%} of step time "
        "outside the matmuls"
    )
    print(
        f"FLOPs/step     analytic {r['analytic_flops_per_step']:.3e}   XLA {r['xla_flops_per_step']:.3e} "
        f"({r['xla_flops_per_step'] / r['analytic_flops_per_step']:.2f}x)"
    )
    print(f"memory         {r['memory_bytes'] / 2**20:,.1f} MiB (compiled step)")
    if FLAGS.compare_hf_flax:
        print(
            f"HF Flax step   {r['hf_flax_step_time_s'] * 1000:.1f} ms   "
            f"{r['hf_flax_tokens_per_s']:,.0f} tokens/s   (compile {r['hf_flax_compile_s']:.1f} s)"
        )
        print(f"bertjax / HF   {r['speedup_vs_hf_flax']:.2f}x tokens/s")
    if FLAGS.profile:
        print(
            f"profile        {PROFILED_STEPS} steps in {FLAGS.profile} "
            f"(tensorboard --logdir {FLAGS.profile})"
        )
    if FLAGS.json:
        print(json.dumps(result))


if __name__ == "__main__":
    program.run(main, define_flags)
