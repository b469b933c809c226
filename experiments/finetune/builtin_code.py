"""Token tagging shown on this machine: which words of a reference-manual sentence are code?

    python -m data_pipeline.builtin_tasks --out_dir builtin_tasks
    python -m bertjax.convert import --format hf MINILM_DIR runs/minilm
    python -m bertjax.main --config experiments/finetune/builtin_code.py \
        --workdir runs/code --config.init_checkpoint=runs/minilm

CoNLL-format sentences made from the built-in corpus by a rule
(data_pipeline/builtin_tasks.py): the manual's double-quoted code, quotes
removed, is the entity (B-CODE, I-CODE). 7,105 training and 2,989 held-out
sentences (held-out documents), 15 words on average, so most of a row of 128 is
padding unless windows are packed (the default; --config.data.pack_examples=False
pads each). Hardware: a 2-core CPU; one epoch is 222 steps of 32 sentences.
Expected result: held-out entity F1 0.348 from the pretrained MiniLM, 0.225 from
random init (--config.random_init=True), about 3.5 minutes each; `python -m
bertjax.bench.packed_step` with this config gives the packed and unpacked step
times (docs/performance.md, "Sequence packing").
"""

import ml_collections

from experiments.finetune import ner


def get_config() -> ml_collections.ConfigDict:
    config = ner.get_config()
    config.data.train_file = "builtin_tasks/code_train.txt"
    config.data.eval_file = "builtin_tasks/code_eval.txt"
    config.data.max_seq_length = 128
    config.train_batch_size = 32
    config.eval_batch_size = 64
    config.num_train_epochs = 1.0
    config.log_every_steps = 20
    return config
