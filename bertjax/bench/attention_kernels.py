"""Forward and backward of the encoder with each attention implementation, timed.

    python -m bertjax.bench.attention_kernels [--preset base] [--lengths 128,512]
        [--batch_sizes 64,16] [--implementations xla,cudnn] [--dtype bfloat16] [--steps 20]
        [--trim_last_layer true,false [--predictions 20]]

For each length (with the batch size at the same place in --batch_sizes) it
times, for each implementation, the jitted gradient of a sum over BertModel's
outputs on synthetic packed rows (two or three examples a row, then padding,
as data_pipeline/packing.py lays them out), and prints the median time, the
compiled step's temporary memory and the speedup over the first
implementation. Attention dropout is 0: the fused kernels have none
(bertjax/attention.py). It needs only jax and flax, so it runs on a bare
accelerator host; `cudnn` needs a GPU, `splash` a TPU (or, slowly, a CPU).

With --trim_last_layer it times pretraining's model instead (BertForPreTraining,
both heads, --predictions masked positions a row), once for each value given:
whether the last layer computes only the positions the heads read.
"""

import statistics
import time

import numpy as np
from absl import flags

from bertjax import program
from data_pipeline.errors import ConfigError

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string("preset", "base", "Model size (bertjax.model.PRESETS).")
    flags.DEFINE_list("lengths", ["128", "512"], "Sequence lengths.")
    flags.DEFINE_list("batch_sizes", ["64", "16"], "Rows per batch, one per length.")
    flags.DEFINE_list("implementations", ["xla", "cudnn"], "attention_implementation values.")
    flags.DEFINE_enum("dtype", "bfloat16", ["float32", "bfloat16"], "Compute dtype.")
    flags.DEFINE_integer("steps", 20, "Timed steps after the first.")
    flags.DEFINE_list(
        "trim_last_layer",
        [],
        "Values of BertConfig.trim_last_layer (true, false) to time BertForPreTraining "
        "with; none times BertModel alone.",
    )
    flags.DEFINE_integer("predictions", 20, "Masked positions a row, with --trim_last_layer.")


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


def pretraining_positions(ids: np.ndarray, predictions: int, seed: int = 2):
    """(masked_lm_positions [B, P] among a row's tokens, cls_positions [B, 3]) for packed_rows."""
    rng = np.random.default_rng(seed)
    masked = np.stack([rng.choice(np.flatnonzero(row), predictions) for row in ids])
    starts = [np.flatnonzero((np.diff(row, prepend=-1) != 0) & (row > 0))[:3] for row in ids]
    cls = np.stack([np.pad(s, (0, 3 - len(s)), mode="edge") for s in starts])
    return masked.astype(np.int32), cls.astype(np.int32)


def measure(
    preset: str,
    length: int,
    batch_size: int,
    implementation: str,
    dtype: str,
    steps: int,
    *,
    trim_last_layer: bool | None = None,
    predictions: int = 20,
):
    """(median seconds of one forward and backward, temporary bytes of the compiled step)
    of BertModel, or of BertForPreTraining where trim_last_layer is not None."""
    # Imported here, not at the top: `--help` and a bad --lengths or --trim_last_layer
    # answer in a fraction of a second, before JAX loads.
    import jax
    import jax.numpy as jnp

    from bertjax.model import BertConfig, BertForPreTraining, BertModel

    config = BertConfig.from_preset(
        preset,
        attention_probs_dropout_prob=0.0,
        dtype=dtype,
        attention_implementation=implementation,
        max_position_embeddings=max(512, length),
        trim_last_layer=bool(trim_last_layer),
    )
    ids = packed_rows(batch_size, length)
    rng = np.random.default_rng(1)
    inputs = (
        jnp.asarray(rng.integers(5, config.vocab_size, ids.shape) * (ids > 0), jnp.int32),
        jnp.asarray(ids),
        jnp.zeros(ids.shape, jnp.int32),
    )
    if trim_last_layer is None:
        model = BertModel(config)
    else:
        model = BertForPreTraining(config)
        inputs += tuple(jnp.asarray(x) for x in pretraining_positions(ids, predictions))
    params = jax.jit(lambda key: model.init(key, *inputs, deterministic=True))(jax.random.key(0))

    def loss(params):
        outputs = model.apply(params, *inputs, deterministic=True)
        return sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in outputs)

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
    trims = [None]
    if FLAGS.trim_last_layer:
        trims = [_parse_bool("--trim_last_layer", x) for x in FLAGS.trim_last_layer]
    import jax

    from bertjax.model import ATTENTION_IMPLEMENTATIONS

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
            for trim in trims:
                seconds, temp = measure(
                    FLAGS.preset,
                    length,
                    batch_size,
                    implementation,
                    FLAGS.dtype,
                    FLAGS.steps,
                    trim_last_layer=trim,
                    predictions=FLAGS.predictions,
                )
                first = first or seconds
                what = implementation if trim is None else f"{implementation} trim={trim}"
                print(
                    f"length {length:4d} batch {batch_size:3d} {what:16s} "
                    f"{seconds * 1000:8.2f} ms  temp {temp / 2**20:7,.0f} MiB  "
                    f"{first / seconds:.2f}x the first",
                    flush=True,
                )


def _parse_bool(flag: str, value: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise ConfigError(f"{flag}: {value!r} is neither true nor false")
    return value.lower() == "true"


if __name__ == "__main__":
    program.run(main, define_flags)
