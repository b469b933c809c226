"""Tokenizes lines from stdin into JSON lines on stdout: python -m data_pipeline.tokenize_lines's work."""

import itertools
import json
import os
import sys

import tensorflow as tf

from data_pipeline.tokenizer import BpeTokenizer, SentencePieceTokenizer, WordPieceTokenizer
from data_pipeline.vocab import load_vocab


def decode_line(data: bytes) -> tuple[str, int]:
    """UTF-8 bytes -> (text with U+FFFD for each invalid sequence, invalid byte count)."""
    parts, invalid = [], 0
    while True:
        try:
            parts.append(data.decode("utf-8"))
            return "".join(parts), invalid
        except UnicodeDecodeError as e:
            parts += [data[: e.start].decode("utf-8"), "\ufffd"]
            invalid += e.end - e.start
            data = data[e.end :]


def _batches(stream, size: int):
    while batch := [line.removesuffix(b"\n") for line in itertools.islice(stream, size)]:
        yield batch


def main(args):
    vocab = load_vocab(args.vocab)
    # TensorFlow takes seconds to import and logs to stderr, so a bad --vocab is
    # reported before it loads.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if vocab.kind == "bpe":
        tokenizer = BpeTokenizer(vocab, lower_case=None)
    elif vocab.is_sentencepiece:
        tokenizer = SentencePieceTokenizer(vocab, lower_case=not args.cased)
    else:
        tokenizer = WordPieceTokenizer(
            vocab, lower_case=not args.cased, max_chars_per_word=args.max_chars_per_word
        )
    tokenize = tf.function(tokenizer.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
    out = sys.stdout.buffer
    invalid_bytes = invalid_lines = 0
    try:
        for batch in _batches(sys.stdin.buffer, args.batch_lines):
            texts, invalid = zip(*map(decode_line, batch), strict=True)
            invalid_bytes += sum(invalid)
            invalid_lines += sum(n > 0 for n in invalid)
            for ids in tokenize(tf.constant(texts)).to_list():
                record = {"ids": ids, "tokens": vocab.decode(ids)}
                out.write(json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n")
            out.flush()
    except BrokenPipeError:
        # The reader went away (`... | head`); stop quietly, as other filters do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if invalid_bytes:
        print(
            f"replaced {invalid_bytes} invalid UTF-8 byte(s) on {invalid_lines} line(s) by U+FFFD",
            file=sys.stderr,
        )
    return 0
