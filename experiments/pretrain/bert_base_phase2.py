"""BERT-Base pretraining, phase 2: 100,000 steps at sequence length 512 from phase 1.

    python -m bertjax.main --config experiments/pretrain/bert_base_phase2.py \
        --workdir gs://YOUR_BUCKET/runs/bert_base_phase2 --distributed \
        --config.init_checkpoint=gs://YOUR_BUCKET/runs/bert_base

Hardware: as phase 1 (experiments/pretrain/bert_base.py), a Cloud TPU v4-32 slice
(16 chips, 4 hosts), the paper's 16 TPU chips; the device count must divide 256.

Time: not measured on a TPU. The paper's 4 days on 16 TPU chips (Appendix
A.2) cover both phases. A step at length 512 holds 4x the tokens of one at 128
and attention grows with the square of the length. `python -m bertjax.tpu.aot
--config experiments/pretrain/bert_base_phase2.py --topology v5p-8` prints
the step's FLOPs, memory per chip and roofline time on a slice; docs/cloud-tpu.md, "Will
it fit?", lists what it printed. A bound: real steps also wait on collectives
and the host.

Expected result (docs/reference.md#published-numbers; not yet reproduced with bertjax, and
this config trains on Wikipedia only): held-out MLM loss about 1.4 nats
(perplexity about 4) for the finished BERT-Base, and SQuAD 1.1 dev F1 88.5 after
fine-tuning.

`init_checkpoint` is phase 1's workdir: the run takes the parameters of its
latest checkpoint; Adam's moments and the step count start fresh. Schedule (our
decision): the paper's single 1M-step schedule is at about 1e-5 when length 512
begins (1e-4 * (1 - 900k / 1M)) and decays linearly to 0 at 1M. This phase
reproduces that segment as its own schedule: peak 1e-5, decaying to 0 at its
100,000th step, after a 1,000-step warmup that the paper does not have. The
warmup is there because the optimizer state is new (the second-moment estimates
start at zero) and positions 128-511 were never trained in phase 1, so the
first updates at length 512 would otherwise be the least reliable ones at the
full rate. With offline TFRecords (see bert_base.py), write a set at length 512
with max_predictions_per_seq 80 and point data.tfrecord_*_files at it.

Packing (our decision, after Krell et al. 2021, arXiv 2107.02027): the pipeline
packs up to 3 sentence pairs into each row of 512 tokens, each pair
attending, predicted and scored on its own, so the losses are those of the same
pairs unpacked. Over half the tokens of Wikipedia at length 512 are padding
(Krell et al.), so a batch of 256 rows, which costs what 256 unpacked
sequences do, holds about twice the paper's 256 pairs: more text per step for
the same compute. `--config.train_batch_size=128` keeps about the paper's pairs
per step at half the cost instead; `--config.data.pack_examples=False` is the
paper's layout.
"""

from experiments.pretrain import bert_base


def get_config():
    return phase2(bert_base.get_config(), init_checkpoint="gs://YOUR_BUCKET/runs/bert_base")


def phase2(config, *, init_checkpoint: str):
    """Turns a phase-1 config into its phase 2; bert_large_phase2 uses it too."""
    config.num_train_steps = bert_base.PHASE2_STEPS
    config.init_checkpoint = init_checkpoint
    config.data.max_seq_length = 512
    # docs/reference.md#masking: 76-80 at length 512; 80 keeps round(512 * 0.15) = 77 possible.
    config.data.max_predictions_per_seq = 80
    # At 512 many sentence pairs are far shorter than a row: pack up to 3 into each
    # (data_pipeline/pretraining_input.py). train_batch_size then counts rows of 512 tokens.
    config.data.pack_examples = True
    # The paper's rate at step 900,000 of its 1M-step schedule: 1e-4 * (1 - 900k / 1M).
    config.optimizer.learning_rate = 1e-5
    config.optimizer.warmup_steps = 1_000
    return config
