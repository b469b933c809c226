"""Trains a reranker (a cross-encoder) on a BEIR directory's hard negatives or your own rows.

    python -m bertjax.main --config experiments/finetune/reranking.py --workdir runs/reranker \
        --config.init_checkpoint=runs/minilm --config.data.beir_dir=BEIR_DIR \
        --config.data.negatives_file=negatives.jsonl \
        --config.data.eval_negatives_file=dev_negatives.jsonl

BEIR_DIR holds corpus.jsonl, queries.jsonl, qrels/train.tsv and qrels/dev.tsv.
negatives.jsonl gives each training query's passages that are not relevant, best
ranked first ({"query_id": ..., "negatives": [...]}, as `python -m bertjax.retrieval
mine --split train` writes them); each relevant passage makes a group with the first
config.data.num_negatives of them. dev_negatives.jsonl (mine --split dev) gives the dev
queries' candidates: after every epoch each dev query is reranked among them and its
judged passages, and the best checkpoint by nDCG@10 is kept. Rows instead:
--config.data.train_file=groups.tsv (columns query and positive,
--config.data.negatives=neg1,neg2), or --config.data.passage=passage for (query,
passage, label) rows.
Every data option is a field of data_pipeline.finetune.reranking_config.RerankingConfig.
The init checkpoint may be a pretraining, converted or retrieval workdir (the head is
new), or a reranker's (imported or trained: its head trains on). The recipe is sentence-transformers' for training a CrossEncoder with
BinaryCrossEntropyLoss on hard negatives (the positive weighted by the negatives per
positive, lr 2e-5, warmup 10%, one epoch).
Hardware: any. Expected result: results.json holds {"eval": {"ndcg@10": ..., "mrr@10":
..., "recall@100": ..., "map@100": ...}, "best": ...} of the reranked dev queries.
"""

import ml_collections

from data_pipeline.finetune import reranking_config
from experiments.finetune import base


def get_config() -> ml_collections.ConfigDict:
    config = base.get_config()
    config.task = "reranking"
    config.data = reranking_config.default_config()
    config.num_train_epochs = 1.0
    config.train_batch_size = 16  # groups: 16 x (1 + num_negatives) pairs a step
    config.eval_batch_size = 16
    # bertjax/losses.py: 'bce' (pointwise), 'listnet' or 'lambdaloss' (listwise over a
    # group), each on the logit itself. pos_weight scales bce's positive term; 0: the
    # negatives a group has per positive.
    config.loss = ml_collections.ConfigDict({"name": "bce", "pos_weight": 0.0})
    return config
