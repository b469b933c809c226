"""Tokenizes lines from stdin into JSON lines on stdout, as the training pipeline does.

    python -m data_pipeline.tokenize_lines --vocab vocab.txt < text.txt
    echo "Hello, World!" | bertjax-tokenize --vocab tokenizer.json --cased

Each input line gives one output line {"ids": [...], "tokens": [...]}, without
[CLS]/[SEP]. --vocab is a vocab.txt or tokenizer.json (WordPiece), a sentencepiece
*.model, or a byte-level BPE tokenizer.json (ModernBERT's; its own normalizer decides
the case, --cased does not apply). Invalid UTF-8 bytes are replaced by U+FFFD (which the
WordPiece tokenizer drops, as the original BERT code drops undecodable bytes),
and their count is reported on stderr at the end.
"""

import itertools
import json
import os
import sys

from absl import flags

from data_pipeline import cli
from data_pipeline.vocab import load_vocab

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string(
        "vocab",
        None,
        "vocab.txt or tokenizer.json (WordPiece or byte-level BPE), or a sentencepiece .model.",
    )
    flags.DEFINE_bool("cased", False, "Keep case and accents (a cased model).")
    flags.DEFINE_integer(
        "max_chars_per_word",
        200,
        "WordPiece: a longer word becomes [UNK] (BERT: 200).",
        lower_bound=1,
    )
    flags.DEFINE_integer("batch_lines", 1000, "Lines tokenized together.", lower_bound=1)
    flags.mark_flag_as_required("vocab")


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


def main(argv):
    del argv  # cli.run refuses positional arguments
    vocab = load_vocab(FLAGS.vocab)
    # TensorFlow takes seconds to import and logs to stderr, so a bad --vocab is
    # reported before it loads.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from data_pipeline.tokenizer import BpeTokenizer, SentencePieceTokenizer, WordPieceTokenizer

    if vocab.kind == "bpe":
        tokenizer = BpeTokenizer(vocab, lower_case=None)
    elif vocab.is_sentencepiece:
        tokenizer = SentencePieceTokenizer(vocab, lower_case=not FLAGS.cased)
    else:
        tokenizer = WordPieceTokenizer(
            vocab, lower_case=not FLAGS.cased, max_chars_per_word=FLAGS.max_chars_per_word
        )
    tokenize = tf.function(tokenizer.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
    out = sys.stdout.buffer
    invalid_bytes = invalid_lines = 0
    try:
        for batch in _batches(sys.stdin.buffer, FLAGS.batch_lines):
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


def run():
    cli.run(main, define_flags)


if __name__ == "__main__":
    run()
