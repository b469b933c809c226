"""A tiny modern encoder against BERT-Tiny for the same training FLOPs, on the built-in corpus.

    python -m bertjax.bench.encoders --workdir runs/encoders [--bert_steps 3000]

Trains, each for the model FLOPs of BERT-Tiny's --bert_steps steps (bertjax.flops: a
step that costs more gets fewer steps), each in WORKDIR/NAME (a finished run is
reused, a stopped one resumed):

    bert_tiny       experiments/pretrain/tiny_cpu.py: BERT's block and recipe
    bert_block_mlm  BERT-Tiny's block with modernbert_tiny_cpu.py's recipe (masked LM
                    alone at 30% on packed rows, StableAdamW, warmup-stable-decay)
    modern_tiny     experiments/pretrain/modernbert_tiny_cpu.py: ModernBERT's block
                    and recipe at BERT-Tiny's width

so that the recipe's share and the block's can be told apart; each starts with a line
saying which model of the three it is, its steps and, from the models before it, about
how long the rest take (then training logs its steps). Then scores them on one
held-out set: the built-in corpus's eval split as single segments, masked once at 15%
from a fixed seed, so the accuracies are over the same tokens. All learn their
WordPiece vocabulary with the same settings, so they share it. Prints a row per
model: parameters, FLOPs per step, steps, training FLOPs and time, and held-out MLM
loss and accuracy.
"""

import dataclasses
import os
import pathlib

from absl import flags

from bertjax import program
from data_pipeline import config as data_config
from data_pipeline import progress

FLAGS = flags.FLAGS
EVAL_BATCH = 64


def define_flags() -> None:
    flags.DEFINE_string("workdir", None, "Where the runs go (one folder each).")
    flags.DEFINE_integer("bert_steps", 3000, "BERT-Tiny's steps; the others get their FLOPs.")
    flags.mark_flag_as_required("workdir")


# The experiment configs compared, read by path as `--config` reads them: the library
# does not import experiments/.
PRETRAIN_CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "experiments" / "pretrain"


def load_config(name: str):
    """A fresh copy of experiments/pretrain/NAME's config."""
    return data_config.read_config_file(str(PRETRAIN_CONFIGS / name))


def configs(bert_steps: int) -> dict:
    """The configs of the models compared (module docstring), each one's steps set to
    BERT-Tiny's FLOPs."""
    bert = load_config("tiny_cpu.py")
    bert.num_train_steps = bert_steps
    bert.optimizer.warmup_steps = min(bert.optimizer.warmup_steps, bert_steps // 10)
    mlm = load_config("modernbert_tiny_cpu.py")
    mlm.model = load_config("tiny_cpu.py").model
    mlm.model.vocab_size = mlm.data.get_ref("vocab_size")
    loaded = {
        "bert_tiny": bert,
        "bert_block_mlm": mlm,
        "modern_tiny": load_config("modernbert_tiny_cpu.py"),
    }
    budget = step_flops(bert) * bert_steps
    for config in loaded.values():
        # The modern recipe's warmup and decay follow num_train_steps (modernbert_tiny_cpu.py).
        config.num_train_steps = steps = round(budget / step_flops(config))
        config.eval_every_steps = config.checkpoint_every_steps = steps
        # A train line about every 20 s at the speed of a CPU host (55 min for the three).
        config.log_every_steps = max(1, steps // 50)
    return loaded


def step_flops(config) -> float:
    """Model FLOPs of one train step of `config` (bertjax.flops, through the task's count)."""
    from bertjax import model as model_lib
    from bertjax.tasks import pretraining
    from data_pipeline import config as data_config_lib

    data = data_config_lib.from_config(config.data)
    inputs = {
        **dict.fromkeys(("input_ids", "input_mask", "segment_ids"), data.max_seq_length),
        "masked_lm_positions": data.max_predictions_per_seq,
    }
    if data.pack_examples and data.next_sentence_prediction:
        inputs["cls_positions"] = data.max_sequences_per_row
    model_config = model_lib.from_config(config.model)
    forward = pretraining.forward_flops(model_config, inputs, pretraining.describe(config.data))
    return 3.0 * config.train_batch_size * forward


def held_out(workdir: str, data) -> dict:
    """MLM loss and accuracy of `workdir`'s model over the held-out batches of `data`."""
    import jax

    from bertjax import inference, losses
    from data_pipeline import make_pretraining_dataset

    restored = inference.restore(workdir)

    @jax.jit
    def sums(params, batch):
        mlm, _ = restored.model.apply(
            {"params": params},
            batch["input_ids"],
            batch["input_mask"],
            batch["segment_ids"],
            batch["masked_lm_positions"],
            deterministic=True,
        )
        return losses.pretraining_sums(mlm, None, batch)

    total = None
    batches = make_pretraining_dataset(data, split="eval", batch_size=EVAL_BATCH, seed=0)
    for batch in batches.as_numpy_iterator():
        got = jax.device_get(sums(restored.params, batch))
        total = got if total is None else {k: total[k] + got[k] for k in total}
    means = losses.summarize(total)
    return {"loss": means["mlm_loss"], "accuracy": means["mlm_accuracy"]}


def main(argv):
    del argv
    import jax

    from bertjax import goodput, train
    from bertjax import workdir as workdir_lib
    from data_pipeline import config as data_config_lib

    loaded = configs(FLAGS.bert_steps)
    rows = []
    for name, config in loaded.items():
        workdir = os.path.join(FLAGS.workdir, name)
        print(model_line(len(rows) + 1, len(loaded), name, config, workdir, rows), flush=True)
        train.train_and_evaluate(config, workdir)
        # Time spent training, over every process that trained it (bertjax.goodput).
        seconds = goodput.account(goodput.read_events(workdir))["seconds"]["productive"]
        count = sum(x.size for x in jax.tree.leaves(parameter_shapes(config)))
        rows.append((name, workdir, config, count, seconds))
    # One held-out set for all: single segments, 15% masked, unpacked.
    modern_data = data_config_lib.from_config(loaded["modern_tiny"].data)
    vocab = {workdir_lib.vocab_file(workdir) for _, workdir, *_ in rows}
    data = dataclasses.replace(
        modern_data,
        vocab_file=sorted(vocab)[0],
        masked_lm_prob=0.15,
        eval_masked_lm_prob=0.0,
        max_predictions_per_seq=20,
        pack_examples=False,
        next_sentence_prediction=False,
    )
    same = len({pathlib.Path(v).read_bytes() for v in vocab}) == 1
    print()
    print(
        "held-out set: the built-in corpus's eval split, single segments of up to "
        f"{data.max_seq_length} tokens, 15% masked (seed {data.eval_seed})"
        + ("" if same else "; WARNING: the runs learned different vocabularies")
    )
    header = f"{'model':<14} {'params':>9} {'GFLOP/step':>10} {'steps':>6} {'PFLOP':>6} "
    print(header + f"{'training':>10} {'MLM loss':>8} {'MLM acc':>7}")
    for name, workdir, config, count, seconds in rows:
        score = held_out(workdir, data)
        per_step = step_flops(config)
        print(
            f"{name:<14} {count:>9,} {per_step / 1e9:>10.1f} {config.num_train_steps:>6} "
            f"{per_step * config.num_train_steps / 1e15:>6.2f} {seconds / 60:>8.1f} m "
            f"{score['loss']:>8.3f} {score['accuracy']:>7.3f}"
        )


def model_line(number: int, count: int, name: str, config, workdir: str, rows) -> str:
    """`model 2 of 3: NAME, N steps in WORKDIR`, and after the first, the time the rest
    take at the training time of the models before it (all have the same FLOPs)."""
    line = f"model {number} of {count}: {name}, {config.num_train_steps:,} steps in {workdir}"
    if not rows:
        return line
    each = sum(seconds for *_, seconds in rows) / len(rows)
    left = progress.format_duration(each * (count - number + 1))
    return f"{line}; about {left} left at the pace of the models before it"


def parameter_shapes(config):
    """The pretraining model's parameter shapes for `config` (no arrays)."""
    import jax
    import jax.numpy as jnp
    from flax import linen as nn

    from bertjax import model as model_lib

    model_config = model_lib.from_config(config.model)
    model = model_lib.BertForPreTraining(
        model_config, next_sentence=config.data.next_sentence_prediction
    )
    ids = jnp.zeros((1, 8), jnp.int32)
    variables = jax.eval_shape(
        lambda: model.init(jax.random.key(0), ids, ids, ids, ids[:, :2], deterministic=True)
    )
    return nn.unbox(variables["params"])


if __name__ == "__main__":
    program.run(main, define_flags)
