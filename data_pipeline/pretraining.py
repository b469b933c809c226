"""The online pretraining pipeline: documents in, masked fixed-shape batches out.

    documents (Python: files, TFDS or the built-in corpus; this host's shard)
      -> tokenize in graph (tf-text, parallel map)
      -> sentence pairs for NSP (instances.py; documents shuffled in a buffer)
      -> shuffle instances -> batch -> mask (masking.py; redrawn every pass)
      -> prefetch

Training streams forever, each pass over the corpus in a new order with new
pairs and new masks. Evaluation is one pass with pairs and masks drawn from
`config.eval_seed`, so an eval set is identical across runs whatever `seed`.
The batch schema is in schema.py.
"""

import random
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from data_pipeline import config as config_lib
from data_pipeline import corpus, instances, masking, schema, tfrecords
from data_pipeline.build_vocab import resolve_vocab_file
from data_pipeline.tokenizer import make_tokenizer
from data_pipeline.vocab import Vocab


def masking_spec(config: config_lib.DataConfig, vocab: Vocab) -> masking.MaskingSpec:
    return masking.MaskingSpec(
        max_predictions_per_seq=config.max_predictions_per_seq,
        masked_lm_prob=config.masked_lm_prob,
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


def make_pretraining_dataset(
    data_config: Any,
    *,
    split: str,
    batch_size: int,
    process_index: int = 0,
    process_count: int = 1,
    seed: int,
    stats: corpus.CorpusStats | None = None,
) -> tf.data.Dataset:
    """Batches of this host's share (`batch_size`) in the schema of schema.py.

    `stats`, when given, is updated with what the document readers saw (files,
    documents, invalid bytes, empty lines) as the dataset is iterated.
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
        )

    corpus.check_sources(config)
    tokenizer = make_tokenizer(config, resolve_vocab_file(config))
    corpus.check_two_documents(
        config, split=split, process_index=process_index, process_count=process_count
    )
    stream_seed = config.eval_seed if split == "eval" else seed
    seeds = np.random.SeedSequence([stream_seed, process_index, tfrecords.SPLITS.index(split)])
    pair_seed, shuffle_seed, mask_seed = (int(s) for s in seeds.generate_state(3))

    documents = _tokenized_documents(
        config, tokenizer, split, process_index, process_count, pair_seed, stats
    )
    dataset = _instances(config, documents, tokenizer.vocab, pair_seed)
    if split == "train":
        dataset = dataset.shuffle(config.shuffle_buffer_size, seed=shuffle_seed)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    dataset = _mask(config, dataset, tokenizer.vocab, mask_seed, batch_size)
    return dataset.prefetch(tf.data.AUTOTUNE)


# Documents tokenized together in one call: tf-text ops pay a fixed cost per
# call, so tokenizing document by document is several times slower.
DOCUMENTS_PER_TOKENIZER_CALL = 64


def _tokenized_documents(config, tokenizer, split, process_index, process_count, seed, stats):
    """Batches of documents: (doc ids, sentences per document, tokens, tokens per sentence)."""

    def generate():
        epoch = 0
        while True:
            shuffle_seed = None if split == "eval" else seed + epoch
            for document in corpus.iter_documents(
                config,
                split=split,
                process_index=process_index,
                process_count=process_count,
                shuffle_seed=shuffle_seed,
                stats=stats,
            ):
                yield document.doc_id, list(document.sentences)
            if split == "eval":
                return
            epoch += 1

    def tokenize(doc_ids, sentences):
        ids = tokenizer.tokenize(sentences.flat_values)
        return (
            doc_ids,
            tf.cast(sentences.row_lengths(), tf.int32),
            ids.flat_values,
            tf.cast(ids.row_lengths(), tf.int32),
        )

    documents = tf.data.Dataset.from_generator(
        generate, output_signature=(tf.TensorSpec([], tf.string), tf.TensorSpec([None], tf.string))
    )
    documents = documents.ragged_batch(DOCUMENTS_PER_TOKENIZER_CALL)
    return documents.map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)


def _instances(config, documents: tf.data.Dataset, vocab: Vocab, seed: int) -> tf.data.Dataset:
    """Packed, unmasked sentence pairs, one element per instance."""
    length = config.max_seq_length

    def generate():
        stream = (
            document
            for doc_ids, counts, values, lengths in documents.as_numpy_iterator()
            for document in split_documents([d.decode() for d in doc_ids], counts, values, lengths)
        )
        for batch in instances.instances_from_stream(
            stream,
            max_seq_length=length,
            short_seq_prob=config.short_seq_prob,
            random_next_prob=config.random_next_prob,
            buffer_size=config.document_buffer_size,
            rng=random.Random(seed),
        ):
            if batch:
                yield instances.pack_instances(
                    batch, max_seq_length=length, cls_id=vocab.cls_id, sep_id=vocab.sep_id
                )

    shapes = schema.feature_shapes(length, config.max_predictions_per_seq)
    packed = tf.data.Dataset.from_generator(
        generate,
        output_signature={
            name: tf.TensorSpec([None, *shapes[name]], tf.int32)
            for name in ("input_ids", "input_mask", "segment_ids", "next_sentence_labels")
        },
    )
    return packed.unbatch()


def split_documents(
    doc_ids: Sequence[str], sentence_counts: Sequence[int], values: np.ndarray, lengths: np.ndarray
) -> Iterator[tuple[str, list[list[int]]]]:
    """(doc_id, token ids per sentence) per document, from `values` (the tokens of all their
    sentences, tokenized at once) and `lengths` (tokens per sentence); sentences of no tokens go."""
    tokens, ends = values.tolist(), np.cumsum(lengths).tolist()
    lengths = np.asarray(lengths).tolist()
    sentence = 0
    for doc_id, count in zip(doc_ids, np.asarray(sentence_counts).tolist(), strict=True):
        sentences = range(sentence, sentence + count)
        yield doc_id, [tokens[ends[i] - lengths[i] : ends[i]] for i in sentences if lengths[i]]
        sentence += count


def _mask(config, dataset, vocab: Vocab, seed: int, batch_size: int) -> tf.data.Dataset:
    spec = masking_spec(config, vocab)
    shapes = schema.feature_shapes(config.max_seq_length, config.max_predictions_per_seq)
    masked = ("input_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights")

    def mask_numpy(index, input_ids, input_mask):
        # A batch's masks depend only on the seed and the batch's position in
        # the stream, so parallel masking stays deterministic.
        rng = np.random.default_rng([seed, int(index)])
        out = masking.mask_batch(input_ids, input_mask, spec, rng)
        return tuple(out[name] for name in masked)

    def mask(index, batch):
        values = tf.numpy_function(
            mask_numpy,
            [index, batch["input_ids"], batch["input_mask"]],
            [tf.int32, tf.int32, tf.int32, tf.float32],
            stateful=False,
        )
        features = {**batch, **dict(zip(masked, values, strict=True))}
        for name, value in features.items():
            value.set_shape((batch_size, *shapes[name]))
        return {name: features[name] for name in schema.FEATURES}

    return dataset.enumerate().map(mask, num_parallel_calls=tf.data.AUTOTUNE)
