"""Fine-tunes an embedder for search on a BEIR directory or your own pair files.

    python -m bertjax.main --config experiments/finetune/retrieval.py --workdir runs/embedder \
        --config.init_checkpoint=runs/minilm --config.data.beir_dir=BEIR_DIR

BEIR_DIR holds corpus.jsonl, queries.jsonl and qrels/train.tsv (the pairs trained on)
and qrels/dev.tsv (evaluated after every epoch; the best checkpoint by nDCG@10 is
kept). Pair files instead: --config.data.train_file=pairs.tsv (columns anchor and
positive, and --config.data.negatives=neg1,neg2 for hard negatives) and optionally
--config.data.eval_file. Hard negatives of a BEIR directory: --config.data.negatives_file
(python -m bertjax.retrieval mine's file) and --config.data.num_negatives. The recipe is sentence-transformers' for
MultipleNegativesRankingLoss (scale 20, cosine, batch 32, lr 2e-5, warmup 10%).
Every data option is a field of data_pipeline.finetune.retrieval_config.RetrievalConfig.
Hardware: any; on the 2-core CPU MiniLM trains about 10 pairs/s at 32 + 128 tokens
(python -m bertjax.bench.embedding).
Expected result: results.json holds {"eval": {"ndcg@10": ..., "mrr@10": ...,
"recall@100": ..., "map@100": ...}, "best": ...}; docs/embeddings.md has figures.
"""

import ml_collections

from data_pipeline.finetune import retrieval_config
from experiments.finetune import base


def get_config() -> ml_collections.ConfigDict:
    config = base.get_config()
    config.task = "retrieval"
    config.data = retrieval_config.default_config()
    config.data.max_seq_length = 128
    config.num_train_epochs = 1.0
    # How a text becomes one vector: 'mean', 'cls' or 'last' pooling of the final
    # hidden states, then L2-normalized or not (bertjax/embedding.py). Exported and
    # embedded the same way.
    config.embedding = ml_collections.ConfigDict({"pooling": "mean", "normalize": True})
    # In-batch negatives over the global batch (bertjax/losses.py): the cosine times
    # `scale`; `symmetric` adds the positives' loss over the queries; matryoshka_dims
    # sums the loss over those prefixes of the vector, largest first (() the whole).
    # name: 'in_batch' (the above alone); learning from config.distill.teacher, 'mse'
    # (its vectors) or 'kl' (its ranking of the batch's candidates); or 'margin_mse' (a
    # reranker's margins over the hard negatives, mined with --scorer, or the
    # config.data.margins columns; the student's margins are of margin_scale times its
    # cosines). A teacher's loss is weighted by distill_weight, plus in_batch_weight times
    # the in-batch loss (docs/distillation.md).
    config.loss = ml_collections.ConfigDict(
        {
            "scale": 20.0,
            "symmetric": False,
            "matryoshka_dims": (),
            "name": "in_batch",
            "distill_weight": 1.0,
            "in_batch_weight": 0.0,
            "margin_scale": 1.0,
        }
    )
    # A teacher embedder's workdir, for the losses that learn from one ("": none); `cache`,
    # a directory where its outputs of the training rows are computed once and read
    # after ("": the teacher runs in every step).
    config.distill = ml_collections.ConfigDict({"teacher": "", "cache": ""})
    config.model.hidden_dropout_prob = 0.1
    return config
