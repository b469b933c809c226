"""Saving and restoring a train state, with and without verification, timed.

    python -m bertjax.bench.checkpoint [--preset base] [--repeats 3] [--dir /tmp]

Builds the train state of BertForPreTraining at --preset (parameters and
AdamW's two moments, float32, random values) and times, --repeats times each:
orbax's save and restore of it with its data item, as bertjax wrote checkpoints
before fingerprints (the baseline), and bertjax.checkpoint's save (fingerprints computed and saved)
and restore (fingerprints computed again and compared). Prints the medians and
what verification adds. A save is timed until it has committed. --dir is where
the checkpoints go (a temporary folder inside it, removed at the end).
"""

import os
import shutil
import statistics
import tempfile
import time

from absl import flags

from bertjax.tpu import slices
from data_pipeline import cli

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string("preset", "base", "Model size (bertjax.model.PRESETS).")
    flags.DEFINE_integer("repeats", 3, "Timed saves and restores of each kind.")
    flags.DEFINE_string("dir", tempfile.gettempdir(), "Where the checkpoints are written.")


def main(argv):
    del argv
    slices.libtpu_without_tpu()  # before jax starts
    import jax
    import jax.numpy as jnp
    import optax
    import orbax.checkpoint as ocp

    from bertjax import checkpoint
    from bertjax.model import BertConfig, BertForPreTraining

    config = BertConfig.from_preset(FLAGS.preset)
    model = BertForPreTraining(config)
    ids = jnp.zeros((1, 8), jnp.int32)

    @jax.jit
    def make_state(rng):
        params = model.init(rng, ids, ids, ids, ids[:, :1], deterministic=True)["params"]
        params = jax.tree.map(lambda x: jax.random.normal(rng, x.shape, x.dtype) * 0.02, params)
        return {
            "step": jnp.asarray(7),
            "params": params,
            "opt_state": optax.adamw(1e-4).init(params),
        }

    state = jax.block_until_ready(make_state(jax.random.key(0)))
    size = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state
    )
    print(
        f"jax {jax.__version__}, {jax.devices()[0].device_kind}; {FLAGS.preset}: "
        f"{len(jax.tree.leaves(state))} arrays, {size / 2**30:.2f} GiB"
    )
    root = tempfile.mkdtemp(dir=FLAGS.dir)
    times = {name: [] for name in ("save", "save verified", "restore", "restore verified")}
    try:
        for repeat in range(FLAGS.repeats):
            workdir = os.path.join(root, str(repeat))
            with checkpoint.make_manager(workdir, max_to_keep=None) as manager:
                start = time.perf_counter()
                before = {
                    checkpoint.ITEM: ocp.args.StandardSave(state),
                    checkpoint.DATA_ITEM: ocp.args.JsonSave({}),
                }
                manager.save(1, args=ocp.args.Composite(**before))
                manager.wait_until_finished()
                times["save"].append(time.perf_counter() - start)
                start = time.perf_counter()
                checkpoint.save(manager, 2, state, data={})
                checkpoint.wait(manager)
                times["save verified"].append(time.perf_counter() - start)
                start = time.perf_counter()
                before = {
                    checkpoint.ITEM: ocp.args.StandardRestore(abstract),
                    checkpoint.DATA_ITEM: ocp.args.JsonRestore(),
                }
                restored = manager.restore(1, args=ocp.args.Composite(**before))
                jax.block_until_ready(restored[checkpoint.ITEM])
                times["restore"].append(time.perf_counter() - start)
                start = time.perf_counter()
                jax.block_until_ready(checkpoint.restore(manager, 2, abstract))
                times["restore verified"].append(time.perf_counter() - start)
            shutil.rmtree(workdir)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    median = {name: statistics.median(values) for name, values in times.items()}
    for kind in ("save", "restore"):
        base, verified = median[kind], median[f"{kind} verified"]
        print(
            f"{kind:8} {base:6.2f} s   verified {verified:6.2f} s   "
            f"{100 * (verified / base - 1):+.1f}% (medians of {FLAGS.repeats})"
        )
    fingerprint = []
    for _ in range(FLAGS.repeats):
        start = time.perf_counter()
        checkpoint.fingerprints(state)
        fingerprint.append(time.perf_counter() - start)
    print(f"fingerprints alone {statistics.median(fingerprint):.2f} s")


if __name__ == "__main__":
    cli.run(main, define_flags)
