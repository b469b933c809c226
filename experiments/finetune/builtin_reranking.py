"""A reranker shown on this machine: the embedder's candidates, reordered by a cross-encoder
that reads each query with each passage.

    python -m bertjax.retrieval mine --workdir runs/embedder \
        --data_dir builtin_tasks/retrieval --split train --out runs/negatives.jsonl \
        --rank_range 2:30 --num_negatives 3
    python -m bertjax.main --config experiments/finetune/builtin_reranking.py \
        --workdir runs/reranker --config.init_checkpoint=runs/minilm
    python -m bertjax.retrieval evaluate --workdir runs/embedder \
        --data_dir builtin_tasks/retrieval --split test --out runs/reranked_test \
        --rerank runs/reranker --rerank_depth 20

The collection is builtin_retrieval.py's. Each training query's relevant passage makes
a group with 3 of the fine-tuned embedder's hard negatives (ranks 2 to 30; rank 1
is most often the relevant passage itself, never written). The dev queries are
reranked among their relevant passage alone here (no eval_negatives_file): the
test-split evaluation above is the figure that counts.
Hardware: a 2-core CPU. Expected result: docs/reranking.md.
"""

import ml_collections

from experiments.finetune import reranking


def get_config() -> ml_collections.ConfigDict:
    config = reranking.get_config()
    config.data.beir_dir = "builtin_tasks/retrieval"
    config.data.negatives_file = "runs/negatives.jsonl"
    config.data.eval_split = ""
    config.data.num_negatives = 3
    config.data.max_query_length = 64
    config.data.max_seq_length = 192
    config.train_batch_size = 16
    config.num_train_epochs = 1.0
    config.log_every_steps = 10
    return config
