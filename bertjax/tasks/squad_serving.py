"""Task.serving of a SQuAD workdir: `question` and `context` in (tf.string [B]); `answer`
(tf.string [B]) and `score` (float32 [B]) out, as `bertjax.answer` answers, all in the
graph:

- the context is split into words at whitespace and each word into pieces, and the
  question's pieces are cut to max_query_length, as data_pipeline/finetune/squad_input.py
  does;
- windows over the context's pieces start doc_stride apart, one row each,
  `[CLS] question [SEP] window [SEP]`, and each piece has the window that gives it the
  most context (squad_input._best_windows' rule);
- a question's answer is its best span over all its windows, among each window's
  n_best_size best starts and ends: inside the window's context, at most
  max_answer_length pieces, starting in a piece the window gives its most context
  (squad.predict_answers' rule). SQuAD 2.0: "" when the null score beats the span's by
  more than null_score_diff_threshold;
- its text is the context's words the span covers, cut to the pieces as
  squad.final_text cuts them.

`score` is the answer's start and end logits summed: the span's, the null answer's when
that is the answer, 0 when no span fits. The ids signature returns the rows'
start_logits and end_logits.
"""

import tensorflow as tf
import tensorflow_text as tf_text

from bertjax.tasks import finetune
from bertjax.tasks.contract import Serving
from data_pipeline.finetune import squad_config
from data_pipeline.finetune.tagging_input import SPLIT_WHITESPACE
from data_pipeline.vocab import SENTENCEPIECE_WORD_START, WORDPIECE_PREFIX

# Where squad_input splits a context into words (its _WORD's complement).
_CONTEXT_SPACE = r"[ \t\r\n\x{202F}]+"


def serving(restored) -> Serving:
    config = squad_config.from_config(restored.task.data)
    length = restored.max_seq_length
    check_room(length, config)
    tokenizer = restored.tokenizer

    def forward(params, inputs: dict):
        model_inputs = (inputs[name] for name in finetune.MODEL_INPUTS)
        return restored.model.apply({"params": params}, *model_inputs, deterministic=True)

    def postprocess(logits, features) -> dict:
        if features is None:  # the ids signature
            return {"start_logits": logits[0], "end_logits": logits[1]}
        return _answers(logits, features, tokenizer, config)

    return Serving(
        texts=("question", "context"),
        preprocess=lambda texts: _windows(tokenizer, texts, config, length),
        inputs=dict.fromkeys(finetune.MODEL_INPUTS, "(r, l)"),
        length=length,
        forward=forward,
        postprocess=postprocess,
    )


def check_room(length: int, config) -> None:
    """A window must hold a piece of context after the longest question."""
    if length - config.max_query_length - 3 < 1:
        raise ValueError(
            f"{length} tokens leave no room for the context after a question of "
            f"max_query_length={config.max_query_length} and [CLS], [SEP], [SEP]"
        )


# ----------------------------------------------------------------------------- windows


def _windows(tokenizer, texts: dict, config, length: int) -> dict:
    """The rows of every question's windows, and what the answers are read back with."""
    vocab = tokenizer.vocab
    # regex_split stops reading at a NUL; U+0001 (one byte too) is dropped by the
    # tokenizer as NUL is, and the words themselves are cut from the context as it is.
    context = texts["context"]
    read, begin, end = tf_text.regex_split_with_offsets(
        tf.strings.regex_replace(context, r"\x00", "\x01"), _CONTEXT_SPACE
    )  # [B, (W)]
    words = read.with_flat_values(
        tf.strings.substr(
            tf.gather(context, read.value_rowids()), begin.flat_values,
            end.flat_values - begin.flat_values,
        )
    )  # fmt: skip
    pieces = tokenizer.tokenize(read.flat_values)  # [all words, (P)]
    doc = tf.RaggedTensor.from_row_lengths(pieces, words.row_lengths()).merge_dims(1, 2)
    token_to_word = tf.RaggedTensor.from_row_splits(
        tf.repeat(tf.ragged.range(words.row_lengths()).flat_values, pieces.row_lengths()),
        doc.row_splits,
    )
    query = tokenizer.tokenize(texts["question"])[:, : config.max_query_length]

    tokens, queries = doc.row_lengths(), query.row_lengths()
    room = length - queries - 3
    step = tf.minimum(room, config.doc_stride)
    count = tf.where(tokens <= room, tf.ones_like(tokens), 1 + (tokens - room + step - 1) // step)
    example = tf.repeat(tf.range(tf.size(count, tf.int64)), count)  # [R]
    window = tf.ragged.range(count).flat_values  # [R]: its number among its question's
    start = window * tf.gather(step, example)
    size = tf.minimum(tf.gather(tokens, example) - start, tf.gather(room, example))
    first_piece = tf.gather(doc.row_splits, example) + start
    window_pieces = tf.gather(doc.flat_values, tf.ragged.range(first_piece, first_piece + size))

    def column(token_id):
        return tf.RaggedTensor.from_tensor(tf.fill([tf.size(example), 1], token_id))

    row = [column(vocab.cls_id), tf.gather(query, example), column(vocab.sep_id)]
    row += [window_pieces, column(vocab.sep_id)]
    ids = tf.concat(row, axis=1)
    shape = [None, length]
    offset = tf.gather(queries, example) + 2  # where the window starts in the row
    position = tf.range(length, dtype=tf.int64)[None, :]
    return {
        "input_ids": ids.to_tensor(vocab.pad_id, shape=shape),
        "input_mask": tf.ones_like(ids).to_tensor(0, shape=shape),
        "segment_ids": tf.cast(position >= offset[:, None], tf.int32)
        * tf.ones_like(ids).to_tensor(0, shape=shape),
        "example": example,
        "start": start,
        "size": size,
        "offset": offset,
        "max_context": _max_context(
            start, size, offset, window, example, step, tokens, room, count, length
        ),  # fmt: skip
        "words": words,
        "token_to_word": token_to_word,
    }


def _max_context(start, size, offset, window, example, step, tokens, room, count, length):
    """bool [R, length]: the row's pieces whose most context is in its window: the highest
    min(pieces to the left, pieces to the right) + 0.01 * window size, the first window
    winning a tie (in float64, as squad_input computes it)."""
    # An empty batch's maximum is the lowest int64.
    windows = tf.range(tf.maximum(tf.reduce_max(count), 0))[None, :]  # [1, N]
    starts = windows * tf.gather(step, example)[:, None]  # [R, N]: the question's windows
    sizes = tf.minimum(
        tf.gather(tokens, example)[:, None] - starts, tf.gather(room, example)[:, None]
    )
    exists = windows < tf.gather(count, example)[:, None]
    piece = start[:, None] + tf.range(length, dtype=tf.int64)[None, :] - offset[:, None]  # [R, L]
    piece, starts, sizes = piece[:, :, None], starts[:, None, :], sizes[:, None, :]
    inside = (piece >= starts) & (piece < starts + sizes) & exists[:, None, :]
    score = tf.cast(tf.minimum(piece - starts, starts + sizes - 1 - piece), tf.float64)
    score = tf.where(inside, score + 0.01 * tf.cast(sizes, tf.float64), -float("inf"))
    best = tf.reduce_max(score, axis=2, keepdims=True)
    none = tf.constant(tf.int64.max, tf.int64)
    first_best = tf.reduce_min(tf.where(score == best, windows[:, None, :], none), axis=2)
    in_window = (piece[:, :, 0] >= start[:, None]) & (piece[:, :, 0] < (start + size)[:, None])
    return in_window & (first_best == window[:, None])


# ----------------------------------------------------------------------------- answers


def _answers(logits, features: dict, tokenizer, config) -> dict:
    start_logits, end_logits = (tf.cast(x, tf.float64) for x in logits)  # [R, W]
    width = tf.shape(start_logits)[1]
    mask = features["input_mask"][:, :width] > 0
    start_logits = tf.where(mask, start_logits, -float("inf"))
    end_logits = tf.where(mask, end_logits, -float("inf"))
    score, span = _best_spans(start_logits, end_logits, features, width, config)

    example = features["example"]
    examples = tf.shape(features["words"].row_splits, tf.int64)[0] - 1
    best = tf.math.unsorted_segment_max(score, example, examples)
    rows = tf.range(tf.size(example, tf.int64))
    chosen = tf.math.unsorted_segment_min(
        tf.where(score == tf.gather(best, example), rows, tf.constant(tf.int64.max)),
        example,
        examples,
    )
    # A segment's max starts from the lowest float, above -inf: count the spans instead.
    spans = tf.cast(score > -float("inf"), tf.int32)
    found = tf.math.unsorted_segment_max(spans, example, examples) > 0
    chosen = tf.where(found, chosen, 0)
    text = _span_text(tf.gather(span, chosen), chosen, found, features, tokenizer)
    answer = tf.where(found, text, "")
    score = tf.where(found, best, 0.0)
    if config.version_2_with_negative:
        null = tf.math.unsorted_segment_min(
            start_logits[:, 0] + end_logits[:, 0], example, examples
        )
        empty = ~found | (null - best > config.null_score_diff_threshold)
        answer = tf.where(empty, "", answer)
        score = tf.where(empty, null, score)
    return {"answer": answer, "score": tf.cast(score, tf.float32)}


def _best_spans(start_logits, end_logits, features, width, config):
    """Each row's best span ([R] score, -inf where none fits; [R, 2] start and end): among
    the n_best_size best starts and ends, the first of the highest in their order."""
    k = tf.minimum(config.n_best_size, width)
    start_top, starts = tf.math.top_k(start_logits, k)  # the lower position first in a tie
    end_top, ends = tf.math.top_k(end_logits, k)
    offset = tf.cast(features["offset"], tf.int32)[:, None, None]
    limit = offset + tf.cast(features["size"], tf.int32)[:, None, None]
    s, e = starts[:, :, None], ends[:, None, :]
    max_context = tf.gather(features["max_context"][:, :width], starts, batch_dims=1)
    ok = (
        (s >= offset) & (s < limit) & (e >= offset) & (e < limit) & max_context[:, :, None]
        & (e >= s) & (e - s + 1 <= config.max_answer_length)
    )  # fmt: skip
    score = tf.where(ok, start_top[:, :, None] + end_top[:, None, :], -float("inf"))
    score = tf.reshape(score, [tf.shape(score)[0], -1])
    best = tf.reduce_max(score, axis=1)
    pair = tf.reduce_min(tf.where(score == best[:, None], tf.range(k * k)[None, :], k * k), axis=1)
    pair = tf.minimum(pair, k * k - 1)
    span = tf.stack(
        [tf.gather(starts, pair // k, batch_dims=1), tf.gather(ends, pair % k, batch_dims=1)], 1
    )
    return best, span


def _span_text(span, row, found, features, tokenizer) -> tf.Tensor:
    """tf.string [B]: the context's text of each chosen span (squad.final_text); "" where
    none was `found`."""
    vocab = tokenizer.vocab
    ids = tf.gather(features["input_ids"], row)
    pieces = tf.ragged.range(span[:, 0], span[:, 1] + 1)
    tokens = tf.gather(tf.constant(list(vocab.tokens)), tf.gather(ids, pieces, batch_dims=1))
    predicted = _detokenized(tokens, vocab.kind)

    example = tf.gather(features["example"], row)
    piece = (
        tf.gather(features["start"], row)[:, None]
        + tf.cast(span, tf.int64)
        - tf.gather(features["offset"], row)[:, None]
    )  # [B, 2]: the first and last piece in the context
    word = tf.gather(features["token_to_word"], example).to_tensor()
    word = tf.pad(word, [[0, 0], [0, 1]])  # one column at least: contexts may have no word
    piece = tf.clip_by_value(piece, 0, tf.cast(tf.shape(word)[1] - 1, tf.int64))
    first, last = (tf.gather(word, piece[:, i], batch_dims=1) for i in (0, 1))
    last = tf.where(found, last, first - 1)  # no words
    words = tf.gather(features["words"], example)
    covered = tf.ragged.range(first, last + 1)
    chosen_words = tf.gather(words, covered, batch_dims=1)  # [B, (words)]
    original = tf.strings.reduce_join(chosen_words, axis=1, separator=" ")
    basic = tokenizer.words(chosen_words.flat_values)  # each word's tokenizer words
    basic = tf.RaggedTensor.from_row_lengths(basic, chosen_words.row_lengths()).merge_dims(1, 2)
    tokenized = tf.strings.reduce_join(basic, axis=1, separator=" ")
    return tf.map_fn(
        lambda texts: _final_text(*texts),
        (predicted, original, tokenized),
        fn_output_signature=tf.string,
    )


def _detokenized(tokens: tf.RaggedTensor, kind: str) -> tf.Tensor:
    """The pieces as one text, as squad's detokenizers rebuild it, whitespace collapsed."""
    if kind == "wordpiece":
        text = tf.strings.reduce_join(tokens, axis=1, separator=" ")
        text = tf.strings.regex_replace(text, " " + WORDPIECE_PREFIX, "")
        text = tf.strings.regex_replace(text, WORDPIECE_PREFIX, "")
    else:
        text = tf.strings.reduce_join(tokens, axis=1)
        text = tf.strings.regex_replace(text, SENTENCEPIECE_WORD_START, " ")
    words = tf_text.regex_split(text, SPLIT_WHITESPACE)
    return tf.strings.reduce_join(words, axis=1, separator=" ")


def _final_text(predicted, original, tokenized) -> tf.Tensor:
    """squad.final_text of one span, on scalars."""
    parts = tf.strings.split(tokenized, sep=predicted, maxsplit=1)
    spaces = 32
    original_chars = tf.strings.unicode_decode(original, "UTF-8")
    tokenized_chars = tf.strings.unicode_decode(tokenized, "UTF-8")
    original_kept = tf.where(original_chars != spaces)[:, 0]
    tokenized_kept = tf.where(tokenized_chars != spaces)[:, 0]
    usable = (
        (tf.strings.length(predicted) > 0)
        & (tf.size(parts) == 2)
        & (tf.size(original_kept) == tf.size(tokenized_kept))
    )

    def cut():
        start = tf.strings.length(parts[0], unit="UTF8_CHAR")
        end = start + tf.strings.length(predicted, unit="UTF8_CHAR") - 1
        rank = tf.searchsorted(tokenized_kept, tf.cast(tf.stack([start, end]), tf.int64))
        first, last = tf.unstack(tf.gather(original_kept, rank))
        return tf.strings.substr(original, first, last - first + 1, unit="UTF8_CHAR")

    return tf.cond(usable, cut, lambda: original)
