"""The baseline bertjax.bench.throughput compares against: Hugging Face's FlaxBertForPreTraining.

It needs transformers 4.x, the last with Flax models; `make bench-hf` installs
it in .venv-bench. Kept apart from throughput.py (which defines flags) so that
it imports anywhere, tests included.
"""

import functools
import importlib.metadata
import statistics
import time
from typing import TYPE_CHECKING

from data_pipeline.errors import UserError

if TYPE_CHECKING:  # imported where used: a refused --compare_hf_flax loads no JAX
    from bertjax import train


class HFFlaxUnavailableError(UserError):
    """--compare_hf_flax without transformers 4.x's Flax models; the message says how to get them."""


def median_step_times(runs, batch, rng, steps: int) -> list[float]:
    """Median seconds of one step for each (step, state) of `runs`, over `steps` timed steps;
    a run given as (step, state, its own batch) steps on that batch instead of `batch`.

    The runs take turns, step by step, so load from other processes on a shared
    machine falls on each alike. Each run's first step is not timed.
    """
    import jax

    states = [run[1] for run in runs]
    batches = [run[2] if len(run) > 2 else batch for run in runs]
    times = [[] for _ in runs]
    for i in range(steps + 1):
        for j, (step, *_) in enumerate(runs):
            start = time.perf_counter()
            states[j], sums = step(states[j], batches[j], rng)
            jax.block_until_ready(sums)
            if i > 0:
                times[j].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def import_hf_flax_bert():
    """transformers' BertConfig and FlaxBertForPreTraining, or an error that says how to get them."""
    try:
        # Its version tells transformers 5 (no Flax models) without the seconds its
        # import takes (it loads PyTorch).
        version = importlib.metadata.version("transformers")
        if int(version.split(".")[0]) >= 5:
            raise ImportError(f"transformers {version} has none")
        from transformers import BertConfig, FlaxBertForPreTraining
    except ImportError as e:
        raise HFFlaxUnavailableError(
            f"--compare_hf_flax needs transformers 4.x, the last with Flax models ({e}); "
            "run `make bench-hf`, which installs it in .venv-bench"
        ) from e
    return BertConfig, FlaxBertForPreTraining


def hf_flax_train_step(state, batch, rng, *, model, tx):
    """train.train_step's loss and update on Hugging Face's FlaxBertForPreTraining.

    Its MLM head scores every position, so the masked positions' logits are
    picked out of the full [batch, length, vocab] ones: that cost is what the
    comparison measures. The loss is ours, MLM over the masked positions + NSP.
    """
    import jax
    import jax.numpy as jnp
    import optax

    from bertjax import losses

    step_rng = jax.random.fold_in(rng, state.step)

    def loss_fn(params):
        outputs = model(
            batch["input_ids"],
            attention_mask=batch["input_mask"],
            token_type_ids=batch["segment_ids"],
            params=params,
            dropout_rng=step_rng,
            train=True,
        )
        positions = batch["masked_lm_positions"][..., None]
        mlm_logits = jnp.take_along_axis(outputs.prediction_logits, positions, axis=1)
        sums = losses.pretraining_sums(mlm_logits, outputs.seq_relationship_logits, batch)
        loss = losses.total_loss(sums, mlm_weight=sums["mlm_weight"], nsp_count=sums["nsp_count"])
        return loss, sums

    grads, sums = jax.grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    return state.replace(step=state.step + 1, params=params, opt_state=opt_state), sums


def compile_hf_flax(run: "train.Run", batch):
    """hf_flax_train_step for run's model shapes and optimizer, compiled for `batch`.

    Returns (compiled step, initial state, compile seconds). Call inside
    run.mesh: parameters are replicated and the batch is split like ours, so on
    one device neither is sharded.
    """
    import jax
    import jax.numpy as jnp

    from bertjax import sharding, train
    from bertjax.convert import config_json

    hf_bert_config, hf_bert_for_pretraining = import_hf_flax_bert()
    m = run.setup.model.config
    hf_config = hf_bert_config(**config_json.to_hf(m))
    model = hf_bert_for_pretraining(hf_config, dtype=jnp.dtype(m.dtype), _do_init=False)
    seq_len = batch["input_ids"].shape[1]
    replicated = sharding.replicated(run.mesh)

    def init(rng):
        params = model.init_weights(rng, (1, seq_len))
        return train.TrainState(
            step=jnp.zeros((), jnp.int32), params=params, opt_state=run.tx.init(params)
        )

    state = jax.jit(init, out_shardings=replicated)(jax.random.key(run.config.seed))
    step = jax.jit(
        functools.partial(hf_flax_train_step, model=model, tx=run.tx),
        in_shardings=(replicated, sharding.batch_sharding(run.mesh), replicated),
        out_shardings=(replicated, replicated),
        donate_argnums=0,
    )
    start = time.perf_counter()
    compiled = step.lower(state, batch, jax.random.key(0)).compile()
    return compiled, state, time.perf_counter() - start
