"""The online pipeline end to end: schema, statistics, determinism, shards, bad input."""

import os

import numpy as np
import pytest

from data_pipeline import batch_statistics, corpus, masking, pretraining_input, schema
from data_pipeline import config as config_lib
from data_pipeline.vocab import load_vocab

YEARS = [str(year) for year in range(1901, 1961)]


@pytest.fixture
def bert_config(data_config, bert_tokenizer_json):
    data_config.vocab_file = bert_tokenizer_json
    data_config.shuffle_buffer_size = 500
    data_config.document_buffer_size = 100
    return data_config


@pytest.fixture
def year_corpus(tmp_path, bert_tokenizer_json):
    """60 documents in 4 files; document i mentions only the year YEARS[i]."""
    vocab = load_vocab(bert_tokenizer_json)
    assert all(year in vocab.tokens for year in YEARS)
    files = []
    for f in range(4):
        lines = []
        for i in range(f * 15, f * 15 + 15):
            year = YEARS[i]
            lines += [
                f"In {year} the town built a new bridge over the river.",
                f"The bridge of {year} was made of stone and iron.",
                f"People crossed it every day after {year} ended.",
                "",
            ]
        path = tmp_path / f"part{f}.txt"
        path.write_text("\n".join(lines), encoding="utf-8")
        files.append(path)
    return str(tmp_path / "part*.txt"), vocab


def take(dataset, count):
    return list(dataset.take(count).as_numpy_iterator())


def test_batches_follow_the_schema(bert_config):
    dataset = pretraining_input.make_pretraining_dataset(
        bert_config, split="train", batch_size=8, seed=0
    )
    batch = take(dataset, 1)[0]
    assert set(batch) == {*schema.FEATURES, "stream_position"}
    width = len(pretraining_input.POSITION_FIELDS)
    shapes = {**schema.feature_shapes(128, 20), "stream_position": (width,)}
    for name, value in batch.items():
        assert value.shape == (8, *shapes[name]), name
        if name in schema.FEATURES:
            assert value.dtype == schema.feature_dtype(name), name
    assert batch["stream_position"].dtype == np.int64
    # The element spec is static: jit needs fixed shapes.
    for name, spec in dataset.element_spec.items():
        assert spec.shape.as_list() == [8, *shapes[name]]
    evaluation = pretraining_input.make_pretraining_dataset(
        bert_config, split="eval", batch_size=8, seed=0
    )
    assert set(evaluation.element_spec) == set(schema.FEATURES)


def test_statistics_over_thousands_of_sequences(bert_config):
    vocab = load_vocab(bert_config.vocab_file)
    dataset = pretraining_input.make_pretraining_dataset(
        bert_config, split="train", batch_size=64, seed=1
    )
    stats = batch_statistics.BatchStatistics(128, 20)
    for batch in take(dataset, 50):
        stats.update(batch, vocab)
        ids, mask, segments = batch["input_ids"], batch["input_mask"], batch["segment_ids"]
        lengths = mask.sum(1)
        assert (ids[:, 0] == vocab.cls_id).all()
        # Exactly two [SEP]: the end of A and the end of B; segment 1 covers B [SEP].
        seps = (ids == vocab.sep_id) & (mask == 1)
        masked_sep = np.isin(batch["masked_lm_ids"], [vocab.sep_id]) & (
            batch["masked_lm_weights"] > 0
        )
        assert not masked_sep.any()
        assert (seps.sum(1) == 2).all()
        assert (ids[np.arange(len(ids)), lengths - 1] == vocab.sep_id).all()
        assert ((segments == 1) <= (mask == 1)).all()
        assert (ids[mask == 0] == 0).all()
    s = stats.summary()
    assert s["sequences"] == 3200
    assert s["specials_predicted"] == 0
    assert s["share_tokens_predicted"] == pytest.approx(0.15, abs=0.01)
    assert s["share_mask_token"] == pytest.approx(0.8, abs=0.02)
    assert s["share_random_token"] == pytest.approx(0.1, abs=0.015)
    assert s["share_unchanged"] == pytest.approx(0.1, abs=0.015)
    assert s["share_not_next"] == pytest.approx(0.5, abs=0.06)
    # Most sequences fill the length; a few aim short (short_seq_prob 0.1) or end a document.
    assert s["share_full_length"] > 0.5
    assert 0.03 < s["share_short"] < 0.35


@pytest.mark.slow
def test_same_seed_same_batches_and_eval_is_fixed(bert_config):
    def first(split, seed):
        dataset = pretraining_input.make_pretraining_dataset(
            bert_config, split=split, batch_size=16, seed=seed
        )
        return take(dataset, 3)

    a, b, c = first("train", 3), first("train", 3), first("train", 4)
    for x, y in zip(a, b, strict=True):
        for name in schema.FEATURES:
            np.testing.assert_array_equal(x[name], y[name])
    assert not np.array_equal(a[0]["input_ids"], c[0]["input_ids"])
    # Evaluation ignores the training seed: the eval set is the same in every run.
    e1, e2 = first("eval", 3), first("eval", 99)
    for x, y in zip(e1, e2, strict=True):
        for name in schema.FEATURES:
            np.testing.assert_array_equal(x[name], y[name])


def test_eval_is_one_finite_pass_of_held_out_documents(bert_config):
    bert_config.eval_fraction = 0.05
    held_out = list(corpus.iter_documents(config_lib.from_config(bert_config), split="eval"))
    assert held_out
    dataset = pretraining_input.make_pretraining_dataset(
        bert_config, split="eval", batch_size=4, seed=0
    )
    count = sum(1 for _ in dataset.as_numpy_iterator())
    assert count > 0
    assert count == sum(1 for _ in dataset.as_numpy_iterator())


def unmasked(batch):
    ids = batch["input_ids"].copy()
    rows, slots = np.nonzero(batch["masked_lm_weights"])
    ids[rows, batch["masked_lm_positions"][rows, slots]] = batch["masked_lm_ids"][rows, slots]
    return ids


def test_masks_are_redrawn_every_pass(year_corpus, bert_config):
    # Two-sentence documents and no NotNext: every pass makes the same pairs,
    # so only the masks can differ between passes.
    pattern, _ = year_corpus
    bert_config.update(
        source="text",
        text_files=pattern,
        eval_fraction=0.0,
        random_next_prob=0.0,
        short_seq_prob=0.0,
        max_seq_length=64,
        max_predictions_per_seq=10,
        shuffle_buffer_size=1,
    )
    dataset = pretraining_input.make_pretraining_dataset(
        bert_config, split="train", batch_size=10, seed=0
    )
    seen = {}
    redrawn = 0
    for batch in take(dataset, 60):
        for row, sequence in enumerate(unmasked(batch)):
            key = sequence.tobytes()
            positions = batch["masked_lm_positions"][row].tobytes()
            if key in seen:
                redrawn += seen[key] != positions
            seen[key] = positions
    assert redrawn > 20


def test_process_shards_are_disjoint(year_corpus, bert_config):
    pattern, vocab = year_corpus
    bert_config.update(source="text", text_files=pattern, eval_fraction=0.0)
    year_ids = {vocab.token_to_id(year) for year in YEARS}

    def years_of(process_index, process_count):
        dataset = pretraining_input.make_pretraining_dataset(
            bert_config,
            split="train",
            batch_size=8,
            seed=0,
            process_index=process_index,
            process_count=process_count,
        )
        found = set()
        for batch in take(dataset, 40):
            found |= set(np.unique(unmasked(batch))) & year_ids
        return found

    first, second = years_of(0, 2), years_of(1, 2)
    assert first and second
    assert not first & second
    assert first | second == years_of(0, 1) == year_ids


def test_single_document_corpus_is_refused_before_work(tmp_path, bert_config):
    path = tmp_path / "one.txt"
    path.write_text("Only one document here.\nIt has two sentences.\n", encoding="utf-8")
    bert_config.update(source="text", text_files=str(path), eval_fraction=0.0)
    with pytest.raises(corpus.CorpusError, match=f"{path}: 1 document; next-sentence"):
        pretraining_input.make_pretraining_dataset(bert_config, split="train", batch_size=2, seed=0)


@pytest.mark.parametrize("split", ["train", "eval"])
def test_an_empty_corpus_is_named_before_a_vocabulary_is_learned(tmp_path, bert_config, split):
    # Once, the learner ran first and said "the corpus has no words to learn a vocabulary
    # from"; with a vocabulary, the eval split said "has no documents" whatever eval_fraction.
    path = tmp_path / "empty.txt"
    path.write_bytes(b"")
    cache = tmp_path / "vocab_cache"
    for vocab_file in ("", bert_config.vocab_file):
        bert_config.update(
            source="text",
            text_files=str(path),
            eval_fraction=0.9,
            vocab_file=vocab_file,
            vocab_cache_dir=str(cache),
        )
        with pytest.raises(corpus.CorpusError) as raised:
            pretraining_input.make_pretraining_dataset(
                bert_config, split=split, batch_size=2, seed=0
            )
        assert str(raised.value).startswith(f"config.data.text_files: {path}: empty; ")
    assert not cache.exists()


def test_empty_eval_split_is_refused(year_corpus, bert_config):
    pattern, _ = year_corpus
    bert_config.update(source="text", text_files=pattern, eval_fraction=0.0)
    with pytest.raises(corpus.CorpusError, match="eval_fraction"):
        pretraining_input.make_pretraining_dataset(bert_config, split="eval", batch_size=2, seed=0)


@pytest.mark.parametrize(
    "option,value,match",
    [
        ("max_seq_length", 4, "max_seq_length"),
        ("max_predictions_per_seq", 0, "max_predictions_per_seq"),
        ("masked_lm_prob", 1.5, "masked_lm_prob"),
        ("source", "s3", "source"),
        ("max_sequences_per_row", 0, "max_sequences_per_row"),
    ],
)
def test_bad_options_name_the_option(bert_config, option, value, match):
    bert_config[option] = value
    with pytest.raises(config_lib.ConfigError, match=match):
        pretraining_input.make_pretraining_dataset(bert_config, split="train", batch_size=2, seed=0)


def test_unknown_option_is_refused(bert_config):
    bert_config.unlock()
    bert_config.max_seq_len = 128
    with pytest.raises(config_lib.ConfigError, match="config.data.max_seq_len"):
        pretraining_input.make_pretraining_dataset(bert_config, split="train", batch_size=2, seed=0)


def test_max_seq_length_above_model_positions():
    data = config_lib.from_config(config_lib.default_config()).replace(max_seq_length=1024)
    with pytest.raises(config_lib.ConfigError, match="max_position_embeddings=512"):
        config_lib.check_max_positions(data, 512)


def test_missing_glob_is_refused_before_work(tmp_path, bert_config):
    bert_config.update(source="text", text_files=str(tmp_path / "nothing-*.txt"))
    with pytest.raises(corpus.CorpusError, match="nothing-"):
        pretraining_input.make_pretraining_dataset(bert_config, split="train", batch_size=2, seed=0)


def test_whole_word_masking_in_the_pipeline(bert_config):
    bert_config.whole_word_mask = True
    vocab = load_vocab(bert_config.vocab_file)
    dataset = pretraining_input.make_pretraining_dataset(
        bert_config, split="train", batch_size=32, seed=0
    )
    for batch in take(dataset, 5):
        ids = unmasked(batch)
        for row in range(len(ids)):
            chosen = set(batch["masked_lm_positions"][row][batch["masked_lm_weights"][row] > 0])
            for position in chosen:
                # A masked "##" piece means the piece before it is masked too.
                if vocab.is_continuation[ids[row, position]] and position > 1:
                    previous = ids[row, position - 1]
                    if previous not in (vocab.cls_id, vocab.sep_id):
                        assert position - 1 in chosen


def test_megabyte_line_without_spaces_is_one_unknown_word(tmp_path, bert_config, year_corpus):
    pattern, vocab = year_corpus
    (tmp_path / "part9.txt").write_text(
        "A normal first sentence.\n" + "x" * 1_000_000 + "\nA normal last sentence.\n",
        encoding="utf-8",
    )
    bert_config.update(source="text", text_files=pattern, eval_fraction=0.0)
    dataset = pretraining_input.make_pretraining_dataset(
        bert_config, split="train", batch_size=16, seed=0
    )
    found_unk = False
    for batch in take(dataset, 20):
        ids = unmasked(batch)
        found_unk |= bool((ids == vocab.unk_id).any())
        assert batch["input_mask"].sum(1).max() <= 128
    assert found_unk


def test_the_benchmark_holds_the_pipeline_to_the_cores_it_measures(bert_config):
    from data_pipeline import throughput
    from data_pipeline.workers import shared_pool

    everywhere = os.sched_getaffinity(0)
    for workers in (0, 1):
        bert_config.num_workers = workers
        sequences, tokens, cores = throughput.online(
            bert_config, batch_size=8, seconds=0.2, cores=1, warmup_batches=1
        )
        assert sequences > 0 and tokens > sequences
        # CPU time, the workers' included, over wall time, on one core (give or take).
        assert 0 < cores <= 1.5
        assert os.sched_getaffinity(0) == everywhere
    for pid in shared_pool(1).pids:  # the workers are given every core back too
        assert os.sched_getaffinity(pid) == everywhere


def unpacked_sequences(batch):
    """Each sentence pair of a batch, packed or not, with its masked tokens put back:
    {(epoch, chunk): [(ids, segment ids, NSP label), ...]}, and each pair's (length,
    masked positions); every masked position must fall inside a pair, on a token of it."""
    ids = batch["input_ids"].copy()
    weights = batch["masked_lm_weights"] > 0
    rows = np.nonzero(weights)[0]
    ids[rows, batch["masked_lm_positions"][weights]] = batch["masked_lm_ids"][weights]
    packed = "cls_positions" in batch
    found, counts = {}, []
    for r in range(len(ids)):
        chunk = tuple(batch["stream_position"][r][[1, 2]].tolist())
        slots = np.flatnonzero(batch["next_sentence_weights"][r]) if packed else [0]
        for k in slots:
            where = np.flatnonzero(batch["input_mask"][r] == k + 1)
            start, end = where[0], where[-1] + 1
            assert where.size == end - start  # one contiguous span
            labels = batch["next_sentence_labels"][r]
            if packed:
                assert batch["cls_positions"][r, k] == start
                labels = labels[k]
            pair = (tuple(ids[r, start:end]), tuple(batch["segment_ids"][r, start:end]), labels)
            found.setdefault(chunk, []).append(pair)
            positions = batch["masked_lm_positions"][r][weights[r]]
            counts.append((end - start, ((positions >= start) & (positions < end)).sum()))
        assert (batch["input_mask"][r][batch["masked_lm_positions"][r][weights[r]]] > 0).all()
    return found, counts


def test_packed_rows_hold_each_chunks_pairs_whole_with_their_masks(year_corpus, bert_config):
    glob, vocab = year_corpus
    bert_config.update(source="text", text_files=glob, document_buffer_size=20, eval_fraction=0.0)
    spec = pretraining_input.masking_spec(config_lib.from_config(bert_config), vocab)

    def epoch_zero(pack):
        bert_config.pack_examples = pack
        dataset = pretraining_input.make_pretraining_dataset(
            bert_config, split="train", batch_size=4, seed=3
        )
        found, counts, rows = {}, [], 0
        for batch in dataset.as_numpy_iterator():
            if batch["stream_position"][0][1] > 0:
                return found, counts, rows
            pairs, batch_counts = unpacked_sequences(batch)
            for chunk, chunk_pairs in pairs.items():
                found.setdefault(chunk, []).extend(chunk_pairs)
            counts += batch_counts
            rows += len(batch["input_ids"])

    packed, packed_counts, packed_rows = epoch_zero(True)
    plain, plain_counts, plain_rows = epoch_zero(False)

    # The same pairs of each chunk (the tokens under each mask restored), labels and all.
    def whole_epoch(pairs):  # the batch that crosses into epoch 1 holds a part of its chunk
        return {chunk: sorted(p) for chunk, p in pairs.items() if chunk[0] == 0}

    assert set(whole_epoch(plain)) == {(0, 0), (0, 1), (0, 2)}
    assert whole_epoch(packed) == whole_epoch(plain)
    # In about half the rows; each pair has all the predictions it would have alone.
    assert packed_rows < 0.6 * plain_rows
    for counts in (packed_counts, plain_counts):
        lengths, masked = np.array(counts).T
        np.testing.assert_array_equal(masked, masking.num_to_predict(lengths, spec))
