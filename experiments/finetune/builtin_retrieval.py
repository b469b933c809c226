"""Embedding fine-tuning shown on this machine: which passage of the Python documentation
did a sentence come from?

    python -m data_pipeline.builtin_tasks --out_dir builtin_tasks
    make minilm
    python -m bertjax.retrieval evaluate --workdir runs/minilm \
        --data_dir builtin_tasks/retrieval --split test --out runs/minilm_test
    python -m bertjax.main --config experiments/finetune/builtin_retrieval.py \
        --workdir runs/embedder --config.init_checkpoint=runs/minilm
    python -m bertjax.retrieval evaluate --workdir runs/embedder \
        --data_dir builtin_tasks/retrieval --split test --out runs/embedder_test

The collection (data_pipeline/builtin_tasks.py): 3,216 passages of three consecutive
sentences of the built-in corpus, each with one sentence taken out as its query (the
inverse cloze task); 2,218 training queries from the training documents, 469 dev and
469 test queries from held-out documents, searched against the whole corpus.
Hardware: a 2-core CPU, a few minutes. Expected result: docs/embeddings.md (nDCG@10 of
all-MiniLM-L6-v2 before and after).
"""

import ml_collections

from experiments.finetune import retrieval


def get_config() -> ml_collections.ConfigDict:
    config = retrieval.get_config()
    config.data.beir_dir = "builtin_tasks/retrieval"
    config.data.max_query_length = 64
    config.data.max_seq_length = 128
    config.train_batch_size = 32
    config.eval_batch_size = 64
    config.num_train_epochs = 1.0
    config.log_every_steps = 10
    config.optimizer.learning_rate = 5e-5
    return config
