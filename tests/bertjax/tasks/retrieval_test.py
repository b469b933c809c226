"""The retrieval task's model at the lengths its input pads to: the same vectors at every
bucket, FLOPs counted at the batch's lengths, and AOT shapes at the longest; and the
checkpoints a run keeps."""

import json
import os

import jax
import numpy as np
import pytest

from bertjax import flops, inference, train
from bertjax.embedding import BertForEmbedding, Pooling
from bertjax.model import BertConfig
from bertjax.tasks import retrieval
from bertjax.tasks.contract import Description
from data_pipeline.finetune import retrieval_input
from experiments.finetune import retrieval as retrieval_experiment

NAMES = retrieval.MODEL_INPUTS


@pytest.fixture(scope="module")
def bucketed_batches(tmp_path_factory, tokenizer) -> dict:
    """One batch of the same pairs at 3 length buckets and at 1 (the longest lengths)."""
    rows = [(f"where is item {i}", f"item {i} is in hall {i % 3}", f"a hall {i}") for i in range(8)]
    path = tmp_path_factory.mktemp("pairs") / "pairs.tsv"
    path.write_text("anchor\tpositive\tneg\n" + "".join("\t".join(r) + "\n" for r in rows))
    config = {"train_file": str(path), "negatives": ("neg",), "max_query_length": 32}
    config["max_seq_length"] = 64
    batches = {}
    for buckets in (3, 1):
        task = retrieval_input.load_retrieval_task({**config, "length_buckets": buckets})
        dataset, _ = retrieval_input.make_retrieval_dataset(
            task, tokenizer, split="train", batch_size=8, seed=0, num_epochs=1
        )
        (batches[buckets],) = dataset.as_numpy_iterator()
    return batches


# slow: three compiles (init, and apply at two lengths) took 8.3 to 8.6 s of CPU in
# make test, at the unit tier's 8.
@pytest.mark.slow
@pytest.mark.parametrize("block", ["bert", "modernbert"])
def test_a_batch_padded_to_its_bucket_embeds_as_at_the_longest_lengths(bucketed_batches, block):
    batches = bucketed_batches
    assert batches[3]["query_ids"].shape == (8, 8) and batches[3]["passage_ids"].shape == (8, 32)
    assert batches[1]["passage_ids"].shape == (8, 2 * 64)

    sizes = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=48, max_position_embeddings=64)  # fmt: skip
    if block == "modernbert":
        sizes |= dict(norm_placement="pre", use_bias=False, feed_forward="geglu",
                      position_embedding="rotary", type_vocab_size=0, pooler="norm",
                      global_attention_every=2, local_attention_window=6)  # fmt: skip
    module = BertForEmbedding(BertConfig(**sizes), Pooling(normalize=True), passages=2)
    params = jax.jit(lambda *inputs: module.init(jax.random.key(0), *inputs, deterministic=True))(
        *(batches[1][n] for n in NAMES)
    )
    apply = jax.jit(lambda *inputs: module.apply(params, *inputs, deterministic=True))
    short, longest = (apply(*(batches[b][n] for n in NAMES)) for b in (3, 1))
    for bucketed, padded in zip(short, longest, strict=True):
        assert bucketed.shape == padded.shape
        np.testing.assert_allclose(bucketed, padded, atol=1e-5)


def test_flops_are_counted_at_the_batch_lengths():
    small = BertConfig(num_hidden_layers=2, hidden_size=16, num_attention_heads=2,
                       intermediate_size=32, vocab_size=40, max_position_embeddings=64)  # fmt: skip
    description = Description(64, {}, data={"negatives": ["neg"]})
    inputs = {"query_ids": 8, "query_mask": 8, "passage_ids": 2 * 16, "passage_mask": 2 * 16}
    counted = retrieval.TASK.forward_flops(small, inputs, description)
    assert counted == flops.encoder_flops(small, 8) + 2 * flops.encoder_flops(small, 16)


@pytest.mark.integration
def test_the_best_epochs_checkpoint_is_kept_when_it_is_not_the_last(pretrained_workdir, tmp_path):
    # One held-out query and one passage: nDCG@10 is 1 at every epoch, and the first
    # of equal evaluations is the best.
    rows = [(f"where is item {i}", f"item {i} is in hall {i % 3}") for i in range(8)]
    for name, part in (("train", rows), ("dev", rows[:1])):
        lines = "".join(f"{q}\t{p}\n" for q, p in part)
        (tmp_path / f"{name}.tsv").write_text("anchor\tpositive\n" + lines)
    config = retrieval_experiment.get_config()
    config.init_checkpoint = pretrained_workdir
    config.data.train_file, config.data.eval_file = (
        str(tmp_path / f"{name}.tsv") for name in ("train", "dev")
    )
    config.data.max_query_length, config.data.max_seq_length = 16, 32
    config.train_batch_size, config.eval_batch_size, config.num_train_epochs = 4, 4, 3.0
    workdir = tmp_path / "w"
    results = train.train_and_evaluate(config, str(workdir), devices=jax.devices()[:1])
    assert (results["best"]["step"], results["eval"]["step"]) == (2, 6)
    assert json.loads((workdir / "results.json").read_text())["best"]["step"] == 2
    # The best and the newest (config.checkpoints_to_keep=1).
    assert sorted(int(n) for n in os.listdir(workdir / "checkpoints") if n.isdigit()) == [2, 6]
    assert inference.restore(str(workdir), step=2).step == 2
