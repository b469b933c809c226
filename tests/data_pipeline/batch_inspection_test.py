"""The inspect command: decoded examples, statistics, the JSONL dump and one-line errors."""

import json
import os
import subprocess
import sys

import pytest
from support import REPO

from data_pipeline import batch_inspection, schema
from experiments.pretrain import tiny_cpu


@pytest.fixture
def dirty_corpus(tmp_path):
    """Documents with invalid UTF-8, NUL and control characters, and extra blank lines."""
    lines = []
    for d in range(12):
        lines += [
            f"Document {d} starts with an ordinary sentence about rivers.".encode(),
            b"Here are bad bytes \xff\xfe and a NUL \x00 and a bell \x07 in one line.",
            f"The third sentence of document {d} closes it.".encode(),
            b"",
            b"",
        ]
    path = tmp_path / "dirty.txt"
    path.write_bytes(b"\n".join(lines))
    return str(path)


def test_inspect_reports_statistics_and_dumps_every_example(
    tmp_path, dirty_corpus, bert_tokenizer_json, capsys
):
    config = tiny_cpu.get_config()
    config.data.update(
        source="text",
        text_files=dirty_corpus,
        vocab_file=bert_tokenizer_json,
        eval_fraction=0.0,
        document_buffer_size=4,
        shuffle_buffer_size=10,
    )
    dump = tmp_path / "out" / "examples.jsonl"
    result = batch_inspection.inspect(
        config, split="train", num_batches=3, batch_size=4, num_examples=2, dump=str(dump)
    )
    printed = capsys.readouterr().out
    assert "example 0:" in printed and "example 1:" in printed and "example 2:" not in printed
    assert "[MASK]{" in printed
    assert "invalid UTF-8 bytes" in printed and "control characters" in printed
    # Training reads ahead and repeats, so compare per document read: each has
    # two invalid bytes, a NUL and a bell, and one blank line beyond the separator.
    read = result["corpus"]
    assert read["documents_read"] >= 12
    assert read["invalid_bytes"] == 2 * read["documents_read"]
    assert read["control_characters"] == 2 * read["documents_read"]
    assert read["empty_lines_skipped"] >= read["documents_read"] - read["files_read"]
    assert result["batches"]["sequences"] == 12
    records = [json.loads(line) for line in dump.read_text(encoding="utf-8").splitlines()]
    assert len(records) == 12
    for record in records:
        assert set(record) == set(schema.FEATURES) | {"tokens"}
        assert len(record["input_ids"]) == 128
        assert record["tokens"][0] == "[CLS]"
        assert "\x00" not in " ".join(record["tokens"])


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "data_pipeline.inspect_batches", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )


@pytest.mark.integration
def test_cli_names_a_glob_that_matches_nothing(tmp_path):
    result = run_cli(
        "--config",
        "experiments/pretrain/tiny_cpu.py",
        "--config.data.source=text",
        f"--config.data.text_files={tmp_path}/missing-*.txt",
    )
    assert result.returncode == 2
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and "missing-*.txt" in error_lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.integration
def test_cli_names_a_bad_option():
    result = run_cli(
        "--config", "experiments/pretrain/tiny_cpu.py", "--config.data.max_seq_length=4"
    )
    assert result.returncode == 2
    assert "config.data.max_seq_length=4" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_sequence_longer_than_the_model_positions_is_refused(bert_tokenizer_json):
    from data_pipeline import config as config_lib

    config = tiny_cpu.get_config()
    config.data.vocab_file = bert_tokenizer_json
    config.model.max_position_embeddings = 64
    with pytest.raises(config_lib.ConfigError, match="max_position_embeddings=64"):
        batch_inspection.inspect(
            config, split="train", num_batches=1, batch_size=2, num_examples=0, dump=None
        )


def _peak_rss_mib(*args) -> float:
    """The peak resident memory of `python -m data_pipeline.inspect_batches ARGS`, in MiB:
    a parent of its own runs it, so that no other child of this process counts."""
    measure = (
        "import resource, subprocess, sys; "
        "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if code == 0 else -code)"
    )
    command = [sys.executable, "-m", "data_pipeline.inspect_batches", *args]
    result = subprocess.run(
        [sys.executable, "-c", measure, *command],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    kib = int(result.stdout.strip().splitlines()[-1])
    assert kib > 0, result.stderr[-3000:]
    return kib / 1024


@pytest.mark.integration
def test_a_5_mb_line_adds_less_than_64_mib_to_the_stream(tmp_path, small_vocab_file):
    # 100 documents; then the same with a 5 MB line of words in a document of its own.
    documents = [
        "\n".join(f"Sentence {s} of document {d} is about the river." for s in range(4))
        for d in range(100)
    ]
    small, large = tmp_path / "small", tmp_path / "large"
    for directory in (small, large):
        directory.mkdir()
        (directory / "corpus.txt").write_text("\n\n".join(documents) + "\n")
    line = " ".join(f"word{i}" for i in range(600_000))[:5_000_000]
    (large / "long.txt").write_text(f"A first sentence.\n{line}\nA last sentence.\n")

    def peak(directory):
        # Two epochs of the train split: every document is tokenized and paired.
        return _peak_rss_mib(
            "--config=experiments/pretrain/tiny_cpu.py",
            "--config.data.source=text",
            f"--config.data.text_files={directory}/*.txt",
            f"--config.data.vocab_file={small_vocab_file}",
            "--config.data.eval_fraction=0",
            "--num_batches=30",
            "--batch_size=16",
            "--num_examples=0",
        )

    without, with_line = peak(small), peak(large)
    print(f"\npeak RSS: {without:.0f} MiB, {with_line:.0f} MiB with a 5 MB line")
    assert with_line - without < 64, (without, with_line)
