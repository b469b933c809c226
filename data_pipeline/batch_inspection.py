"""Decoded pretraining examples and batch statistics: python -m data_pipeline.inspect_batches's work."""

import contextlib
import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

from data_pipeline import batch_statistics, corpus, pretraining_input, schema
from data_pipeline import config as config_lib
from data_pipeline.vocab import load_vocab
from data_pipeline.vocab_learning import resolve_vocab_file


def inspect(config, *, split, num_batches, batch_size, num_examples, dump, out=None):
    """Reads `num_batches` batches, prints examples and statistics; returns them as dicts."""
    out = out or sys.stdout
    data = config_lib.from_config(config.data)
    # Set explicitly in the config; a preset's own value is checked by the trainer.
    positions = config.model.get("max_position_embeddings") if "model" in config else None
    if positions is not None:
        config_lib.check_max_positions(data, positions)
    corpus_stats = corpus.CorpusStats()
    start = time.perf_counter()
    vocab_file = resolve_vocab_file(data)
    vocab = load_vocab(vocab_file)
    origin = "given" if data.vocab_file else "learned from the training split, cached"
    print(
        f"vocabulary  {vocab_file}\n            {len(vocab):,} tokens, {data.tokenizer}, {origin}",
        file=out,
    )
    if data.pack_examples:
        # A packed row holds these same pairs, each masked by the same rules: the statistics
        # and examples are the pairs'.
        print("pack_examples: the sequences are shown unpacked, one a row", file=out)
        data = data.replace(pack_examples=False)
    dataset = pretraining_input.make_pretraining_dataset(
        data, split=split, batch_size=batch_size, seed=config.seed, stats=corpus_stats
    )
    stats = batch_statistics.BatchStatistics(
        data.max_seq_length, data.max_predictions_per_seq, data.next_sentence_prediction
    )
    features = schema.features(packed=False, next_sentence=data.next_sentence_prediction)
    if dump:
        tf.io.gfile.makedirs(os.path.dirname(dump) or ".")
    shown = 0
    with tf.io.gfile.GFile(dump, "w") if dump else contextlib.nullcontext() as dump_file:
        for batch in dataset.take(num_batches).as_numpy_iterator():
            stats.update(batch, vocab)
            for row in range(batch_size):
                # What the model sees; not where the stream stands (stream_position).
                example = {name: batch[name][row] for name in features}
                if shown < num_examples:
                    print(
                        f"\nexample {shown}: {batch_statistics.format_example(example, vocab)}",
                        file=out,
                    )
                    shown += 1
                if dump_file:
                    record = {name: np.asarray(v).tolist() for name, v in example.items()}
                    record["tokens"] = vocab.decode(example["input_ids"])
                    dump_file.write(json.dumps(record, ensure_ascii=False) + "\n")
    seconds = time.perf_counter() - start
    summary = stats.summary()
    reported = corpus_stats.as_dict() if data.source != "tfrecord" else None
    print(
        f"\n{split} split, {summary['sequences'] // max(batch_size, 1)} batches "
        f"of {batch_size}, {seconds:.1f}s",
        file=out,
    )
    print(batch_statistics.format_summary(summary, reported), file=out)
    if dump:
        print(f"wrote {summary['sequences']:,} examples to {dump}", file=out)
    return {"batches": summary, "corpus": reported}


def main(args):
    inspect(
        args.config,
        split=args.split,
        num_batches=args.num_batches,
        batch_size=args.batch_size,
        num_examples=args.num_examples,
        dump=args.dump,
    )
