"""Extractive QA shown on this machine: find the word a question blanked out of its context.

    python -m data_pipeline.builtin_tasks --out_dir builtin_tasks
    python -m bertjax.convert import --format hf MINILM_DIR runs/minilm
    python -m bertjax.main --config experiments/finetune/builtin_cloze.py \
        --workdir runs/cloze --config.init_checkpoint=runs/minilm

SQuAD 1.1-format questions made from the built-in corpus by a rule
(data_pipeline/builtin_tasks.py): the context is three sentences, the question
is one of them with a word replaced by "what", the answer is that word.
Hardware: a 2-core CPU; one epoch of the 2,213 training questions is 138 steps
of 16 x 128. Expected result: see docs/finetuning.md.
"""

import ml_collections

from experiments.finetune import squad


def get_config() -> ml_collections.ConfigDict:
    config = squad.get_config("v1.1")
    config.data.train_file = "builtin_tasks/cloze_train.json"
    config.data.eval_file = "builtin_tasks/cloze_eval.json"
    config.data.max_seq_length = 128
    config.data.doc_stride = 64
    config.data.max_query_length = 48
    config.train_batch_size = 16
    config.eval_batch_size = 32
    config.num_train_epochs = 1.0
    config.log_every_steps = 20
    config.optimizer.learning_rate = 1e-4
    return config
