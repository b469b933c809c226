"""The online stream resumes from a batch's stream_position, and an abandoned stream never
holds up the interpreter's exit."""

import gzip
import hashlib
import subprocess
import sys
import time

import numpy as np
import pytest
from support import REPO

from data_pipeline import corpus, pretraining_input, tfrecords

EPOCH = pretraining_input.POSITION_FIELDS.index("epoch")
CHUNK = pretraining_input.POSITION_FIELDS.index("chunk")
WORDS = ["river", "bridge", "stone", "iron", "town", "market", "school", "garden", "castle"]


def write_corpus(folder, files, documents_per_file):
    """Documents of 1 to 5 sentences; of several files, the last gzipped, no final newline."""
    for f in range(files):
        lines = []
        for d in range(documents_per_file):
            number = f * documents_per_file + d
            for s in range(1 + number % 5):
                lines.append(
                    f"Document {number} tells of the {WORDS[(number + s) % len(WORDS)]} {s}."
                )
            lines += ["", ""] if d % 4 == 0 else [""]
        text = "\n".join(lines).rstrip("\n")
        if f == files - 1 and files > 1:
            (folder / f"part{f}.txt.gz").write_bytes(gzip.compress(text.encode()))
        else:
            (folder / f"part{f}.txt").write_text(text + "\n", encoding="utf-8")
    return str(folder / "part*")


def digest(batch) -> str:
    return hashlib.sha256(b"".join(batch[k].tobytes() for k in sorted(batch))).hexdigest()


def cut_points(batches) -> dict[str, int]:
    """Batches to restart after: one ending inside a chunk, one at a chunk's end, one
    whose next batch starts or spans another epoch (when the stream reaches one)."""
    last = [b["stream_position"][-1] for b in batches]
    first = [b["stream_position"][0] for b in batches]
    cuts = {}
    for k in range(len(batches) - 1):
        same_chunk = (last[k][[EPOCH, CHUNK]] == first[k + 1][[EPOCH, CHUNK]]).all()
        cuts.setdefault("inside a chunk" if same_chunk else "at a chunk's end", k)
        if last[k][EPOCH] != last[k + 1][EPOCH]:
            cuts.setdefault("across an epoch's end", k)
    return cuts


def check_resumes(config, num_batches, *, epochs=True, batch_size=8, **shard):
    def read(position=None):
        return pretraining_input.make_pretraining_dataset(
            config, split="train", batch_size=batch_size, seed=5, position=position, **shard
        )

    full = list(read().take(num_batches).as_numpy_iterator())
    hashes = [digest(b) for b in full]
    cuts = cut_points(full)
    assert len(cuts) == (3 if epochs else 2), cuts
    for where, k in cuts.items():
        rest = read(full[k]["stream_position"][-1]).take(6).as_numpy_iterator()
        assert [digest(b) for b in rest] == hashes[k + 1 : k + 7], where
    return full


@pytest.mark.slow
@pytest.mark.parametrize(
    "files,process_index,process_count",
    [(3, 0, 1), (4, 1, 2), (1, 0, 2), (1, 1, 2)],
    ids=["one process", "by file", "by document 0", "by document 1"],
)
def test_text_files_resume_batch_for_batch(
    tmp_path, tiny_data_config_all_train, files, process_index, process_count
):
    tiny_data_config_all_train.update(
        source="text", text_files=write_corpus(tmp_path, files, 60 // files)
    )
    full = check_resumes(
        tiny_data_config_all_train, 40, process_index=process_index, process_count=process_count
    )
    # The batches are counted, and batch k's masks drawn from k's seed, across resumes too.
    assert [b["stream_position"][0][0] for b in full] == list(range(1, 41))


@pytest.mark.parametrize("process_index,process_count", [(0, 1), (1, 2)])
def test_builtin_corpus_resumes_batch_for_batch(
    tiny_data_config_all_train, process_index, process_count
):
    # Long documents: chunks of 2 and single-row batches, for a batch that ends a chunk.
    tiny_data_config_all_train.update(eval_fraction=0.1, document_buffer_size=2)
    shard = {"process_index": process_index, "process_count": process_count}
    check_resumes(tiny_data_config_all_train, 60, epochs=False, batch_size=1, **shard)


@pytest.mark.slow
def test_a_packed_stream_resumes_batch_for_batch(tmp_path, tiny_data_config_all_train):
    # Rows of up to 3 pairs, packed within each chunk: a position counts the chunk's rows.
    corpus_files = write_corpus(tmp_path, 2, 30)
    tiny_data_config_all_train.update(
        source="text",
        text_files=corpus_files,
        max_seq_length=64,
        max_predictions_per_seq=10,
        short_seq_prob=1.0,
        pack_examples=True,
    )
    full = check_resumes(tiny_data_config_all_train, 40, batch_size=4)
    pairs = np.array([b["next_sentence_weights"].sum(axis=1) for b in full])
    assert pairs.max() == 3 and pairs.mean() > 1.5
    assert [b["stream_position"][0][0] for b in full] == list(range(1, 41))


@pytest.mark.slow
def test_a_late_start_reads_about_one_chunk(tmp_path, tiny_data_config_all_train):
    tiny_data_config_all_train.update(
        source="text", text_files=write_corpus(tmp_path, 4, 100), document_buffer_size=16
    )

    def first_batch(position=None):
        """The stream's first batch, and the documents read by then."""
        stats = corpus.CorpusStats()
        dataset = pretraining_input.make_pretraining_dataset(
            tiny_data_config_all_train,
            split="train",
            batch_size=32,
            seed=0,
            stats=stats,
            position=position,
        )
        return next(dataset.as_numpy_iterator()), stats.documents_read

    stats = corpus.CorpusStats()
    dataset = pretraining_input.make_pretraining_dataset(
        tiny_data_config_all_train, split="train", batch_size=32, seed=0, stats=stats
    )
    for batch in dataset.as_numpy_iterator():
        if batch["stream_position"][-1][[EPOCH, CHUNK]].tolist() == [3, 5]:
            break
    late = batch["stream_position"][-1]
    assert stats.documents_read > 1200  # three epochs of 400 documents
    # The chunk's 16 documents, a peek, and the chunks that tf.data reads ahead.
    _, read_at_start = first_batch()
    resumed, read_late = first_batch(late)
    assert resumed["stream_position"][0][0] == late[0] + 1
    assert read_late < 600 and read_at_start < 600, (read_late, read_at_start)


def test_bad_positions_name_the_problem(tmp_path, tiny_data_config_all_train):
    tiny_data_config_all_train.update(
        source="text", text_files=write_corpus(tmp_path, 2, 10), eval_fraction=0.2
    )

    def resume(position, split="train"):
        return pretraining_input.make_pretraining_dataset(
            tiny_data_config_all_train, split=split, batch_size=4, seed=0, position=position
        )

    good = next(resume(None).as_numpy_iterator())["stream_position"][-1]
    with pytest.raises(tfrecords.PositionError, match="8 integers"):
        resume(good[:2])
    with pytest.raises(tfrecords.PositionError, match="8 integers"):
        resume(good.astype(np.float32))
    with pytest.raises(tfrecords.PositionError, match="negative"):
        resume(np.where(np.arange(8) == 7, -1, good))
    with pytest.raises(tfrecords.PositionError, match="eval split"):
        resume(good, split="eval")
    with pytest.raises(tfrecords.PositionError, match="chunk 0, and only chunk 0"):
        resume([0, 0, 0, 0, 5, 1, 1, 0])
    with pytest.raises(tfrecords.PositionError, match="epoch 1 has no chunk 3"):
        resume([0, 1, 3, 7, 0, 0, 12, 0])  # there are 2 files, not 8
    with pytest.raises(corpus.CorpusError, match="byte offset 5 is not the start of a line"):
        resume([0, 0, 1, 0, 5, 1, 1, 0])


EXIT_SCRIPT = """
import time
from data_pipeline import config, pretraining_input

data = config.default_config()
data.update(vocab_file={vocab!r}, max_seq_length=64, max_predictions_per_seq=10)
data.num_workers = {workers}
dataset = pretraining_input.make_pretraining_dataset(data, split="train", batch_size=64, seed=0)
batches = dataset.as_numpy_iterator()
for count, batch in enumerate(batches, 1):
    if count == {count}:
        break
if {delete}:
    del batches, batch
print("read", count, "batches at", time.time(), flush=True)
"""


@pytest.mark.integration
@pytest.mark.parametrize(
    "count,delete,workers",
    [(300, False, 0), (3, False, 0), (3, True, 0), (3, False, 2)],
    ids=["300", "break", "del", "break-workers"],
)
def test_an_abandoned_stream_does_not_hold_up_exit(bert_tokenizer_json, count, delete, workers):
    script = EXIT_SCRIPT.format(
        vocab=bert_tokenizer_json, count=count, delete=delete, workers=workers
    )
    # Before the fix the interpreter hung at exit in about half the runs, forever.
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    ended = time.time()
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith(f"read {count} batches at ")
    assert ended - float(result.stdout.split()[-1]) < 10
