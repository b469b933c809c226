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

from absl import flags

from data_pipeline import cli


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


def run() -> None:
    cli.run("data_pipeline.line_tokenizer:main", define_flags)


if __name__ == "__main__":
    run()
