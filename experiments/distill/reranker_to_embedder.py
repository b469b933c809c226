"""An embedder taught by a reranker: Margin-MSE (Hofstaetter et al., 2020) on the
reranker's scores of each training query's positive and hard negatives.

    python -m bertjax.retrieval mine --workdir runs/minilm \
        --data_dir builtin_tasks/retrieval --split train --out runs/scored.jsonl \
        --rank_range 2:30 --num_negatives 4 --scorer runs/reranker
    python -m bertjax.main --config experiments/distill/reranker_to_embedder.py \
        --workdir runs/student_mm --config.init_checkpoint=runs/minilm_l3

runs/reranker is a reranking workdir (experiments/finetune/builtin_reranking.py;
docs/distillation.md gives the commands behind its figures), runs/minilm_l3 the
3-layer student of `convert shrink`. The mining writes, for each training query, hard
negatives of the embedder's ranking (no margin: the reranker's scores say how far each
is from the positive) and the reranker's score of them and of the query's relevant
passages. Each training row is a pair and its query's first two negatives; the student
learns the reranker's margins of the positive over each (of its cosines, margin_scale 1),
with the in-batch negatives' loss beside. No teacher runs in the step: the margins come
with the data. The collection, lengths, batch and epoch are
experiments/finetune/builtin_retrieval.py's; every option is the retrieval task's
(experiments/finetune/retrieval.py).
Expected result: test nDCG@10 0.2490 from runs/minilm_l3's 0.2026 with the reranker of
docs/distillation.md, which has the figures beside the student trained on the margins
alone and on the in-batch negatives alone.
Hardware: a 2-core CPU, about ten minutes an epoch (three passages a row).
"""

import ml_collections

from experiments.finetune import builtin_retrieval


def get_config() -> ml_collections.ConfigDict:
    # builtin_retrieval.py's collection, lengths, batch and epoch.
    config = builtin_retrieval.get_config()
    config.data.negatives_file = "runs/scored.jsonl"
    config.data.num_negatives = 2
    config.optimizer.learning_rate = 1e-4
    config.loss.name = "margin_mse"
    config.loss.margin_scale = 1.0
    config.loss.distill_weight = 1.0
    config.loss.in_batch_weight = 1.0
    return config
