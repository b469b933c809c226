"""Saving and restoring a train state, with and without verification, timed.

    python -m bertjax.bench.checkpoint [--preset base] [--repeats 3] [--dir /tmp]

Builds the train state of BertForPreTraining at --preset as a run has it
(parameters and AdamW's two moments after a few updates, float32, random values:
moments of zeros would compress to nothing) and times, --repeats times each:
orbax's own save and restore of it (the baseline), and bertjax.checkpoint's save
(fingerprints computed while the arrays are written, then every file read back for
its size and CRC-32 into the manifest) and restore (every file checked against the
manifest, then fingerprints computed again and compared). Prints the medians and
what verification adds. A save is timed until it is complete (its manifest written). --dir is where the checkpoints go (a
temporary folder inside it, removed at the end).
"""

import functools
import os
import shutil
import statistics
import tempfile
import time

from absl import flags

from bertjax import program

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string("preset", "base", "Model size (bertjax.model.PRESETS).")
    flags.DEFINE_integer("repeats", 3, "Timed saves and restores of each kind.")
    flags.DEFINE_string("dir", tempfile.gettempdir(), "Where the checkpoints are written.")


def main(argv):
    del argv
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
        optimizer = optax.adamw(1e-4)
        opt_state = optimizer.init(params)
        for update in jax.random.split(rng, 3):
            grads = jax.tree.map(lambda x, k=update: jax.random.normal(k, x.shape) * 1e-3, params)
            _, opt_state = optimizer.update(grads, opt_state, params)
        return {"step": jnp.asarray(7), "params": params, "opt_state": opt_state}

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
            baseline = ocp.AsyncCheckpointer(ocp.StandardCheckpointHandler())
            before = os.path.join(workdir, "before")
            with baseline, checkpoint.make_manager(workdir, max_to_keep=None) as manager:
                ops = {
                    "save": functools.partial(_save_before, baseline, before, state),
                    "save verified": functools.partial(_save_verified, manager, state),
                    "restore": functools.partial(_restore_before, before, abstract),
                    "restore verified": functools.partial(checkpoint.restore, manager, 1, abstract),
                }
                # Saves, then restores; the baseline first every other repeat; each on a
                # disk with nothing left to write.
                for kind in ("save", "restore"):
                    for name in sorted((kind, f"{kind} verified"), reverse=repeat % 2 == 1):
                        os.sync()
                        start = time.perf_counter()
                        jax.block_until_ready(ops[name]())
                        times[name].append(time.perf_counter() - start)
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


def _save_before(checkpointer, directory: str, state) -> None:
    import orbax.checkpoint as ocp

    checkpointer.save(directory, args=ocp.args.StandardSave(state), force=True)
    checkpointer.wait_until_finished()


def _save_verified(manager, state) -> None:
    from bertjax import checkpoint

    checkpoint.save(manager, 1, state, data={})
    checkpoint.wait(manager)


def _restore_before(directory: str, abstract):
    import orbax.checkpoint as ocp

    return ocp.StandardCheckpointer().restore(directory, abstract)


if __name__ == "__main__":
    program.run(main, define_flags)
