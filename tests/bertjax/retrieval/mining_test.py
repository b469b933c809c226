"""Hard-negative mining: never a relevant passage, the ranks and margin asked for, the same
negatives whatever piece of the corpus is searched at a time, and workdirs of the wrong
kind refused."""

import json

import pytest
from support.beir_files import write_beir

from bertjax import inference, search
from bertjax.retrieval import mining
from data_pipeline.errors import UserError
from data_pipeline.finetune import retrieval_input


def read_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    beir = write_beir(tmp_path_factory.mktemp("beir"))
    # q0 is also relevant to d1 and d2, so that they are never its negatives.
    qrels = beir / "qrels" / "train.tsv"
    qrels.write_text(qrels.read_text() + "q0\td1\t1\nq0\td2\t2\n")
    return retrieval_input.load_collection(str(beir), "train")


@pytest.mark.integration
def test_negatives_come_from_the_ranks_asked_never_relevant_whatever_the_chunk(
    pretrained_workdir, collection, tmp_path, monkeypatch
):
    widest = []
    real_top_k = search.top_k

    def top_k(queries, passages, k, **kwargs):
        widest.append(len(passages))
        return real_top_k(queries, passages, k, **kwargs)

    monkeypatch.setattr(search, "top_k", top_k)
    options = mining.Options(rank_range=(2, 9), num_negatives=5, chunk=7)
    mining.mine(pretrained_workdir, collection, str(tmp_path / "chunked.jsonl"), options)
    assert max(widest) == 7  # no score matrix wider than a chunk
    whole = mining.Options(rank_range=(2, 9), num_negatives=5, chunk=1000)
    mining.mine(pretrained_workdir, collection, str(tmp_path / "whole.jsonl"), whole)
    lines = read_lines(tmp_path / "chunked.jsonl")
    assert lines == read_lines(tmp_path / "whole.jsonl")

    assert [line["query_id"] for line in lines] == [f"q{i}" for i in range(30)]
    restored = inference.restore(pretrained_workdir)
    queries = inference.embed(restored, collection.queries[:30])
    _, ranked = real_top_k(queries, inference.embed(restored, collection.passages), 9)
    for row, line in enumerate(lines):
        relevant = {d for d, score in collection.qrels[line["query_id"]].items() if score > 0}
        assert not relevant & set(line["negatives"])
        allowed = [collection.passage_ids[i] for i in ranked[row, 1:9]]
        assert line["negatives"] == [d for d in allowed if d not in relevant][:5]
        assert line["scores"] == sorted(line["scores"], reverse=True)


@pytest.mark.integration
def test_a_margin_drops_negatives_scored_close_to_the_positive_and_random_is_seeded(
    pretrained_workdir, collection, tmp_path
):
    restored = inference.restore(pretrained_workdir)
    queries = search.unit(inference.embed(restored, collection.queries[:30]))
    passages = search.unit(inference.embed(restored, collection.passages))
    options = mining.Options(rank_range=(1, 40), num_negatives=40, margin=0.05)
    mining.mine(pretrained_workdir, collection, str(tmp_path / "m.jsonl"), options)
    for row, line in enumerate(read_lines(tmp_path / "m.jsonl")):
        judged = collection.qrels[line["query_id"]]
        floor = min(queries[row] @ passages[int(d[1:])] for d, s in judged.items() if s > 0)
        assert all(score <= floor - 0.05 + 1e-5 for score in line["scores"])
        assert len(line["negatives"]) == sum(
            1
            for i in range(40)
            if f"d{i}" not in judged and queries[row] @ passages[i] <= floor - 0.05
        )

    drawn = []
    for seed in (1, 1, 2):
        random = mining.Options(rank_range=(1, 20), num_negatives=3, sampling="random", seed=seed)
        mining.mine(pretrained_workdir, collection, str(tmp_path / "r.jsonl"), random)
        drawn.append([line["negatives"] for line in read_lines(tmp_path / "r.jsonl")])
    assert drawn[0] == drawn[1] and drawn[0] != drawn[2]


def test_a_workdir_of_the_wrong_kind_and_bad_options_are_one_line(tmp_path):
    for kind in ("reranking", "retrieval"):
        (tmp_path / kind).mkdir()
        (tmp_path / kind / "task.json").write_text(json.dumps({"kind": kind}))
    with pytest.raises(UserError, match="a reranking workdir scores pairs; this takes an embedder"):
        mining.require_kind(str(tmp_path / "reranking"), "--workdir", reranker=False)
    with pytest.raises(UserError, match="a retrieval workdir; this takes a reranking workdir"):
        mining.require_kind(str(tmp_path / "retrieval"), "--scorer", reranker=True)
    mining.require_kind(str(tmp_path / "retrieval"), "--workdir", reranker=False)
    with pytest.raises(UserError, match="--rank_range='3-50': ranks A:B"):
        mining.parse_rank_range("3-50")
    with pytest.raises(UserError, match=r"--rank_range=5:2"):
        mining.Options(rank_range=(5, 2))
    with pytest.raises(UserError, match="give one of them"):
        mining.Options(margin=0.1, relative_margin=0.1)
