import os
import random
import string
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from support import REPO

from data_pipeline import corpus, tokenizer, vocab, vocab_learning
from data_pipeline.config import from_config

FREQUENT = ("river", "stone", "garden", "lantern", "window", "morning", "quiet", "yellow")


def _random_word(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(4, 9)))


def _write_corpus(path, *, documents=40, sentences=8, seed=0) -> str:
    """BERT's text format: frequent words mixed with ever-new random ones."""
    rng = random.Random(seed)
    lines = []
    for _ in range(documents):
        for _ in range(sentences):
            words = [rng.choice(FREQUENT) if rng.random() < 0.6 else _random_word(rng)]
            words += [rng.choice(FREQUENT) if rng.random() < 0.6 else _random_word(rng)]
            words += [rng.choice(FREQUENT) for _ in range(4)]
            lines.append(" ".join(words).capitalize() + ".")
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")
    return str(path)


def _text_config(data_config, text_file, **changes):
    data_config.source = "text"
    data_config.text_files = text_file
    data_config.eval_fraction = 0.0
    for key, value in changes.items():
        data_config[key] = value
    return from_config(data_config)


def _check_layout(v: vocab.Vocab, size: int):
    assert v.tokens[:5] == vocab.SPECIAL_TOKENS
    assert (v.pad_id, v.unk_id, v.cls_id, v.sep_id, v.mask_id) == (0, 1, 2, 3, 4)
    assert len(v.tokens) == size
    assert len(set(v.tokens)) == size


def test_word_counter_stays_within_its_bound_and_keeps_frequent_words():
    rng = random.Random(1)
    counter = vocab_learning.WordCounter(max_words=50)
    for _ in range(200):
        batch = [rng.choice(FREQUENT) for _ in range(20)] + [_random_word(rng) for _ in range(20)]
        counter.add([w.encode() for w in batch])
        assert len(counter.counts) <= 50
    assert counter.peak_size <= 50
    assert counter.prunings > 0
    assert counter.total_words == 200 * 40
    top = sorted(counter.counts, key=counter.counts.get, reverse=True)[: len(FREQUENT)]
    assert sorted(w.decode() for w in top) == sorted(FREQUENT)
    # Frequent words are never dropped, so their counts are exact.
    assert sum(counter.counts[w.encode()] for w in FREQUENT) == 200 * 20


def test_wordpiece_tokens_have_exactly_vocab_size_entries_and_the_alphabet():
    rng = random.Random(2)
    counts = {_random_word(rng): rng.randint(1, 50) for _ in range(3000)}
    tokens = vocab_learning.wordpiece_tokens(counts, 300)
    assert tokens[:5] == list(vocab.SPECIAL_TOKENS)
    assert len(tokens) == len(set(tokens)) == 300
    for letter in string.ascii_lowercase:
        assert letter in tokens and "##" + letter in tokens


def test_a_small_corpus_is_filled_with_placeholders(tmp_path):
    tokens = vocab_learning.wordpiece_tokens({"ab": 5, "abc": 3, "b": 2}, 100)
    assert len(tokens) == len(set(tokens)) == 100
    learned = [t for t in tokens if not t.startswith("[unused")]
    assert learned == [*vocab.SPECIAL_TOKENS, "a", "b", "c", "ab", "abc", "##b", "##c"]
    assert tokens[len(learned) :] == [f"[unused{i}]" for i in range(100 - len(learned))]
    path = tmp_path / "vocab.txt"
    path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    v = vocab.load_vocab(str(path))
    assert v.is_special[[i for i, t in enumerate(tokens) if t.startswith("[unused")]].all()


def test_learn_wordpiece_vocab_in_bounded_memory(tmp_path, data_config, monkeypatch):
    bound = 40
    sizes = []

    class RecordingCounter(vocab_learning.WordCounter):
        def add(self, words, **kwargs):
            super().add(words, **kwargs)
            sizes.append(len(self.counts))

    monkeypatch.setattr(vocab_learning, "WordCounter", RecordingCounter)
    config = _text_config(data_config, _write_corpus(tmp_path / "corpus.txt"))
    out = tmp_path / "out" / "vocab.txt"
    v = vocab_learning.learn_wordpiece_vocab(
        config, vocab_size=120, output_path=str(out), max_words_in_memory=bound
    )
    assert sizes and max(sizes) <= bound
    _check_layout(v, 120)
    assert set(FREQUENT) <= set(v.tokens)
    assert vocab.load_vocab(str(out)).tokens == v.tokens
    assert os.listdir(out.parent) == ["vocab.txt"]  # no temporary file left behind


@pytest.mark.slow
def test_learned_vocab_covers_held_out_builtin_sentences(tmp_path, data_config):
    config = from_config(data_config)
    path = str(tmp_path / "vocab.txt")
    v = vocab_learning.learn_wordpiece_vocab(config, vocab_size=4096, output_path=path)
    _check_layout(v, 4096)
    assert any(t.startswith("##") for t in v.tokens)
    held_out = [s for d in corpus.iter_documents(config, split="eval") for s in d.sentences]
    assert len(held_out) > 100
    ids = tokenizer.make_tokenizer(config, path).tokenize(tf.constant(held_out[:2000]))
    ids = ids.flat_values.numpy()
    assert np.mean(ids == v.unk_id) < 0.005


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_sentencepiece_model_has_the_specials_first(tmp_path, data_config, model_type):
    config = _text_config(
        data_config, _write_corpus(tmp_path / "corpus.txt"), tokenizer="sentencepiece"
    )
    path = vocab_learning.train_sentencepiece(
        config, vocab_size=150, output_prefix=str(tmp_path / "sp"), model_type=model_type
    )
    assert path == str(tmp_path / "sp.model")
    v = vocab.load_vocab(path)
    assert v.tokens[:5] == vocab.SPECIAL_TOKENS
    assert v.is_special[:5].all() and not v.is_special[5:].any()
    tok = tokenizer.make_tokenizer(config, path)
    assert isinstance(tok, tokenizer.SentencePieceTokenizer)
    ids = tok.tokenize(tf.constant(["Quiet river stone.", "QUIET RIVER STONE."])).to_list()
    assert ids[0] == ids[1]  # uncased
    assert v.unk_id not in ids[0] and not set(ids[0]) & {0, 2, 3, 4}
    assert "\u2581river" in v.tokens


def test_resolve_vocab_file_learns_once_and_keys_the_cache(tmp_path, data_config, monkeypatch):
    calls = []
    learn = vocab_learning.learn_wordpiece_vocab

    def counting_learn(*args, **kwargs):
        calls.append(kwargs["vocab_size"])
        return learn(*args, **kwargs)

    monkeypatch.setattr(vocab_learning, "learn_wordpiece_vocab", counting_learn)
    config = _text_config(
        data_config,
        _write_corpus(tmp_path / "corpus.txt"),
        vocab_cache_dir=str(tmp_path / "cache"),
        vocab_size=100,
    )
    first = vocab_learning.resolve_vocab_file(config)
    assert first.startswith(str(tmp_path / "cache"))
    assert len(vocab.load_vocab(first)) == 100
    mtime = os.stat(first).st_mtime_ns
    assert vocab_learning.resolve_vocab_file(config) == first
    assert calls == [100] and os.stat(first).st_mtime_ns == mtime

    bigger = vocab_learning.resolve_vocab_file(config.replace(vocab_size=110))
    assert bigger != first and calls == [100, 110]
    assert vocab_learning.cache_key(config) != vocab_learning.cache_key(
        config.replace(do_lower_case=False)
    )
    assert vocab_learning.resolve_vocab_file(config.replace(vocab_file=first)) == first


def test_a_corpus_a_stream_cannot_use_is_named_before_learning(tmp_path, data_config):
    # Its one document is held out (eval_fraction 0.9): the learner would find no words.
    path = tmp_path / "single.txt"
    path.write_text("One sentence.\nAnother one.\n")
    cache = tmp_path / "cache"
    config = _text_config(data_config, str(path), vocab_cache_dir=str(cache), eval_fraction=0.9)
    with pytest.raises(corpus.CorpusError, match=f"^config.data.text_files: {path}: 1 document; "):
        vocab_learning.resolve_vocab_file(config)
    assert not cache.exists()


def test_default_cache_dir_follows_xdg(data_config, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert vocab_learning.cache_dir(from_config(data_config)) == str(tmp_path / "bertjax")


def test_missing_vocab_file_names_the_option(data_config):
    config = from_config(data_config).replace(vocab_file="/no/such/vocab.txt")
    with pytest.raises(vocab.VocabError, match=r"config\.data\.vocab_file=.*/no/such/vocab\.txt"):
        vocab_learning.resolve_vocab_file(config)


def _cli(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(
        [sys.executable, "-m", "data_pipeline.build_vocab", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.command
def test_cli_writes_a_vocab_and_a_summary(tmp_path):
    text_file = _write_corpus(tmp_path / "corpus.txt")
    out = tmp_path / "vocab.txt"
    result = _cli(
        "--config=experiments/pretrain/tiny_cpu.py",
        "--config.data.source=text",
        f"--config.data.text_files={text_file}",
        f"--output={out}",
        "--vocab_size=90",
    )
    assert result.returncode == 0, result.stderr
    _check_layout(vocab.load_vocab(str(out)), 90)
    assert "90 wordpiece entries" in result.stdout
    assert "[UNK]" in result.stdout


@pytest.mark.integration
def test_cli_reports_a_missing_file_in_one_line(tmp_path):
    result = _cli(
        "--config=experiments/pretrain/tiny_cpu.py",
        "--config.data.source=text",
        f"--config.data.text_files={tmp_path}/missing-*.txt",
        f"--output={tmp_path / 'vocab.txt'}",
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "config.data.text_files" in errors[0], result.stderr
    assert "missing-*.txt" in errors[0]
    assert not (tmp_path / "vocab.txt").exists()
