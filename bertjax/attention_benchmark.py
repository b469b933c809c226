"""Forward and backward of the encoder with each attention implementation, timed.

    python -m bertjax.attention_benchmark [--preset base] [--lengths 128,512]
        [--batch_sizes 64,16] [--implementations xla,cudnn] [--dtype bfloat16] [--steps 20]

For each length (with the batch size at the same place in --batch_sizes) it
times, for each implementation, the jitted gradient of a sum over BertModel's
outputs on synthetic packed rows (two or three examples a row, then padding,
as data_pipeline/packing.py lays them out), and prints the median time, the
compiled step's temporary memory and the speedup over the first
implementation. Attention dropout is 0: the fused kernels have none
(bertjax/attention.py). It needs only jax and flax, so it runs on a bare
accelerator host; `cudnn` needs a GPU, `splash` a TPU (or, slowly, a CPU).
"""

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from bertjax.model import ATTENTION_IMPLEMENTATIONS, BertConfig, BertModel
from data_pipeline import cli
from data_pipeline.config import ConfigError

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string("preset", "base", "Model size (bertjax.model.PRESETS).")
    flags.DEFINE_list("lengths", ["128", "512"], "Sequence lengths.")
    flags.DEFINE_list("batch_sizes", ["64", "16"], "Rows per batch, one per length.")
    flags.DEFINE_list("implementations", ["xla", "cudnn"], "attention_implementation values.")
    flags.DEFINE_enum("dtype", "bfloat16", ["float32", "bfloat16"], "Compute dtype.")
    flags.DEFINE_integer("steps", 20, "Timed steps after the first.")


def packed_rows(batch_size: int, length: int, seed: int = 0) -> np.ndarray:
    """Example ids [B, L]: each row two or three examples, then padding (0)."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((batch_size, length), np.int32)
    for row in ids:
        first, second = np.sort(rng.integers(length // 4, length, 2))
        row[:first], row[first:second] = 1, 2
        if second < length - 8:
            row[second : length - 8] = 3
    return ids


def measure(preset: str, length: int, batch_size: int, implementation: str, dtype: str, steps):
    """(median seconds of one forward and backward, temporary bytes of the compiled step)."""
    config = BertConfig.from_preset(
        preset,
        attention_probs_dropout_prob=0.0,
        dtype=dtype,
        attention_implementation=implementation,
        max_position_embeddings=max(512, length),
    )
    model = BertModel(config)
    ids = packed_rows(batch_size, length)
    rng = np.random.default_rng(1)
    inputs = (
        jnp.asarray(rng.integers(5, config.vocab_size, ids.shape) * (ids > 0), jnp.int32),
        jnp.asarray(ids),
        jnp.zeros(ids.shape, jnp.int32),
    )
    params = jax.jit(lambda key: model.init(key, *inputs, deterministic=True))(jax.random.key(0))

    def loss(params):
        sequence_output, pooled = model.apply(params, *inputs, deterministic=True)
        return jnp.sum(jnp.square(sequence_output.astype(jnp.float32))) + jnp.sum(pooled)

    step = jax.jit(jax.grad(loss)).lower(params).compile()
    times = []
    for i in range(steps + 1):
        start = time.perf_counter()
        jax.block_until_ready(step(params))
        if i:
            times.append(time.perf_counter() - start)
    return statistics.median(times), step.memory_analysis().temp_size_in_bytes


def main(argv):
    del argv
    lengths = [int(x) for x in FLAGS.lengths]
    batch_sizes = [int(x) for x in FLAGS.batch_sizes]
    if len(batch_sizes) != len(lengths):
        raise ConfigError(
            f"--batch_sizes has {len(batch_sizes)} values and --lengths {len(lengths)}: "
            "give one batch size per length"
        )
    for implementation in FLAGS.implementations:
        if implementation not in ATTENTION_IMPLEMENTATIONS:
            raise ConfigError(
                f"--implementations: {implementation!r} is not one of "
                f"{', '.join(ATTENTION_IMPLEMENTATIONS)}"
            )
    device = jax.devices()[0]
    print(f"jax {jax.__version__}, {jax.device_count()} x {device.device_kind}; {FLAGS.preset}")
    for length, batch_size in zip(lengths, batch_sizes, strict=True):
        first = None
        for implementation in FLAGS.implementations:
            seconds, temp = measure(
                FLAGS.preset, length, batch_size, implementation, FLAGS.dtype, FLAGS.steps
            )
            first = first or seconds
            print(
                f"length {length:4d} batch {batch_size:3d} {implementation:6s} "
                f"{seconds * 1000:8.2f} ms  temp {temp / 2**20:7,.0f} MiB  "
                f"{first / seconds:.2f}x the first",
                flush=True,
            )


if __name__ == "__main__":
    cli.run(main, define_flags)
