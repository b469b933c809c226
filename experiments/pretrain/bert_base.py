"""BERT-Base pretraining, phase 1: the paper's recipe at sequence length 128.

    python -m bertjax.main --config experiments/pretrain/bert_base.py \
        --workdir gs://YOUR_BUCKET/runs/bert_base --distributed

Hardware: a Cloud TPU v4-32 slice (16 chips, 4 hosts), the paper's 16 TPU chips;
any TPU or GPU setup whose device count divides the batch of 256 runs it unchanged
(`--distributed` only on multi-host setups).

Time: not measured on a TPU. The paper trained BERT-Base on 4 Cloud TPUs in
Pod configuration (16 TPU chips) in 4 days for all 1,000,000 steps (paper,
Appendix A.2); phase 1 is 90% of those steps. `python -m bertjax.tpu.aot --config
experiments/pretrain/bert_base.py --topology v5p-8` compiles this step for a
TPU slice on any host and prints its memory per chip and its roofline time;
docs/cloud-tpu.md, "Will it fit?", lists what it printed. Those are bounds: real steps
also wait on collectives and on the host pipeline (`python -m
data_pipeline.benchmark` measures it).

Expected result: the published numbers (docs/reference.md#published-numbers) describe
the finished model, i.e. after phase 2 (experiments/pretrain/bert_base_phase2.py): held-out
MLM loss about 1.4 nats (perplexity about 4) and, after fine-tuning, SQuAD 1.1 dev F1 88.5.
Phase 1 alone has no published figure; its held-out MLM loss at length 128
should approach that level without reaching it. This config trains on Wikipedia
only (see below), so the numbers are expected to land near the paper's, not on
them; nothing here has been run to completion yet.

Paths to override (every YOUR_BUCKET):
- `data.vocab_file`: the released uncased vocabulary (30,522 entries), the
  `vocab.txt` of Google's uncased_L-12_H-768_A-12.zip.
- `data.tfds_data_dir`: a TFDS data dir holding wikipedia/20230601.en, prepared
  once with `tfds build wikipedia/20230601.en --data_dir gs://YOUR_BUCKET/tensorflow_datasets`
  (a Beam dataset: for the English dump use a distributed runner such as Dataflow).
- The workdir and phase 2's `init_checkpoint`: gs:// URLs, which every host
  reads and writes directly (docs/cloud-tpu.md, "Cloud Storage"); a multi-host run needs a
  workdir every host sees.

Data: the paper used BooksCorpus + English Wikipedia. TFDS has no BookCorpus with
document boundaries, so this config reads Wikipedia from TFDS and masks online
(dynamic masking, re-drawn every pass). To train on Wikipedia + BookCorpus, write
both as text files in the original format (one sentence per line, a blank line
between documents) and make offline TFRecords:

    python -m data_pipeline.create_pretraining_data \
        --config experiments/pretrain/bert_base.py --config.data.source=text \
        --config.data.text_files='/data/wiki/*.txt,/data/books/*.txt' \
        --output_dir gs://YOUR_BUCKET/bert_data/128 --num_workers 16

then train with `--config.data.source=tfrecord
--config.data.tfrecord_train_files='gs://YOUR_BUCKET/bert_data/128/train-*.tfrecord'
--config.data.tfrecord_eval_files='gs://YOUR_BUCKET/bert_data/128/eval-*.tfrecord'`
(the TFRecords are read with TensorFlow's file API, so gs:// works there). Phase 2
needs its own TFRecords written with its max_seq_length and max_predictions_per_seq.

Schedule (our decision, not the paper's): the paper describes one schedule over
1,000,000 steps (10,000 warmup steps, then linear decay, to 0 at step 1M in
the original optimization.py) and switches to length 512 for the last 100,000
steps, so the rate is still about 1e-5 when length 128 ends. bertjax's schedule decays to 0 at `num_train_steps`
and a run has one sequence length, so the two phases are two runs: this one,
900,000 steps at length 128 decaying to 0 at its end, and phase 2, its own
100,000-step schedule at length 512 starting from this run's parameters
(`init_checkpoint`; the optimizer state starts fresh). Phase 1 therefore ends
with a lower rate than the paper's; phase 2 starts where the paper's does.
"""

import ml_collections

from experiments.pretrain import tiny_cpu

# Steps of the paper's whole run (both phases) and of each phase.
PAPER_TOTAL_STEPS = 1_000_000
PHASE1_STEPS = 900_000
PHASE2_STEPS = PAPER_TOTAL_STEPS - PHASE1_STEPS
PEAK_LEARNING_RATE = 1e-4


def get_config() -> ml_collections.ConfigDict:
    """tiny_cpu.py's config with the paper's values (data_pipeline/config.py comments the
    data keys)."""
    config = tiny_cpu.get_config()
    # A TPU VM whose TPU did not start stops at once instead of training on its CPU.
    config.platform = "tpu"
    config.num_train_steps = PHASE1_STEPS
    config.train_batch_size = 256  # global, over all hosts (paper: 256 sequences)
    config.eval_batch_size = 256
    # 100 x 256 = 25,600 held-out sequences, more than MLPerf's fixed 10,000.
    config.num_eval_steps = 100
    config.eval_every_steps = 10_000
    config.checkpoint_every_steps = 10_000
    # Pure data parallelism (tiny_cpu's mesh): Base's parameters and Adam moments
    # (about 1.3 GB in float32) fit on every chip, so sharding them would only add
    # all-gathers.

    data = config.data
    data.source = "tfds"
    data.tfds_name = "wikipedia/20230601.en"
    data.tfds_data_dir = "gs://YOUR_BUCKET/tensorflow_datasets"
    # 1% of the articles (tens of thousands) held out: far more than num_eval_steps
    # needs, and each evaluation scans the split only until it has enough.
    data.eval_fraction = 0.01
    data.vocab_file = "gs://YOUR_BUCKET/bert/uncased_L-12_H-768_A-12/vocab.txt"
    # 30,522, the released vocabulary's size; config.model.vocab_size follows it.
    data.vocab_size = 30522
    # Per host. Wikipedia comes roughly in article-id order; a large document
    # buffer mixes topics and gives NotNext segments from unrelated articles.
    data.document_buffer_size = 10_000
    data.shuffle_buffer_size = 50_000
    # Pairs and masks made in 4 processes per host (data_pipeline/workers.py): a TPU VM has
    # cores to spare, and this keeps that Python off the GIL of the process that feeds
    # the TPU. 4 make about 4 x 12,000 sequences/s at length 128 by `python -m
    # data_pipeline.benchmark`, several times what a host of a v5p-8 consumes.
    data.num_workers = 4

    config.model = tiny_cpu.get_model_config("base", data.get_ref("vocab_size"))
    # Matmuls in bfloat16 on TPU; parameters, LayerNorm, softmax and logits stay float32.
    config.model.dtype = "bfloat16"
    # The paper's attention dropout (0.1) needs XLA attention with [B, A, L, L] probabilities;
    # attention_probs_dropout_prob=0 with attention_implementation='splash' uses the TPU kernel.

    # The original optimization.py's values; b1, b2, eps, weight decay and
    # clipping are tiny_cpu's already.
    config.optimizer.learning_rate = PEAK_LEARNING_RATE
    config.optimizer.warmup_steps = 10_000
    return config
