"""Tests for data_pipeline/builtin_corpus.py and the 'builtin' corpus source."""

import json
import pathlib
import sys

import pytest

from data_pipeline import builtin_corpus, corpus
from data_pipeline import config as config_lib
from data_pipeline import sentences as sentences_lib


@pytest.fixture(scope="module")
def docs():
    builtin_corpus.documents.cache_clear()
    return builtin_corpus.documents()


def test_size(docs):
    words = sum(len(s.split()) for _, sentences in docs for s in sentences)
    topics = [doc_id for doc_id, _ in docs if doc_id.startswith("builtin:topic:")]
    # About 410 documents, 10k sentences and 148k words on Python 3.11; data_pipeline.benchmark
    # times building them.
    assert len(docs) >= 300
    assert len(topics) >= 70
    assert sum(len(sentences) for _, sentences in docs) >= 7000
    assert words >= 100_000


def test_deterministic_and_cached(docs):
    assert builtin_corpus.documents() is docs
    builtin_corpus.documents.cache_clear()
    assert builtin_corpus.documents() == docs


def test_a_process_reads_the_corpus_from_its_cache_file(docs, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    builtin_corpus.documents.cache_clear()
    assert builtin_corpus.documents() == docs  # parsed, then written
    (cached,) = (tmp_path / "bertjax").iterdir()
    assert str(cached) == builtin_corpus.cache_file()
    # What a later process reads is the file, not a parse: a changed file shows.
    cached.write_text('[["builtin:topic:x", ["One sentence."]]]', encoding="utf-8")
    builtin_corpus.documents.cache_clear()
    assert builtin_corpus.documents() == (("builtin:topic:x", ("One sentence.",)),)
    # A file cut short is parsed again and rewritten.
    cached.write_text('[["builtin:topic:x", ["One', encoding="utf-8")
    builtin_corpus.documents.cache_clear()
    assert builtin_corpus.documents() == docs
    assert len(json.loads(cached.read_text(encoding="utf-8"))) == len(docs)  # rewritten whole
    builtin_corpus.documents.cache_clear()


def test_a_cache_that_cannot_be_written_is_skipped(docs, tmp_path, monkeypatch):
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # no folder can be made below a file
    builtin_corpus.documents.cache_clear()
    assert builtin_corpus.documents() == docs
    builtin_corpus.documents.cache_clear()


def test_the_cache_is_keyed_by_the_code_that_cleans_the_corpus(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    before = builtin_corpus.cache_file()
    edited = tmp_path / "sentences.py"
    source = pathlib.Path(sentences_lib.__file__).read_text(encoding="utf-8")
    edited.write_text(source + "\n# edited\n", encoding="utf-8")
    monkeypatch.setattr(sentences_lib, "__file__", str(edited))
    assert builtin_corpus.cache_file() != before


def test_ids_and_sentences_are_well_formed(docs):
    ids = [doc_id for doc_id, _ in docs]
    assert len(set(ids)) == len(ids)
    assert "builtin:topic:assert" in ids
    assert "builtin:module:json.decoder" in ids
    assert "builtin:module:collections" in ids  # a package is its __init__
    assert not [i for i in ids if i.startswith(("builtin:module:test", "builtin:module:idlelib"))]
    assert not [i for i in ids if "lib2to3" in i or "._" in i or ":_" in i]
    for _, sentences in docs:
        assert sentences
        for sentence in sentences:
            assert sentence == sentence.strip() and sentence
            assert "\n" not in sentence
            assert not sentence.startswith((">>>", "... "))


def test_modules_are_parsed_not_imported(docs):
    assert "builtin:module:turtle" in {doc_id for doc_id, _ in docs}
    for name in ("antigravity", "this", "turtle", "tabnanny"):  # imported by nothing else
        assert name not in sys.modules


def test_doctests_literal_blocks_and_markup_are_removed():
    docstring = (
        "Return the :func:`sum` of ``values``, like *add* does.\n"
        "\n"
        ">>> total([1, 2])\n"
        "3\n"
        "\n"
        "Usage::\n"
        "\n"
        "    result = total(items)\n"
        "    print(result)\n"
        "\n"
        "+-----+-----+\n"
        "| a   | b   |\n"
        "+-----+-----+\n"
        "\n"
        ":param values: the numbers to add.\n"
        ":type values: list\n"
        "\n"
        "    if x:\n"
        "        raise ValueError(x)\n"
        "\n"
        "    This indented note reads as prose.\n"
        "\n"
        "The end."
    )
    prose = builtin_corpus._prose(docstring)
    assert prose.split("\n\n") == [
        "Return the sum of values, like add does.",
        "Usage:",
        "values: the numbers to add.",
        "    This indented note reads as prose.",
        "The end.",
    ]


def test_builtin_source_splits_and_shards(data_config, docs):
    config = config_lib.from_config(data_config)  # tiny_cpu.py: source='builtin'
    assert config.source == "builtin"
    corpus.check_sources(config)
    train = [d.doc_id for d in corpus.iter_documents(config, split="train")]
    held_out = [d.doc_id for d in corpus.iter_documents(config, split="eval")]
    assert not set(train) & set(held_out)
    assert sorted(train + held_out) == sorted(doc_id for doc_id, _ in docs)
    assert 0 < len(held_out) < 0.15 * len(docs)  # eval_fraction is 0.05
    shards = [
        [
            d.doc_id
            for d in corpus.iter_documents(config, split="train", process_index=i, process_count=3)
        ]
        for i in range(3)
    ]
    assert sorted(sum(shards, [])) == sorted(train)
    shuffled = [d.doc_id for d in corpus.iter_documents(config, split="train", shuffle_seed=7)]
    assert shuffled != train and sorted(shuffled) == sorted(train)
