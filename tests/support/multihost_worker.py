"""One process of the two-process run in multihost_test.py; not a test itself.

    JAX_COORDINATOR_ADDRESS=127.0.0.1:PORT JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=I \
        python tests/support/multihost_worker.py CONFIG_PICKLE WORKDIR OUT_JSON

Joins the cluster as `python -m bertjax.main --distributed` does, trains the
pickled config in WORKDIR until step 4, then resumes it to the end (both in
this process), and writes what this process saw to OUT_JSON: every metric it
computed (process 0 alone writes them to the workdir), a fingerprint of the
parameters at each save and restore, and the errors of two configs that a
multi-host run must refuse.

    ... python tests/support/multihost_worker.py hooks CONFIG_PICKLE WORKDIR OUT_JSON

trains with two hooks of run_hooks.py: a collective one from config.hooks and one of
this caller's that asks the run to stop on the last process alone; then resumes the run
without it, to the end. OUT_JSON: the line the first run stopped with, the latest
checkpoint then, what the collective hook gathered and the resumed run's results.
"""

import hashlib
import json
import os
import pickle
import sys

import jax
import numpy as np


def fingerprint(params) -> str:
    """A hash of this process's copies of the parameters; fails if its devices disagree."""
    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(params):
        shards = [np.asarray(shard.data) for shard in leaf.addressable_shards]
        for shard in shards[1:]:
            np.testing.assert_array_equal(shard, shards[0])
        digest.update(shards[0].tobytes())
    return digest.hexdigest()


def _start(config_path: str, out: str):
    """Joins the processes' run and returns the pickled config it trains."""
    from bertjax import experiment

    experiment.initialize_distributed()
    # The resume compiles the same steps again; a cache of this process's own keeps that quick.
    cache = os.path.join(os.path.dirname(out), f"jax_cache_{jax.process_index()}")
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    with open(config_path, "rb") as f:
        return pickle.load(f)


def main():
    config_path, workdir, out = sys.argv[1:]
    from bertjax import checkpoint, metrics, sharding, train
    from data_pipeline import config as data_config_lib

    config = _start(config_path, out)
    seen = {"metrics": [], "saved": {}, "restored": {}, "refused": {}}
    write, save, restore = metrics.MetricWriter.write, checkpoint.save, checkpoint.restore

    def record_write(self, step, split, values):
        seen["metrics"].append({"step": step, "split": split, **values})
        write(self, step, split, values)

    def record_save(manager, step, state, data):
        seen["saved"][step] = fingerprint(state.params)
        save(manager, step, state, data)

    def record_restore(manager, step, abstract_state):
        state, data = restore(manager, step, abstract_state)
        seen["restored"][step] = fingerprint(state.params)
        return state, data

    metrics.MetricWriter.write = record_write
    checkpoint.save = record_save
    checkpoint.restore = record_restore

    seen["process_count"] = jax.process_count()
    seen["device_count"] = jax.device_count()
    train.train_and_evaluate(config, workdir, stop_after=4)
    seen["last_eval"] = train.train_and_evaluate(config, workdir)

    refusals = {
        "eval_share": ("num_eval_steps", 10_000),
        "mesh_across_hosts": ("mesh", {"data": 1, "fsdp": 1, "tensor": -1}),
    }
    for name, (key, value) in refusals.items():
        bad = pickle.loads(pickle.dumps(config))
        bad[key] = value
        try:
            train.train_and_evaluate(bad, workdir)
        except (data_config_lib.ConfigError, sharding.MeshError) as error:
            seen["refused"][name] = str(error)

    with open(out, "w", encoding="utf-8") as f:
        json.dump(seen, f)


def hooks_main():
    config_path, workdir, out = sys.argv[2:]
    import run_hooks  # this folder is the script's: first on the path

    from bertjax import checkpoint, preemption, train

    config = _start(config_path, out)
    config.hooks = ("run_hooks:gather_steps",)
    seen = {}
    try:
        train.train_and_evaluate(config, workdir, hooks=[run_hooks.ask_to_stop])
        seen["stopped"] = None
    except preemption.Preempted as stopped:
        seen["stopped"] = str(stopped)
    seen["latest_after_stop"] = checkpoint.latest_step(workdir)
    seen["gathered_before_resume"] = list(run_hooks.gathered)
    seen["resumed"] = train.train_and_evaluate(config, workdir)
    seen["gathered"] = run_hooks.gathered
    with open(out, "w", encoding="utf-8") as f:
        json.dump(seen, f)


if __name__ == "__main__":
    if sys.argv[1] == "hooks":
        hooks_main()
    else:
        main()
