"""Tokenizes lines from stdin into JSON lines on stdout, as the training pipeline does.

    python -m data_pipeline.tokenize --vocab vocab.txt < text.txt
    echo "Hello, World!" | bertjax-tokenize --vocab tokenizer.json --cased

Each input line gives one output line {"ids": [...], "tokens": [...]}, without
[CLS]/[SEP]. --vocab is a vocab.txt or tokenizer.json (WordPiece) or a
sentencepiece *.model. Invalid UTF-8 bytes are replaced by U+FFFD (which the
WordPiece tokenizer drops, as the original BERT code drops undecodable bytes),
and their count is reported on stderr at the end.
"""

import json
import os
import sys

from absl import app, flags

from data_pipeline.vocab import VocabError, load_vocab

_VOCAB = flags.DEFINE_string(
    "vocab", None, "vocab.txt or tokenizer.json (WordPiece), or a sentencepiece .model file."
)
_CASED = flags.DEFINE_bool("cased", False, "Keep case and accents (a cased model).")
_MAX_CHARS_PER_WORD = flags.DEFINE_integer(
    "max_chars_per_word", 200, "WordPiece: a longer word becomes [UNK] (BERT: 200)."
)
_BATCH_LINES = flags.DEFINE_integer("batch_lines", 1000, "Lines tokenized together.")
flags.mark_flag_as_required("vocab")


def decode_line(data: bytes) -> tuple[str, int]:
    """UTF-8 bytes -> (text with U+FFFD for each invalid sequence, invalid byte count)."""
    try:
        return data.decode("utf-8"), 0
    except UnicodeDecodeError:
        pass
    parts, invalid = [], 0
    while data:
        try:
            parts.append(data.decode("utf-8"))
            break
        except UnicodeDecodeError as e:
            parts.append(data[: e.start].decode("utf-8"))
            parts.append("\ufffd")
            invalid += e.end - e.start
            data = data[e.end :]
    return "".join(parts), invalid


def _batches(stream, size: int):
    batch = []
    for line in stream:
        batch.append(line.removesuffix(b"\n"))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if _BATCH_LINES.value < 1:
        raise app.UsageError("--batch_lines must be at least 1")
    try:
        vocab = load_vocab(_VOCAB.value)
    except VocabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    # TensorFlow takes seconds to import and logs to stderr, so a bad --vocab is
    # reported before it loads.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from data_pipeline.tokenizer import SentencePieceTokenizer, WordPieceTokenizer

    try:
        if vocab.is_sentencepiece:
            tokenizer = SentencePieceTokenizer(vocab, lower_case=not _CASED.value)
        else:
            tokenizer = WordPieceTokenizer(
                vocab,
                lower_case=not _CASED.value,
                max_chars_per_word=_MAX_CHARS_PER_WORD.value,
            )
    except (VocabError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    tokenize = tf.function(tokenizer.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
    out = sys.stdout.buffer
    invalid_bytes = invalid_lines = 0
    try:
        for batch in _batches(sys.stdin.buffer, _BATCH_LINES.value):
            texts = []
            for data in batch:
                text, invalid = decode_line(data)
                texts.append(text)
                invalid_bytes += invalid
                invalid_lines += invalid > 0
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


def run():
    app.run(main)


if __name__ == "__main__":
    run()
