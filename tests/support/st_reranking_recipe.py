"""The reranking task's recipe in sentence-transformers, the oracle for docs/reranking.md:
a CrossEncoder of one label from the same checkpoint, BinaryCrossEntropyLoss with the
positive weighted by the negatives per positive, on a BEIR directory's training groups
(each relevant judgment, then the first negatives of its query's line in a negatives
file), with the epochs, batch, learning rate, warmup and weight decay of a bertjax config.

    PYTHONPATH=.venv/test-extras python tests/support/st_reranking_recipe.py \
        --st_dir MINILM_DIR --data_dir builtin_tasks/retrieval \
        --negatives runs/negatives.jsonl --num_negatives 3 --out runs/st_reranker \
        --epochs 1 --batch_size 16 --learning_rate 2e-5 --max_length 192

It saves the trained CrossEncoder (activation the identity) to OUT, which `python -m
bertjax.convert import --format hf OUT W` and `python -m bertjax.retrieval evaluate
--rerank W` then score exactly as bertjax's own reranker is scored.
"""

import argparse
import csv
import json
import os

import torch
from sentence_transformers import CrossEncoder
from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss
from st_retrieval_recipe import beir_texts, fit  # beside this script


def training_groups(data_dir: str, negatives_file: str, num_negatives: int):
    """(query, [positive, negatives...]) for each relevant judgment of qrels/train.tsv."""
    corpus, queries = (beir_texts(data_dir, name) for name in ("corpus.jsonl", "queries.jsonl"))
    with open(negatives_file, encoding="utf-8") as f:
        negatives = {row["query_id"]: row["negatives"] for row in map(json.loads, f)}
    with open(os.path.join(data_dir, "qrels", "train.tsv"), encoding="utf-8") as f:
        judged = [row for row in csv.DictReader(f, delimiter="\t") if int(row["score"]) > 0]
    return [
        (
            queries[row["query-id"]],
            [corpus[d] for d in [row["corpus-id"], *negatives[row["query-id"]][:num_negatives]]],
        )
        for row in judged
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("st_dir", "data_dir", "negatives", "out"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--num_negatives", type=int, default=3)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--batch_size", type=int, default=16)  # groups
    parser.add_argument("--learning_rate", type=float, default=2e-5)
    parser.add_argument("--warmup_proportion", type=float, default=0.1)
    parser.add_argument("--weight_decay", type=float, default=0.01)
    parser.add_argument("--max_length", type=int, default=192)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    model = CrossEncoder(
        args.st_dir, num_labels=1, max_length=args.max_length, device="cpu",
        activation_fn=torch.nn.Identity(),
    )  # fmt: skip
    loss = BinaryCrossEntropyLoss(model, pos_weight=torch.tensor(float(args.num_negatives)))

    def batch_loss(batch):
        pairs = [(query, passage) for query, passages in batch for passage in passages]
        labels = torch.tensor(
            [float(k == 0) for _, passages in batch for k in range(len(passages))]
        )
        return loss([[q for q, _ in pairs], [p for _, p in pairs]], labels)

    groups = training_groups(args.data_dir, args.negatives, args.num_negatives)
    steps = fit(model, groups, batch_loss, args)
    model.save(args.out)
    print(f"saved {args.out} after {steps} steps of {args.batch_size} groups")


if __name__ == "__main__":
    main()
