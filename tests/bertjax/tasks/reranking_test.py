"""The reranking task: the cross-encoder's scores, its options, where its parameters come
from, and a run whose reranked held-out queries `bertjax.rerank` scores alike."""

import dataclasses
import functools
import json
import os
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support import init_workdir
from support.beir_files import write_beir

from bertjax import flops, inference, retrieval_metrics, train
from bertjax.model import BertConfig, BertForReranking, BertForSequenceClassification
from bertjax.retrieval import evaluation, mining
from bertjax.tasks import reranking
from bertjax.tasks.contract import Description
from data_pipeline.errors import ConfigError
from data_pipeline.finetune import retrieval_input
from experiments.finetune import reranking as reranking_experiment

SMALL = BertConfig(num_hidden_layers=1, hidden_size=16, num_attention_heads=2,
                   intermediate_size=32, vocab_size=40, max_position_embeddings=64)  # fmt: skip


MODERN = dataclasses.replace(
    SMALL, norm_placement="pre", use_bias=False, feed_forward="geglu",
    position_embedding="rotary", type_vocab_size=0, pooler="norm", global_attention_every=2,
    local_attention_window=4, num_hidden_layers=2,
)  # fmt: skip


@pytest.mark.parametrize("config", [SMALL, MODERN], ids=["bert", "modernbert"])
def test_a_groups_scores_are_the_one_label_classifiers_logits_of_each_pair(config):
    ids = jax.random.randint(jax.random.key(1), (3, 4 * 8), 5, 40)
    mask = jnp.ones_like(ids).at[:, 6:8].set(0)
    segments = jnp.zeros_like(ids).at[:, 4:8].set(1) * config.type_vocab_size // 2
    reranker = BertForReranking(config, group_size=4)
    params = jax.jit(functools.partial(reranker.init, deterministic=True))(
        jax.random.key(0), ids, mask, segments
    )
    scores = jax.jit(functools.partial(reranker.apply, deterministic=True))(
        params, ids, mask, segments
    )
    classifier = BertForSequenceClassification(config, 1)
    pairs = (x.reshape(12, 8) for x in (ids, mask, segments))
    logits = jax.jit(functools.partial(classifier.apply, deterministic=True))(params, *pairs)
    assert scores.shape == (3, 4)
    np.testing.assert_allclose(scores.reshape(-1), logits[:, 0], atol=1e-6)


def test_flops_count_each_pair_of_a_group():
    description = Description(
        32, {}, num_labels=1, data={"train_file": "g.tsv", "negatives": ["n"]}
    )
    counted = reranking.TASK.forward_flops(SMALL, {"input_ids": 2 * 16}, description)
    assert counted == 2 * (flops.encoder_flops(SMALL, 16) + flops.pooler_flops(SMALL) + 2 * 16)


def config_for(data, **loss):
    config = reranking_experiment.get_config()
    config.data.update(data)
    config.loss.update(loss)
    return config


@pytest.mark.parametrize(
    "data,loss,message",
    [
        ({"train_file": "p.tsv", "passage": "p"}, {"name": "listnet"}, "use 'bce'"),
        ({"train_file": "g.tsv"}, {"name": "ranknet"}, "config.loss.name='ranknet': use one"),
        ({"train_file": "g.tsv"}, {"pos_weight": -1.0}, "config.loss.pos_weight=-1.0"),
    ],
)
def test_a_loss_the_data_cannot_take_is_refused(data, loss, message):
    with pytest.raises(ConfigError, match=message):
        reranking.check_options(config_for(data, **loss))


def test_the_positive_weight_defaults_to_the_negatives_per_positive():
    assert (
        reranking.pos_weight(
            config_for({"beir_dir": "b", "negatives_file": "n.jsonl", "num_negatives": 5})
        )
        == 5.0
    )
    assert reranking.pos_weight(config_for({"train_file": "p.tsv", "passage": "p"})) == 1.0
    assert reranking.pos_weight(config_for({"train_file": "g.tsv"}, pos_weight=2.5)) == 2.5


def beir_with_negatives(root: pathlib.Path, splits=("train", "dev")) -> dict:
    """write_beir's collection and the negatives of its train and dev queries (the next
    three passages): config.data options."""
    directory = write_beir(root / "beir")
    options = {"beir_dir": str(directory), "num_negatives": 3}
    for split, queries, option in (
        ("train", range(30), "negatives_file"),
        ("dev", range(30, 40), "eval_negatives_file"),
    ):
        path = root / f"{split}_negatives.jsonl"
        lines = [{"query_id": f"q{i}", "negatives": [f"d{(i + k) % 40}" for k in (1, 2, 3)]}
                 for i in queries]  # fmt: skip
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        options[option] = str(path)
    return options


@pytest.mark.parametrize(
    "grown_from,keys,fresh",
    [
        ("pretraining", ("bert",), ()),
        ("retrieval", ("bert",), ("bert/pooler",)),
        ("reranking", ("bert", "classifier"), ()),
    ],
)
def test_a_reranker_grown_from_an_embedder_starts_its_pooler_fresh(
    tmp_path, grown_from, keys, fresh
):
    (tmp_path / "init").mkdir()
    init = pathlib.Path(init_workdir.write(tmp_path / "init", ["where", "is", "the"]))
    task = json.loads((init / "task.json").read_text())
    (init / "task.json").write_text(json.dumps({**task, "kind": grown_from}))
    config = config_for(beir_with_negatives(tmp_path))
    config.init_checkpoint = str(init)
    config.data.max_query_length, config.data.max_seq_length = 16, 32
    setup = reranking.setup(config, str(tmp_path / "w"))
    # From a reranker its head trains on; from anything else it is new.
    assert setup.init.keys == keys and setup.init.fresh == fresh
    assert setup.model.inputs == {"input_ids": 4 * 32, "input_mask": 4 * 32, "segment_ids": 4 * 32}


@pytest.mark.integration
def test_a_run_reranks_its_held_out_queries_as_rerank_scores_them(
    pretrained_workdir, tmp_path, test_extras
):
    config = config_for(beir_with_negatives(tmp_path), name="lambdaloss")
    config.init_checkpoint = pretrained_workdir
    config.data.max_query_length, config.data.max_seq_length = 16, 48
    config.train_batch_size, config.eval_batch_size, config.num_train_epochs = 8, 4, 2.0
    config.checkpoints_to_keep, config.optimizer.learning_rate = 2, 1e-3
    workdir = tmp_path / "w"
    results = train.train_and_evaluate(config, str(workdir), devices=jax.devices()[:1])
    assert set(results["eval"]) == {"step", *retrieval_metrics.MEASURES}

    run = retrieval_metrics.read_trec_run(str(workdir / reranking.EVAL_RUN_FILE))
    assert sorted(run) == [f"q{i}" for i in range(30, 40)]
    assert all(len(passages) == 4 for passages in run.values())  # judged, and 3 negatives
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(30, 40)}
    measured = retrieval_metrics.evaluate(qrels, run)
    assert measured["ndcg@10"] == pytest.approx(results["eval"]["ndcg@10"])

    restored = inference.restore(str(workdir))
    corpus = dict(
        (record["_id"], f"{record['title']} {record['text']}")
        for record in map(json.loads, (tmp_path / "beir" / "corpus.jsonl").read_text().split("\n")[:-1])
    )  # fmt: skip
    query = "where is talel 31"  # write_beir's query q31
    passages = list(run["q31"])
    scores = reranking.rerank(restored, query, [corpus[d] for d in passages])
    np.testing.assert_allclose(scores, [run["q31"][d] for d in passages], atol=1e-6)

    # Mined with the reranker as the scorer: its scores of each negative and positive.
    collection = retrieval_input.load_collection(str(tmp_path / "beir"), "dev")
    assert collection.queries[1] == query
    options = mining.Options(rank_range=(1, 5), num_negatives=2)
    out = tmp_path / "scored.jsonl"
    mining.mine(pretrained_workdir, collection, str(out), options, scorer=str(workdir))
    line = json.loads(out.read_text().splitlines()[1])
    assert line["query_id"] == "q31" and len(line["scorer_scores"]) == 2
    scored = reranking.rerank(restored, query, [corpus[d] for d in ["d31", *line["negatives"]]])
    np.testing.assert_allclose(
        [line["scorer_positives"]["d31"], *line["scorer_scores"]], scored, atol=1e-6
    )

    # Retrieve, then rerank: both stages' runs as pytrec_eval scores them, and a first
    # stage read back from its run file reranked alike.
    import pytrec_eval

    out = tmp_path / "evaluated"
    beir = str(tmp_path / "beir")
    figures = evaluation.evaluate(
        pretrained_workdir, beir, "dev", str(out), rerank=str(workdir), rerank_depth=5
    )
    measures = {"ndcg_cut_10": "ndcg@10", "recall_100": "recall@100", "map_cut_100": "map@100"}
    for folder in (out, out / "first_stage"):
        with open(folder / "run.trec", encoding="utf-8") as f:
            trec_run = pytrec_eval.parse_run(f)
        assert {len(passages) for passages in trec_run.values()} == {40}  # the corpus
        theirs = pytrec_eval.RelevanceEvaluator(qrels, set(measures)).evaluate(trec_run)
        ours = json.loads((folder / "metrics.json").read_text())
        for measure, name in measures.items():
            mean = sum(query[measure] for query in theirs.values()) / len(theirs)
            assert ours[name] == pytest.approx(mean, abs=1e-9), (folder, name)
    assert figures["first_stage"]["ndcg@10"] == ours["ndcg@10"]
    written = json.loads((out / "metrics.json").read_text())
    for name in (evaluation.RANDOM_ORDER, evaluation.AGREEMENT):
        assert figures[name] == written[name] is not None
    first_stage = retrieval_metrics.read_trec_run(str(out / "first_stage" / "run.trec"))
    top = retrieval_metrics.ranking(first_stage["q31"])[:5]
    reranked = retrieval_metrics.read_trec_run(str(out / "run.trec"))["q31"]
    scores = reranking.rerank(restored, query, [corpus[d] for d in top])
    np.testing.assert_allclose([reranked[d] for d in top], scores, atol=1e-6)
    # The first 5 reordered by the reranker, then the rest in the first stage's order.
    order = retrieval_metrics.ranking(reranked)
    assert sorted(order[:5]) == sorted(top)
    assert order[5:] == retrieval_metrics.ranking(first_stage["q31"])[5:]
    again = evaluation.evaluate(
        "", beir, "dev", str(tmp_path / "again"), rerank=str(workdir), rerank_depth=5,
        first_stage=str(out / "first_stage" / "run.trec"),
    )  # fmt: skip
    assert again["ndcg@10"] == figures["ndcg@10"]
    # An earlier checkpoint of the reranker: its scores, and its step in metrics.json.
    first_epoch = min(int(name) for name in os.listdir(workdir / "checkpoints") if name.isdigit())
    assert first_epoch < restored.step
    evaluation.evaluate(
        "", beir, "dev", str(tmp_path / "early"), rerank=str(workdir), rerank_depth=5,
        first_stage=str(out / "first_stage" / "run.trec"), rerank_step=first_epoch,
    )  # fmt: skip
    assert json.loads((tmp_path / "early" / "metrics.json").read_text())["reranker_step"] == (
        first_epoch
    )
    early = retrieval_metrics.read_trec_run(str(tmp_path / "early" / "run.trec"))["q31"]
    scores = reranking.rerank(
        inference.restore(str(workdir), first_epoch), query, [corpus[d] for d in top]
    )
    np.testing.assert_allclose([early[d] for d in top], scores, atol=1e-6)
    assert np.abs(scores - [reranked[d] for d in top]).max() > 1e-4
