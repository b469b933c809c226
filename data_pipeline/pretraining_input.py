"""The online pretraining pipeline: documents in, masked fixed-shape batches out.

    documents (Python: files, TFDS or the built-in corpus; this host's shard),
      in chunks of `config.document_buffer_size`
      -> tokenize in graph (tf-text, a chunk per call, parallel map)
      -> sentence pairs for NSP, shuffled within the chunk (instances.py); with
         `next_sentence_prediction=False`, single segments of contiguous text
      [-> with `pack_examples`: rows of up to max_sequences_per_row pairs, packed
          within the chunk (packing.pack_pairs)]
      -> batch -> mask (masking.py; redrawn every pass) -> prefetch

Pairs and masks are Python (workers.ChunkInstances, workers.BatchMasks): in
tf.data's threads, or with `num_workers` in worker processes (workers.py).

Training streams forever, each pass (epoch) over the corpus in a new file
order with new pairs and new masks. Evaluation is one pass with pairs and
masks drawn from `config.eval_seed`, so an eval set is identical across runs
whatever `seed`, masked at `eval_masked_lm_prob` where that is set. The batch
schema is in schema.py.

Resuming. Nothing crosses a chunk: its pairs, NotNext segments and order come
from its own documents and a seed of (seed, epoch, chunk), and a batch's masks
from (seed, batch index). So a few integers fix the stream after any instance;
every row of a batch carries them, as they stand after it, in
`stream_position` (POSITION_FIELDS):

    batches so far, epoch, chunk, where the reader stood at the chunk's start
    (corpus.ReaderPosition: 4 integers), the chunk's instances so far (its
    packed rows so far, with `pack_examples`)

`position=` one of them (the last row of the last batch trained on) seeks the
reader to the chunk's start, rebuilds that one chunk, drops the instances
already taken and masks on from the same batch index: the batches that follow
are those of the uninterrupted stream, and starting late costs what starting
at step 0 does. A chunk holds `document_buffer_size` documents; an epoch's last
one holds one more rather than leave a document alone, with no other to pair.

Packing (`pack_examples`, Krell et al. 2021, arXiv 2107.02027). At length 512
a sentence pair is often far shorter than its row (on the built-in corpus 43%
of the rows' tokens are padding). Packing puts several pairs one after the
other in a row (schema.py's packed features): attention stays within each
pair, positions restart at each (bertjax/model.py), masked positions point into
the row and each pair keeps its own NSP label, read at its [CLS]. A chunk's
pairs are packed together, so a row's content, like an instance's, is fixed by
the chunk and resuming is unchanged. A batch is then a number of rows, holding
as many pairs as fit; each pair is masked by the rules of an unpacked one, on
its own (masking.mask_packed_batch).

Exit. Our Python code runs in tf.data's threads. CPython ends a thread that
waits for the GIL once the interpreter finalizes, so a tf.data thread caught
inside Python then never finishes its call, and an iterator still alive (a
script's global) waits for it forever in its destructor. So at exit, before
finalization, `_python_calls.stop` (exit_calls.py) ends every stream and
waits until none of our calls runs.
"""

import atexit
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from data_pipeline import config as config_lib
from data_pipeline import cores, corpus, masking, schema, tfrecords, workers
from data_pipeline.exit_calls import PythonCalls
from data_pipeline.tokenizer import make_tokenizer
from data_pipeline.vocab import Vocab
from data_pipeline.vocab_learning import resolve_vocab_file


def masking_spec(
    config: config_lib.DataConfig, vocab: Vocab, split: str = "train"
) -> masking.MaskingSpec:
    """How `split` is masked: at its own rate (DataConfig.masking_rate)."""
    return masking.MaskingSpec(
        max_predictions_per_seq=config.max_predictions_per_seq,
        masked_lm_prob=config.masking_rate(split),
        mask_token_prob=config.mask_token_prob,
        random_token_prob=config.random_token_prob,
        whole_word_mask=config.whole_word_mask,
        cls_id=vocab.cls_id,
        sep_id=vocab.sep_id,
        pad_id=vocab.pad_id,
        mask_id=vocab.mask_id,
        random_token_ids=vocab.random_token_ids,
        is_continuation=vocab.is_continuation,
    )


POSITION_FIELDS = ("batches", "epoch", "chunk", *corpus.ReaderPosition._fields, "instances")


def position_fields(data_config: Any) -> tuple[str, ...]:
    """What a train row's `stream_position` counts, by name: POSITION_FIELDS, or the
    TFRecord source's (tfrecords.read_pretraining_dataset)."""
    config = config_lib.from_config(data_config)
    if config.source != "tfrecord":
        return POSITION_FIELDS
    return tfrecords.PACKED_POSITION_FIELDS if config.pack_examples else tfrecords.POSITION_FIELDS


def train_files(data_config: Any) -> tuple[str, ...]:
    """The files the train split reads, globs resolved: the text source's (its held-out
    documents among them) or the TFRecord source's; none for the built-in corpus and TFDS."""
    config = config_lib.from_config(data_config)
    if config.source == "text":
        return tuple(corpus.list_files(config))
    if config.source == "tfrecord":
        return tuple(tfrecords.split_files(config, "train"))
    return ()


def make_pretraining_dataset(
    data_config: Any,
    *,
    split: str,
    batch_size: int,
    process_index: int = 0,
    process_count: int = 1,
    seed: int,
    stats: corpus.CorpusStats | None = None,
    position: Sequence[int] | np.ndarray | None = None,
) -> tf.data.Dataset:
    """Batches of this host's share (`batch_size`) in the schema of schema.py.

    `position`, a `stream_position` row of this stream, starts it right after
    that row (module docstring). `stats`, when given, is updated with what the
    document readers saw (files, documents, invalid bytes, empty lines) as the
    dataset is iterated.
    """
    config = config_lib.from_config(data_config)
    tfrecords.check_dataset_args(split, batch_size, process_index, process_count)
    if config.source == "tfrecord":
        return tfrecords.read_pretraining_dataset(
            config,
            split=split,
            batch_size=batch_size,
            process_index=process_index,
            process_count=process_count,
            seed=seed,
            position=position,
            wrap=_python_calls.wrap,
        )

    corpus.check_sources(config)
    shard = {"split": split, "process_index": process_index, "process_count": process_count}
    corpus.check_two_documents(config, **shard)  # before a vocabulary is learned from it
    tokenizer = make_tokenizer(config, resolve_vocab_file(config))
    stream_seed = config.eval_seed if split == "eval" else seed
    seeds = np.random.SeedSequence([stream_seed, process_index, tfrecords.SPLITS.index(split)])
    pair_seed, mask_seed = (int(s) for s in seeds.generate_state(2))

    def documents(epoch: int, start: corpus.ReaderPosition) -> Iterator[corpus.Document]:
        shuffle_seed = None if split == "eval" else pair_seed + epoch
        return corpus.iter_documents(
            config, **shard, shuffle_seed=shuffle_seed, stats=stats, start=start
        )

    start = (0,) * len(POSITION_FIELDS)
    if position is not None:
        start = _check_position(position, split, documents)
    dataset = _chunks(config, documents, start, once=split == "eval")
    dataset = dataset.map(_tokenize(tokenizer), num_parallel_calls=tf.data.AUTOTUNE)
    steps = _python_steps(config, tokenizer.vocab, split, pair_seed, mask_seed)
    run = _runner(steps, config.num_workers)
    dataset = _instances(config, dataset, run)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    # Eval batches carry the schema's features only: an eval pass is never resumed.
    features = schema.features(config.pack_examples, config.next_sentence_prediction)
    features = features if split == "eval" else (*features, "stream_position")
    dataset = _mask(config, dataset, run, batch_size, start[0], features)
    if config.num_workers:
        # A tf.data thread waiting on a worker holds no core: a thread more per worker.
        options = tf.data.Options()
        options.threading.private_threadpool_size = cores.usable_cores() + config.num_workers
        dataset = dataset.with_options(options)
    return dataset.prefetch(tf.data.AUTOTUNE)


def _check_position(position, split: str, documents) -> tuple[int, ...]:
    start = tfrecords.check_position(position, len(POSITION_FIELDS))
    fields = dict(zip(POSITION_FIELDS, start, strict=True))
    if split == "eval":
        raise tfrecords.PositionError(
            f"stream position {fields}: the eval split is read from its start"
        )
    reader = corpus.ReaderPosition(*start[3:-1])
    if (fields["chunk"] == 0) != (reader == corpus.EPOCH_START):
        raise tfrecords.PositionError(
            f"stream position {fields}: chunk 0, and only chunk 0, starts where the epoch does"
        )
    if next(documents(fields["epoch"], reader), None) is None:
        raise tfrecords.PositionError(
            f"stream position {fields}: epoch {fields['epoch']} has no chunk {fields['chunk']} "
            "(no document at that reader position)"
        )
    return start


def _chunks(config, documents, start: tuple[int, ...], *, once: bool) -> tf.data.Dataset:
    """Chunks of raw documents from `start` on: (doc ids, sentences of them all, sentences per
    document, [epoch, chunk, *reader position at the chunk's start], instances to drop)."""
    size = config.document_buffer_size

    def chunks() -> Iterator[tuple[list, list[corpus.Document]]]:
        epoch, chunk = start[1:3]
        reader = corpus.ReaderPosition(*start[3:-1])
        while True:
            pending = []
            for document in documents(epoch, reader):
                pending.append(document)
                # Two documents past a chunk: the next chunk has a pair.
                if len(pending) == size + 2:
                    yield [epoch, chunk, *reader], pending[:size]
                    chunk, reader, pending = chunk + 1, pending[size - 1].position, pending[size:]
            yield [epoch, chunk, *reader], pending
            if once:
                return
            epoch, chunk, reader = epoch + 1, 0, corpus.EPOCH_START

    def generate():
        stream, drop = chunks(), start[-1]
        while True:
            with _python_calls.running():
                chunk = None if _python_calls.stopping else next(stream, None)
                if chunk is None:
                    return
                header, members = chunk
                doc_ids = [document.doc_id for document in members]
                sentences = [s for document in members for s in document.sentences]
                counts = [len(document.sentences) for document in members]
            yield doc_ids, sentences, counts, header, drop
            drop = 0

    return tf.data.Dataset.from_generator(
        generate,
        output_signature=(
            tf.TensorSpec([None], tf.string),
            tf.TensorSpec([None], tf.string),
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([len(POSITION_FIELDS) - 2], tf.int64),
            tf.TensorSpec([], tf.int64),
        ),
    )


def _tokenize(tokenizer):
    # Graph code only: autograph's rewrite of Python source costs seconds at every program start.
    @tf.autograph.experimental.do_not_convert
    def tokenize(doc_ids, sentences, counts, header, drop):
        ids = tokenizer.tokenize(sentences)
        lengths = tf.cast(ids.row_lengths(), tf.int32)
        return doc_ids, counts, ids.flat_values, lengths, header, drop

    return tokenize


def _instances(config, chunks: tf.data.Dataset, run) -> tf.data.Dataset:
    """Unmasked sentence pairs with their stream positions, one element per instance: a pair,
    or with `pack_examples` a row of pairs (workers.ChunkInstances)."""
    names = _instance_names(config)
    dtypes = [tf.as_dtype(schema.feature_dtype(name)) for name in names]
    shapes = _shapes(config)

    @tf.autograph.experimental.do_not_convert
    def make(*chunk):
        values = tf.numpy_function(
            lambda *c: run("instances", *c), chunk, [*dtypes, tf.int64], stateful=False
        )
        features = dict(zip((*names, "stream_position"), values, strict=True))
        for name, value in features.items():
            value.set_shape([None, *shapes[name]])
        return features

    return chunks.map(make, num_parallel_calls=tf.data.AUTOTUNE).unbatch()


def _instance_names(config) -> tuple[str, ...]:
    """The batch's features but the masked-LM targets, which each batch's masks add."""
    features = schema.features(config.pack_examples, config.next_sentence_prediction)
    return tuple(name for name in features if not name.startswith("masked_lm_"))


def _python_steps(
    config, vocab: Vocab, split: str, pair_seed: int, mask_seed: int
) -> dict[str, Any]:
    """The stream's Python steps (workers.py): a chunk's instances and a batch's masks."""
    spec = masking_spec(config, vocab, split)
    return {
        "instances": workers.ChunkInstances(
            max_seq_length=config.max_seq_length,
            short_seq_prob=config.short_seq_prob,
            random_next_prob=config.random_next_prob,
            next_sentence=config.next_sentence_prediction,
            seed=pair_seed,
            names=_instance_names(config),
            spec=spec,
            position_fields=len(POSITION_FIELDS),
            max_sequences_per_row=config.max_sequences_per_row if config.pack_examples else None,
            max_predictions_per_seq=config.max_predictions_per_seq,
        ),
        "masks": workers.BatchMasks(seed=mask_seed, spec=spec, packed=config.pack_examples),
    }


def _runner(steps: dict[str, Any], num_workers: int):
    """(name, *args) -> steps[name](*args), run in this thread or, with num_workers, in a
    worker process (workers.shared_pool). Once the interpreter exits, a chunk makes nothing."""
    pool = workers.shared_pool(num_workers) if num_workers else None
    key = pool.register(steps) if pool else None

    def run(name, *args):
        with _python_calls.running():
            if _python_calls.stopping:
                if name == "instances":
                    args = ([], [], *args[2:])  # no more work: the interpreter is exiting
                return steps[name](*args)
            return pool.run(key, name, *args) if pool else steps[name](*args)

    return run


def _shapes(config) -> dict[str, tuple]:
    slots = config.max_sequences_per_row if config.pack_examples else 0
    shapes = schema.feature_shapes(config.max_seq_length, config.max_predictions_per_seq, slots)
    return {**shapes, "stream_position": (len(POSITION_FIELDS),)}


# Ends every stream at exit, then waits until none of their calls has run for 0.1 s.
_python_calls = PythonCalls(0.1, from_stop=True)
atexit.register(_python_calls.stop)


def _mask(config, dataset, run, batch_size: int, first: int, features):
    """Masks batch after batch, numbering them from `first` (the batches before a resume)."""
    shapes = _shapes(config)
    masked = workers.BatchMasks.OUTPUTS

    @tf.autograph.experimental.do_not_convert
    def mask(index, batch):
        values = tf.numpy_function(
            lambda *b: run("masks", *b),
            [index, batch["input_ids"], batch["input_mask"]],
            [tf.int32, tf.int32, tf.int32, tf.float32],
            stateful=False,
        )
        out = {**batch, **dict(zip(masked, values, strict=True))}
        batches = tf.fill([batch_size, 1], index + 1)
        out["stream_position"] = tf.concat([batches, batch["stream_position"][:, 1:]], 1)
        for name, value in out.items():
            value.set_shape((batch_size, *shapes[name]))
        return {name: out[name] for name in features}

    dataset = dataset.enumerate(start=first)
    return dataset.map(mask, num_parallel_calls=tf.data.AUTOTUNE)
