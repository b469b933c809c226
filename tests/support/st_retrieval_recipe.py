"""The retrieval task's recipe in sentence-transformers, the oracle for docs/embeddings.md:
MultipleNegativesRankingLoss (scale 20, cosine) on a BEIR directory's training pairs,
with the epochs, batch, learning rate, warmup and weight decay of a bertjax config.

    PYTHONPATH=.venv/test-extras python tests/support/st_retrieval_recipe.py \
        --st_dir MINILM_DIR --data_dir builtin_tasks/retrieval --out runs/st_embedder \
        --epochs 1 --batch_size 32 --learning_rate 5e-5 --max_query_length 64 \
        --max_seq_length 128

It saves the fine-tuned model to OUT (a sentence-transformers directory), which
`python -m bertjax.convert import --format hf OUT W` and `python -m bertjax.retrieval
evaluate --workdir W` then score exactly as bertjax's own run is scored.
"""

import argparse
import csv
import json
import os
import random

import torch
import transformers
from sentence_transformers import SentenceTransformer, losses


def beir_texts(data_dir: str, name: str) -> dict[str, str]:
    """id -> text of a BEIR directory's corpus.jsonl or queries.jsonl (title and text)."""
    with open(os.path.join(data_dir, name), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return {
        row["_id"]: " ".join(p for p in (row.get("title") or "", row["text"]) if p) for row in rows
    }


def training_pairs(data_dir: str) -> list[tuple[str, str]]:
    corpus, queries = (beir_texts(data_dir, name) for name in ("corpus.jsonl", "queries.jsonl"))
    with open(os.path.join(data_dir, "qrels", "train.tsv"), encoding="utf-8") as f:
        judged = [row for row in csv.DictReader(f, delimiter="\t") if int(row["score"]) > 0]
    return [(queries[row["query-id"]], corpus[row["corpus-id"]]) for row in judged]


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("st_dir", "data_dir", "out"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=5e-5)
    parser.add_argument("--warmup_proportion", type=float, default=0.1)
    parser.add_argument("--weight_decay", type=float, default=0.01)
    parser.add_argument("--max_query_length", type=int, default=64)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    model = SentenceTransformer(args.st_dir, device="cpu")
    loss = losses.MultipleNegativesRankingLoss(model, scale=20.0)

    def batch_loss(batch):
        features = []
        for side, length in ((0, args.max_query_length), (1, args.max_seq_length)):
            model.max_seq_length = length
            features.append(model.tokenize([pair[side] for pair in batch]))
        return loss(features, None)

    steps = fit(model, training_pairs(args.data_dir), batch_loss, args)
    model.max_seq_length = args.max_seq_length
    model.save(args.out)
    print(f"saved {args.out} after {steps} steps of {args.batch_size} pairs")


def fit(model, rows: list, batch_loss, args) -> int:
    """bertjax's fine-tuning recipe in PyTorch, shared by the recipes beside this one:
    `rows` in a new order each epoch (args.seed), args.batch_size a step for as many
    steps as bertjax counts in args.epochs, AdamW (args.learning_rate,
    args.weight_decay, eps 1e-6) under a linear schedule warming up over
    args.warmup_proportion of them, gradients clipped to norm 1. `batch_loss(rows)` is
    one batch's loss. Returns the steps taken."""
    steps = int(len(rows) / args.batch_size * args.epochs)  # as bertjax counts them
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay, eps=1e-6
    )
    schedule = transformers.get_linear_schedule_with_warmup(
        optimizer, int(steps * args.warmup_proportion), steps
    )
    rng, order = random.Random(args.seed), []
    model.train()
    for step in range(steps):
        if len(order) < args.batch_size:
            epoch = list(range(len(rows)))
            rng.shuffle(epoch)
            order += epoch
        value = batch_loss([rows[i] for i in order[: args.batch_size]])
        del order[: args.batch_size]
        value.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        if (step + 1) % 10 == 0 or step + 1 == steps:
            print(f"step {step + 1}/{steps}  loss {value.item():.6f}", flush=True)
    return steps


if __name__ == "__main__":
    main()
