"""The offline writer: statistics of what it writes, static masking, determinism, the CLI."""

import json
import os
import pathlib
import random
import subprocess
import sys

import numpy as np
import pytest
from support import REPO

from data_pipeline import config as config_lib
from data_pipeline import corpus, tfrecords
from data_pipeline import offline_writer as writer
from data_pipeline.vocab import load_vocab

# Words of the bert-base-uncased vocabulary, each one token.
VOCABULARY_WORDS = (
    "the river town bridge stone iron people day night city road house water field tree "
    "garden window door market school church king queen ship harbor winter summer morning "
    "evening letter friend mother father child book paper light fire wind rain snow hill"
)


def base_config(vocab_file, **changes):
    return config_lib.from_config(config_lib.default_config()).replace(
        vocab_file=vocab_file, **changes
    )


def read_split(output_dir, split, config):
    """Every instance of a split, in file order, as one batch in the schema."""
    metadata = json.loads((pathlib.Path(output_dir) / f"{split}-metadata.json").read_text())
    files = os.path.join(output_dir, f"{split}-*.tfrecord")
    read_config = config.replace(
        source="tfrecord", tfrecord_train_files=files, tfrecord_eval_files=files
    )
    dataset = tfrecords.read_pretraining_dataset(
        read_config, split="eval", batch_size=metadata["instances"], seed=0
    )
    return next(dataset.as_numpy_iterator()), metadata


def write_text_corpus(folder, *, num_files, docs_per_file, sentences=(2, 6), words=(6, 14), seed=0):
    rng = random.Random(seed)
    words_list = VOCABULARY_WORDS.split()
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(num_files):
        documents = []
        for d in range(docs_per_file):
            count = rng.randint(*sentences)
            lines = [
                " ".join(rng.choices(words_list, k=rng.randint(*words))).capitalize()
                + f" number {f} {d} {s}."
                for s in range(count)
            ]
            documents.append("\n".join(lines))
        (folder / f"part-{f}.txt").write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    return str(folder / "part-*.txt")


def unmasked(batch):
    """input_ids with the original tokens put back at the predicted positions."""
    ids = batch["input_ids"].copy()
    real = batch["masked_lm_weights"] > 0
    rows = np.nonzero(real)[0]
    ids[rows, batch["masked_lm_positions"][real]] = batch["masked_lm_ids"][real]
    return ids


# --------------------------------------------------------------------------- the builtin corpus


@pytest.fixture(scope="module")
def builtin_output(tmp_path_factory, bert_tokenizer_json):
    """The built-in corpus, dupe_factor 2 (a few thousand instances), and again without short passes."""
    outputs = {}
    for short_seq_prob in (0.1, 0.0):
        config = base_config(bert_tokenizer_json, dupe_factor=2, short_seq_prob=short_seq_prob)
        output_dir = tmp_path_factory.mktemp(f"builtin-{short_seq_prob}")
        result = writer.write_pretraining_data(config, str(output_dir), seed=0)
        outputs[short_seq_prob] = (config, output_dir, result)
    return outputs


def test_builtin_statistics_follow_the_original_rules(builtin_output, bert_tokenizer_json):
    config, output_dir, result = builtin_output[0.1]
    vocab = load_vocab(bert_tokenizer_json)
    batch, metadata = read_split(output_dir, "train", config)
    assert metadata["instances"] == result["splits"]["train"]["instances"] > 3000
    ids, mask, segments = batch["input_ids"], batch["input_mask"], batch["segment_ids"]
    weights = batch["masked_lm_weights"] > 0
    positions, labels = batch["masked_lm_positions"], batch["masked_lm_ids"]
    lengths = mask.sum(1)

    # Layout: [CLS] A [SEP] B [SEP], segment 1 on B [SEP], zeros after the end.
    rows = np.arange(len(ids))
    assert (ids[:, 0] == vocab.cls_id).all()
    original = unmasked(batch)
    assert ((original == vocab.sep_id) & (mask == 1)).sum(1).tolist() == [2] * len(ids)
    assert (original[rows, lengths - 1] == vocab.sep_id).all()
    assert (ids[mask == 0] == 0).all() and (segments[mask == 0] == 0).all()
    assert (segments[:, 0] == 0).all() and (segments[rows, lengths - 1] == 1).all()

    # Exactly num_to_predict = min(P, max(1, round(n * 0.15))) predictions, n counting specials.
    wanted = np.minimum(20, np.maximum(1, np.rint(lengths * 0.15))).astype(int)
    np.testing.assert_array_equal(weights.sum(1), wanted)
    assert weights.sum() / lengths.sum() == pytest.approx(0.15, abs=0.005)
    # Weights are 1s then 0s; positions sorted, distinct, zero-padded.
    assert (np.diff(weights.astype(int), axis=1) <= 0).all()
    assert (positions[~weights] == 0).all() and (labels[~weights] == 0).all()
    real_positions = np.where(weights, positions, np.iinfo(np.int32).max)
    assert (np.diff(real_positions, axis=1)[weights[:, 1:]] > 0).all()
    assert (positions[weights] < np.repeat(lengths, weights.sum(1))).all()

    # Specials are never predicted.
    assert not np.isin(labels[weights], [vocab.cls_id, vocab.sep_id, vocab.pad_id]).any()
    assert (positions[weights] > 0).all()

    # 80% [MASK], 10% random non-special token, 10% unchanged.
    now = ids[np.nonzero(weights)[0], positions[weights]]
    was = labels[weights]
    as_mask = now == vocab.mask_id
    as_same = now == was
    as_random = ~as_mask & ~as_same
    assert weights.sum() > 10_000
    assert as_mask.mean() == pytest.approx(0.8, abs=0.02)
    assert as_same.mean() == pytest.approx(0.1, abs=0.015)
    assert as_random.mean() == pytest.approx(0.1, abs=0.015)
    assert not vocab.is_special[now[as_random]].any()

    # NotNext: half the time, plus the chunks of a single sentence that must take it.
    assert 0.5 <= batch["next_sentence_labels"].mean() <= 0.62


def test_short_sequence_passes(builtin_output):
    """Short targets (short_seq_prob 0.1) add about a tenth more sequences under half length."""
    shares = {}
    for short_seq_prob, (config, output_dir, _) in builtin_output.items():
        batch, _ = read_split(output_dir, "train", config)
        shares[short_seq_prob] = (batch["input_mask"].sum(1) < 64).mean()
    assert 0.05 <= shares[0.1] - shares[0.0] <= 0.2


def test_eval_split_is_one_pass_masked_from_eval_seed(builtin_output, tmp_path):
    config, output_dir, result = builtin_output[0.1]
    metadata = result["splits"]["eval"]
    assert metadata["passes_per_document"] == 1 and metadata["seed"] == config.eval_seed
    assert metadata["documents"] > 0
    assert 0 < metadata["instances"] < result["splits"]["train"]["instances"] / 10
    # A different training seed leaves the eval split byte for byte the same.
    again = writer.write_pretraining_data(config, str(tmp_path), seed=5)
    assert again["splits"]["eval"]["instances"] == metadata["instances"]
    assert (tmp_path / "eval-000-000.tfrecord").read_bytes() == (
        output_dir / "eval-000-000.tfrecord"
    ).read_bytes()
    assert (tmp_path / "train-000-000.tfrecord").read_bytes() != (
        output_dir / "train-000-000.tfrecord"
    ).read_bytes()


def test_metadata_and_vocab_copy(builtin_output, bert_tokenizer_json):
    config, output_dir, result = builtin_output[0.1]
    metadata = json.loads((output_dir / "train-metadata.json").read_text())
    assert metadata["instances_per_shard"] == {"train-000-000.tfrecord": metadata["instances"]}
    assert metadata["passes_per_document"] == 2
    assert metadata["config"]["max_seq_length"] == 128
    assert metadata["corpus"]["documents_read"] > 0
    assert (output_dir / metadata["vocab_file"]).read_bytes() == pathlib.Path(
        bert_tokenizer_json
    ).read_bytes()
    assert result["instances"] == sum(s["instances"] for s in result["splits"].values())
    assert not [p for p in os.listdir(output_dir) if p.startswith(".")], "temporary files left"


# --------------------------------------------------------------------------- static masking


def test_dupe_factor_writes_differently_masked_copies(tmp_path, bert_tokenizer_json):
    # Two-sentence documents, always IsNext, never short: every pass gives the same pair.
    files = write_text_corpus(
        tmp_path / "corpus", num_files=1, docs_per_file=12, sentences=(2, 2), words=(12, 16)
    )
    config = base_config(
        bert_tokenizer_json,
        source="text",
        text_files=files,
        eval_fraction=0.0,
        random_next_prob=0.0,
        short_seq_prob=0.0,
        dupe_factor=4,
    )
    result = writer.write_pretraining_data(config, str(tmp_path / "out"), seed=0)
    assert list(result["splits"]) == ["train"]  # eval_fraction 0: no eval split
    batch, _ = read_split(tmp_path / "out", "train", config)
    assert len(batch["input_ids"]) == 12 * 4
    copies = {}
    for row, original in enumerate(unmasked(batch)):
        copies.setdefault(original.tobytes(), []).append(row)
    assert sorted(len(rows) for rows in copies.values()) == [4] * 12
    for rows in copies.values():
        maskings = {
            (batch["input_ids"][r].tobytes(), batch["masked_lm_positions"][r].tobytes())
            for r in rows
        }
        assert len(maskings) == 4


# --------------------------------------------------------------------------- determinism, processes


@pytest.fixture
def small_corpus(tmp_path, bert_tokenizer_json):
    files = write_text_corpus(tmp_path / "corpus", num_files=3, docs_per_file=16)
    return base_config(
        bert_tokenizer_json, source="text", text_files=files, eval_fraction=0.3, dupe_factor=2
    )


def tree(folder):
    return {p.name: p.read_bytes() for p in sorted(pathlib.Path(folder).glob("*.tfrecord"))}


def test_output_does_not_depend_on_which_process_writes(small_corpus, tmp_path, monkeypatch):
    here = writer.write_pretraining_data(
        small_corpus, str(tmp_path / "here"), num_workers=2, num_shards_per_worker=2, seed=3
    )
    monkeypatch.setattr(writer, "_THIS_PROCESS_WRITES", False)
    spawned = writer.write_pretraining_data(
        small_corpus, str(tmp_path / "spawned"), num_workers=2, num_shards_per_worker=2, seed=3
    )
    assert here["instances"] == spawned["instances"] > 0
    files = tree(tmp_path / "here")
    assert sorted(files) == [
        f"{split}-{w:03d}-{k:03d}.tfrecord"
        for split in ("eval", "train")
        for w in (0, 1)
        for k in (0, 1)
    ]
    assert files == tree(tmp_path / "spawned")


def test_same_seed_same_bytes_other_seed_other_bytes(small_corpus, tmp_path):
    first = tree_of_run(small_corpus, tmp_path / "a", seed=0)
    assert first == tree_of_run(small_corpus, tmp_path / "b", seed=0)
    other = tree_of_run(small_corpus, tmp_path / "c", seed=1)
    assert other["train-000-000.tfrecord"] != first["train-000-000.tfrecord"]
    assert other["eval-000-000.tfrecord"] == first["eval-000-000.tfrecord"]


def tree_of_run(config, folder, *, seed):
    writer.write_pretraining_data(config, str(folder), num_workers=2, seed=seed)
    return tree(folder)


def test_workers_split_the_documents(small_corpus, tmp_path):
    one = writer.write_pretraining_data(small_corpus, str(tmp_path / "one"), seed=0)
    two = writer.write_pretraining_data(small_corpus, str(tmp_path / "two"), num_workers=2, seed=0)
    for split in ("train", "eval"):
        assert two["splits"][split]["documents"] == one["splits"][split]["documents"]
    shards = two["splits"]["train"]["instances_per_shard"]
    assert set(shards) == {"train-000-000.tfrecord", "train-001-000.tfrecord"}
    assert all(count > 0 for count in shards.values())


# --------------------------------------------------------------------------- errors before work


def test_existing_output_is_refused_unless_overwrite(small_corpus, tmp_path):
    out = tmp_path / "out"
    writer.write_pretraining_data(small_corpus, str(out), num_workers=2, seed=0)
    with pytest.raises(writer.WriterError, match="already holds train data.*--overwrite"):
        writer.write_pretraining_data(small_corpus, str(out), seed=0)
    # --overwrite with one worker leaves no shard of the two-worker run behind.
    writer.write_pretraining_data(small_corpus, str(out), seed=0, overwrite=True)
    assert sorted(tree(out)) == ["eval-000-000.tfrecord", "train-000-000.tfrecord"]


@pytest.mark.parametrize(
    "changes,error,match",
    [
        (
            {"source": "tfrecord", "tfrecord_train_files": "x"},
            config_lib.ConfigError,
            "source='tfrecord'",
        ),
        ({"text_files": "/nonexistent/corpus.txt"}, corpus.CorpusError, "/nonexistent/corpus.txt"),
        ({"vocab_file": "/nonexistent/vocab.txt"}, Exception, "/nonexistent/vocab.txt"),
        ({"eval_fraction": 0.001}, corpus.CorpusError, "eval split .* no documents"),
    ],
    ids=["tfrecord-source", "missing-text-file", "missing-vocab", "empty-eval-split"],
)
def test_bad_input_fails_before_any_output(small_corpus, tmp_path, changes, error, match):
    out = tmp_path / "out"
    with pytest.raises(error, match=match):
        writer.write_pretraining_data(small_corpus.replace(**changes), str(out), seed=0)
    assert not out.exists() or not list(out.iterdir())


def test_too_many_workers_for_the_documents(small_corpus, tmp_path):
    with pytest.raises(
        corpus.CorpusError,
        match=r"split of worker \d+ of 40 has .*\(use fewer --num_workers",
    ):
        writer.write_pretraining_data(small_corpus, str(tmp_path / "out"), num_workers=40, seed=0)


# --------------------------------------------------------------------------- command line


def run_cli(*args):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, "-m", "data_pipeline.create_pretraining_data", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.command
def test_cli_writes_shards_with_two_workers(tmp_path, bert_tokenizer_json):
    files = write_text_corpus(tmp_path / "corpus", num_files=3, docs_per_file=16)
    out = tmp_path / "out"
    process = run_cli(
        "--config",
        str(REPO / "experiments/pretrain/tiny_cpu.py"),
        "--output_dir",
        str(out),
        "--num_workers",
        "2",
        "--num_shards_per_worker",
        "2",
        "--config.data.source=text",
        f"--config.data.text_files={files}",
        f"--config.data.vocab_file={bert_tokenizer_json}",
        "--config.data.eval_fraction=0.3",
        "--config.data.dupe_factor=2",
    )
    assert process.returncode == 0, process.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(
        [f"{s}-{w:03d}-{k:03d}.tfrecord" for s in ("train", "eval") for w in (0, 1) for k in (0, 1)]
        + ["train-metadata.json", "eval-metadata.json", "tokenizer.json"]
    )
    config = base_config(str(out / "tokenizer.json"))
    for split in ("train", "eval"):
        batch, metadata = read_split(out, split, config)
        assert len(batch["input_ids"]) == metadata["instances"] > 0
        assert metadata["num_workers"] == 2
    assert "instances" in process.stdout


@pytest.mark.integration
def test_cli_error_is_one_line_without_traceback(tmp_path):
    missing = tmp_path / "missing.txt"
    process = run_cli(
        "--config",
        str(REPO / "experiments/pretrain/tiny_cpu.py"),
        "--output_dir",
        str(tmp_path / "out"),
        "--config.data.source=text",
        f"--config.data.text_files={missing}",
    )
    assert process.returncode == 2
    assert "Traceback" not in process.stderr
    # TensorFlow's own start-up lines aside, the error is one line that names the file.
    errors = [line for line in process.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and str(missing) in errors[0], process.stderr
    assert not (tmp_path / "out").exists()


def test_a_failed_run_leaves_no_partial_files(small_corpus, tmp_path, monkeypatch):
    def fail(features):
        raise RuntimeError("disk full")

    monkeypatch.setattr(tfrecords, "encode_examples", fail)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="disk full"):
        writer.write_pretraining_data(small_corpus, str(out), seed=0)
    assert not [p.name for p in out.iterdir() if p.name.startswith(".") or "tfrecord" in p.name]
    assert not list(out.glob("*-metadata.json"))
