r"""Offline pretraining data: documents in, masked instances out as sharded TFRecords.

    python -m data_pipeline.create_pretraining_data --config experiments/pretrain/tiny_cpu.py \
        --output_dir /tmp/bert_data --num_workers 2

Train on the result with config.data.source='tfrecord', tfrecord_train_files and
tfrecord_eval_files, and vocab_file set to the vocabulary copied next to the data.

The counterpart of google-research/bert's create_pretraining_data.py, streaming:
documents are read, tokenized in graph (tokenize_documents) and paired
(instances.py) without ever holding the corpus in memory; with
`next_sentence_prediction=False`, cut into single segments instead, written
without next_sentence_labels. Masking is static: each of `config.dupe_factor`
passes over a document is masked once (masking.py). The eval split takes one
pass, paired and masked from `config.eval_seed`, at `eval_masked_lm_prob` where
that is set.
Records are encoded straight to tf.Example bytes (tfrecords.encode_examples).

Work is cut into `num_workers` corpus shards per split (`iter_documents(...,
process_index=w, process_count=num_workers)`); shard w of a split is written to
`{split}-{w:03d}-{k:03d}.tfrecord` for k < num_shards_per_worker, instances
dealt round-robin. What a shard holds depends only on the config, the seed,
the split and (w, num_workers), so the output is the same whichever process
writes it. Up to `num_workers` processes share the shards: this one and
num_workers - 1 started with 'spawn' (TensorFlow is not fork-safe), each taking
the next unwritten shard when free. A started process spends seconds importing
TensorFlow, so on a small corpus this process may write every shard itself.

Each file is written under a temporary name and renamed when complete;
`{split}-metadata.json` (counts, config, corpus statistics) is written last.
"""

from absl import flags
from ml_collections import config_flags

from data_pipeline import cli


def define_flags() -> None:
    config_flags.DEFINE_config_file("config", None, "Experiment config file.", lock_config=True)
    flags.DEFINE_string("output_dir", None, "Folder for the TFRecords and their metadata.")
    flags.DEFINE_integer(
        "num_workers", 1, "Corpus shards per split, written by up to this many processes."
    )
    flags.DEFINE_integer("num_shards_per_worker", 1, "TFRecord files per corpus shard.")
    flags.DEFINE_bool("overwrite", False, "Replace data already in --output_dir.")
    flags.mark_flags_as_required(["config", "output_dir"])


def run() -> None:
    cli.run("data_pipeline.offline_writer:main", define_flags)


if __name__ == "__main__":
    run()
