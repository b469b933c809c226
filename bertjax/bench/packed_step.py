r"""Useful tokens per second of a run's train step, with and without packing.

    python -m bertjax.bench.packed_step --config experiments/finetune/builtin_topics.py \
        --config.init_checkpoint=runs/minilm [--steps 20] [--json]
    python -m bertjax.bench.packed_step --config experiments/pretrain/tiny_cpu.py \
        --config.data.max_seq_length=512 --config.data.max_predictions_per_seq=80

Builds the run twice, with config.data.pack_examples off and on, takes the
first `steps` + 1 batches of its real training stream, and times the compiled
train step on them, the two runs taking turns step by step (so load from other
processes falls on both alike; the first step of each is not timed). A
useful token is a text token, not padding: the figure that packing raises
(data_pipeline/packing.py). Printed: rows and examples (sentence pairs, for
pretraining) per batch, the share of padding, median step time, useful tokens/s
and the ratio packed / unpacked. A fine-tuning batch holds the same examples
either way, in fewer rows packed; a pretraining batch is train_batch_size rows
either way, holding more pairs packed (data_pipeline/pretraining_input.py).
"""

import json
import os
import statistics
import tempfile
import time

import numpy as np
from absl import flags, logging
from ml_collections import config_flags

from bertjax import program

FLAGS = flags.FLAGS


def define_flags() -> None:
    config_flags.DEFINE_config_file(
        "config", None, "Fine-tuning or pretraining config file.", lock_config=True
    )
    flags.DEFINE_integer("steps", 20, "Timed steps of each run after the first.")
    flags.DEFINE_bool("json", False, "Also print the figures as one JSON object.")
    flags.mark_flags_as_required(["config"])


def _examples(batch) -> int:
    """The examples a batch holds: its sentence pairs or sequences, or its fine-tuning
    examples."""
    if "example_weight" in batch:
        return int(np.count_nonzero(batch["example_weight"]))
    # input_mask numbers a packed row's sequences (an unpacked row's one is 1 on its tokens).
    return int(np.asarray(batch["input_mask"]).max(axis=1).sum())


def _prepared(config, workdir: str, packed: bool, steps: int):
    """(run, jitted step, state, device batches, real tokens per batch, rows, examples per
    batch) of one run."""
    # Imported here, not at the top: `--help`, a bad flag or config key answer in a
    # fraction of a second, before TensorFlow and JAX load.
    import jax
    from flax import linen as nn

    from bertjax import metrics, sharding, train
    from bertjax.tasks.contract import host_share

    config = config.copy_and_resolve_references()
    with config.unlocked():
        config.data.pack_examples = packed
    run = train.build_run(config, workdir)
    host = host_share(config, "train_batch_size")
    batches = list(run.setup.data.train(**host).take(steps + 1).as_numpy_iterator())
    if len(batches) < steps + 1:
        raise ValueError(
            f"--steps={steps}: the run has only {len(batches)} train batches; lower --steps"
        )
    real = [metrics.real_tokens(b) for b in batches]
    examples = [_examples(b) for b in batches]
    rows = batches[0]["input_ids"].shape[0]
    with jax.set_mesh(run.mesh), nn.logical_axis_rules(sharding.RULES):
        state = train.create_state(run)
        step, _ = train.jit_steps(run)
        device_batches = [
            sharding.make_global_batch({k: b[k] for k in run.setup.objective.features}, run.mesh)
            for b in batches
        ]
    return run, step, state, device_batches, real, rows, examples


def measure(config, workdir: str, steps: int) -> dict:
    import jax
    from flax import linen as nn

    from bertjax import sharding

    runs = {
        packed: _prepared(config, os.path.join(workdir, f"packed_{packed}"), packed, steps)
        for packed in (False, True)
    }
    rng = jax.random.key(0)
    times = {packed: [] for packed in runs}
    states = {packed: run[2] for packed, run in runs.items()}
    for i in range(steps + 1):
        for packed, (run, step, _, batches, *_) in runs.items():
            with jax.set_mesh(run.mesh), nn.logical_axis_rules(sharding.RULES):
                start = time.perf_counter()
                states[packed], sums = step(states[packed], batches[i], rng)
                jax.block_until_ready(sums)
            if i > 0:
                times[packed].append(time.perf_counter() - start)
    result = {"batch_size": config.train_batch_size, "max_seq_length": config.data.max_seq_length}
    for packed, (*_, real, rows, examples) in runs.items():
        name = "packed" if packed else "unpacked"
        step_s = statistics.median(times[packed])
        tokens = statistics.mean(real[1:])
        result[name] = {
            "rows": rows,
            "examples_per_batch": statistics.mean(examples[1:]),
            "padding_share": 1.0 - tokens / (rows * config.data.max_seq_length),
            "step_time_s": step_s,
            "useful_tokens_per_s": tokens / step_s,
        }
    result["speedup"] = (
        result["packed"]["useful_tokens_per_s"] / result["unpacked"]["useful_tokens_per_s"]
    )
    return result


def main(argv):
    del argv  # cli.run refuses positional arguments
    logging.set_verbosity(logging.ERROR)
    with tempfile.TemporaryDirectory() as workdir:
        r = measure(FLAGS.config, workdir, FLAGS.steps)
    import jax

    print(
        f"train_batch_size {r['batch_size']} x {r['max_seq_length']} tokens; "
        f"{jax.device_count()} {jax.devices()[0].platform} device(s); "
        f"median of {FLAGS.steps} steps each, in turns"
    )
    for name in ("unpacked", "packed"):
        x = r[name]
        print(
            f"{name:<9} {x['rows']:>4} rows  {x['examples_per_batch']:>6.1f} examples  "
            f"{x['padding_share']:>4.0%} padding  "
            f"{x['step_time_s'] * 1000:>8.1f} ms/step  {x['useful_tokens_per_s']:>9,.0f} "
            "useful tokens/s"
        )
    print(f"packed / unpacked  {r['speedup']:.2f}x useful tokens/s")
    if FLAGS.json:
        print(json.dumps(r))


if __name__ == "__main__":
    program.run(main, define_flags)
