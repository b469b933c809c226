"""A reranker shown on this machine: the embedder's candidates, reordered by a cross-encoder
that reads each query with each passage.

    python -m bertjax.retrieval mine --workdir runs/embedder \
        --data_dir builtin_tasks/retrieval --split train --out runs/negatives.jsonl \
        --rank_range 2:30 --num_negatives 1 --relative_margin 0.05
    python -m bertjax.main --config experiments/finetune/builtin_reranking.py \
        --workdir runs/reranker --config.init_checkpoint=runs/minilm
    python -m bertjax.retrieval evaluate --workdir runs/embedder \
        --data_dir builtin_tasks/retrieval --split test --out runs/reranked_test \
        --rerank runs/reranker --rerank_depth 10

The collection is builtin_retrieval.py's. Each training query's relevant passage makes
a group with one of the fine-tuned embedder's hard negatives: its best ranked passage
from rank 2 on that is not relevant and scores at least 5% below the positive (a
passage ranked first, or scored as high, is more often one that answers the query
without being judged so; 793 of the 2,218 groups keep no negative). ListNet over each
group, on the logits: an epoch of 138 steps of 16 groups, pairs cut to 128 tokens, at
lr 1e-4. There is no evaluation during training (eval_split ''): the test split's
retrieve-then-rerank above is the figure, nDCG@10 0.2922 against the embedder's 0.3183
and 0.2209 for a random order of its 10. With BCE on negatives mined without the margin
(the recipe of experiments/finetune/reranking.py) it is 0.1994, below chance: it learns
to invert the embedder's order (docs/reranking.md has the figures, and the settings
tried).
Hardware: a 2-core CPU, about 8 minutes of training.
"""

import ml_collections

from experiments.finetune import reranking


def get_config() -> ml_collections.ConfigDict:
    config = reranking.get_config()
    config.data.beir_dir = "builtin_tasks/retrieval"
    config.data.negatives_file = "runs/negatives.jsonl"
    config.data.eval_split = ""
    config.data.num_negatives = 1
    config.data.max_query_length = 64
    config.data.max_seq_length = 128
    config.train_batch_size = 16
    config.num_train_epochs = 1.0
    config.optimizer.learning_rate = 1e-4
    config.loss.name = "listnet"
    config.log_every_steps = 10
    return config
