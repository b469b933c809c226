"""`python -m data_pipeline.tokenize_lines`, run as a subprocess."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf
import tokenizers
from support import REPO
from support.bpe import modernbert_like

from data_pipeline.line_tokenizer import decode_line
from data_pipeline.tokenizer import WordPieceTokenizer
from data_pipeline.vocab import load_vocab


@pytest.fixture(scope="module")
def bert_json(bert_tokenizer_json):
    """bert-base-uncased's tokenizer.json (conftest.py unpacks it)."""
    return Path(bert_tokenizer_json)


def run_cli(*args, stdin=b""):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "data_pipeline.tokenize_lines", *args],
        input=stdin,
        capture_output=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )


def test_decode_line_replaces_and_counts():
    assert decode_line("café".encode()) == ("café", 0)
    assert decode_line(b"caf\xc3 \xff\xfex\xed\xa0\x80") == (
        "caf\ufffd \ufffd\ufffdx\ufffd\ufffd\ufffd",
        6,
    )
    assert decode_line(b"\xe2\x82") == ("\ufffd", 2)


@pytest.mark.command
def test_tokenizes_lines_like_the_library(bert_json):
    lines = ["Hello, World!", "", "café\u200dnaïve 中文", " \t", "x" * 201]
    stdin = "\n".join(lines).encode() + b"\ncaf\xc3 ok \xff\xfehello\n"
    result = run_cli("--vocab", str(bert_json), "--batch_lines", "2", stdin=stdin)
    assert result.returncode == 0, result.stderr.decode()
    records = [json.loads(line) for line in result.stdout.decode().splitlines()]
    vocab = load_vocab(str(bert_json))
    tokenizer = WordPieceTokenizer(vocab, lower_case=True)
    expected = tokenizer.tokenize(tf.constant(lines)).to_list()
    assert [r["ids"] for r in records[:-1]] == expected
    for record in records:
        assert record["tokens"] == vocab.decode(record["ids"])
    assert records[0]["tokens"] == ["hello", ",", "world", "!"]
    assert records[1] == {"ids": [], "tokens": []}
    assert records[-1]["tokens"] == ["caf", "ok", "hello"]
    assert "replaced 3 invalid UTF-8 byte(s) on 1 line(s)" in result.stderr.decode()


@pytest.mark.integration
def test_cased_max_chars_and_sentencepiece(bert_json, sentencepiece_model):
    result = run_cli(
        "--vocab", str(bert_json), "--cased", "--max_chars_per_word", "3", stdin=b"abc abcd Hi\n"
    )
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout)["tokens"] == ["abc", "[UNK]", "[UNK]"]
    assert b"invalid" not in result.stderr

    import sentencepiece

    result = run_cli("--vocab", sentencepiece_model, stdin=b"The Cat\n")
    assert result.returncode == 0, result.stderr.decode()
    processor = sentencepiece.SentencePieceProcessor(model_file=sentencepiece_model)
    assert json.loads(result.stdout)["ids"] == processor.encode("the cat")


@pytest.mark.integration
def test_a_byte_level_bpe_tokenizer_json(tmp_path):
    path = tmp_path / "tokenizer.json"
    modernbert_like().save(str(path))
    result = run_cli("--vocab", str(path), stdin=b"Hello, World!\n  two  spaces\n")
    assert result.returncode == 0, result.stderr.decode()
    records = [json.loads(line) for line in result.stdout.decode().splitlines()]
    oracle = tokenizers.Tokenizer.from_file(str(path))
    for record, line in zip(records, ["Hello, World!", "  two  spaces"], strict=True):
        assert record["ids"] == oracle.encode(line, add_special_tokens=False).ids


@pytest.mark.integration
def test_missing_vocab_is_one_line_and_exit_code_2(tmp_path):
    missing = tmp_path / "no_such_vocab.txt"
    result = run_cli("--vocab", str(missing), stdin=b"hello\n")
    assert result.returncode == 2
    stderr = result.stderr.decode()
    assert stderr.count("\n") == 1 and str(missing) in stderr
    assert "Traceback" not in stderr and result.stdout == b""
