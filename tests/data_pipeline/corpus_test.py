"""Tests for data_pipeline/corpus.py: text files, TFDS, the held-out split and sharding."""

import gzip
import os
import pathlib
import re

import pytest
import support

from data_pipeline import config as config_lib
from data_pipeline import corpus

TESTDATA = support.TESTDATA / "corpus"


@pytest.fixture
def text_config(data_config):
    """Builds a DataConfig reading text files; eval_fraction 0 unless a test sets it."""

    def make(text_files, **changes):
        base = config_lib.from_config(data_config)
        return base.replace(
            **{"source": "text", "text_files": str(text_files), "eval_fraction": 0.0, **changes}
        )

    return make


def _write(path: pathlib.Path, data: bytes) -> pathlib.Path:
    path.write_bytes(data)
    return path


def _read(config, split="train", **kwargs):
    stats = corpus.CorpusStats()
    documents = list(corpus.iter_documents(config, split=split, stats=stats, **kwargs))
    return documents, stats


def _many_documents(directory: pathlib.Path, num_files: int, docs_per_file: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for f in range(num_files):
        docs = [
            f"File {f} document {d} begins here.\nIt has a second sentence, number {d}.\n"
            for d in range(docs_per_file)
        ]
        (directory / f"part-{f:03d}.txt").write_text("\n".join(docs))


# ----------------------------------------------------------------------------- text files


def test_reads_bert_format_plain_and_gzip(text_config):
    config = text_config(f"{TESTDATA}/books_a.txt,{TESTDATA}/*.gz")
    corpus.check_sources(config)
    documents, stats = _read(config)
    a, b = str(TESTDATA / "books_a.txt"), str(TESTDATA / "books_b.txt.gz")
    assert [d.doc_id for d in documents] == [f"{a}:0", f"{a}:1", f"{a}:2", f"{b}:0", f"{b}:1"]
    assert documents[0].sentences == (
        "The river rose slowly through the night.",
        "By morning the lower fields were under water.",
        "Farmers moved their animals to the hill pastures.",
    )
    assert documents[2].sentences == ("Bread dough needs time to rise.",)
    assert documents[3].sentences[0] == "The old bridge was built in 1887."
    assert len(documents[4].sentences) == 3
    assert stats.as_dict() == {
        "files_read": 2,
        "documents_read": 5,
        "documents_in_other_split": 0,
        "sentences_read": 11,
        "empty_lines_skipped": 0,
        "invalid_bytes": 0,
        "control_characters": 0,
        "long_lines_cut": 0,
        "long_line_bytes_skipped": 0,
    }


def test_crlf_blank_lines_and_empty_files(tmp_path, text_config):
    _write(
        tmp_path / "a_crlf.txt", b"\r\n\r\nFirst one.\r\nSecond one.\r\n\r\n\r\n\r\nThird.\r\n\r\n"
    )
    _write(tmp_path / "b_empty.txt", b"")
    _write(tmp_path / "c_blank.txt", b"\n  \n\t\n")
    _write(tmp_path / "d_single.txt", b"Only sentence, no final newline.")
    documents, stats = _read(text_config(tmp_path / "*.txt"))
    assert [d.sentences for d in documents] == [
        ("First one.", "Second one."),
        ("Third.",),
        ("Only sentence, no final newline.",),
    ]
    assert documents[1].doc_id.endswith("a_crlf.txt:1")
    # a_crlf: 2 leading + 2 extra between documents; c_blank: 3; one blank after a document is no skip.
    assert stats.empty_lines_skipped == 7
    assert stats.files_read == 4
    assert stats.control_characters == 0  # \r and \t are not counted


def test_invalid_utf8_is_replaced_and_counted_exactly(tmp_path, text_config):
    data = (
        "café ok\n".encode()
        + b"bad \xff\xfe bytes\n"  # 2 invalid bytes
        + b"cut \xe2\x82 short\n"  # a truncated 3-byte sequence: 2 bytes
        + b"surrogate \xed\xa0\x80 encoded\n"  # UTF-8 forbids encoded surrogates: 3 bytes
    )
    documents, stats = _read(text_config(_write(tmp_path / "bad.txt", data)))
    assert stats.invalid_bytes == 7
    (document,) = documents
    assert document.sentences[0] == "café ok"
    assert document.sentences[1] == "bad \ufffd\ufffd bytes"
    assert document.sentences[2] == "cut \ufffd\ufffd short"
    assert document.sentences[3].count("\ufffd") == 3


def test_nul_and_control_characters_are_kept_and_counted(tmp_path, text_config):
    data = (
        b"nul\x00inside and \x01 start of heading\n"  # 2 Cc
        + "zero\u200bwidth and soft\u00adhyphen\n".encode()  # 2 Cf
        + b"tab\tand\x7fdelete\n"  # tab is exempt; DEL is Cc
        + b"\x00\x00\n"  # a line of NULs is still a line (the tokenizer drops them)
    )
    documents, stats = _read(text_config(_write(tmp_path / "ctrl.txt", data)))
    assert stats.control_characters == 7
    assert documents[0].sentences[0] == "nul\x00inside and \x01 start of heading"
    assert documents[0].sentences[3] == "\x00\x00"


def test_megabyte_line_without_spaces_keeps_its_first_64_kib(tmp_path, text_config):
    long_line = b"x" * (1 << 20)
    path = _write(tmp_path / "long.txt", b"Short first.\n" + long_line + b"\n\nNext document.\n")
    documents, stats = _read(text_config(path))
    assert [d.sentences for d in documents] == [
        ("Short first.", "x" * (corpus.MAX_LINE_BYTES - 4)),  # cut at a character boundary
        ("Next document.",),
    ]
    assert stats.long_lines_cut == 1
    assert stats.long_line_bytes_skipped == (1 << 20) - (corpus.MAX_LINE_BYTES - 4)


@pytest.mark.parametrize("ending", [b"", b"\n", b"\r\n"])
def test_a_line_of_exactly_64_kib_is_whole(tmp_path, text_config, ending):
    line = b"y" * corpus.MAX_LINE_BYTES
    documents, stats = _read(text_config(_write(tmp_path / "exact.txt", line + ending)))
    assert documents[0].sentences == (line.decode(),)
    assert stats.long_lines_cut == stats.long_line_bytes_skipped == 0


# ----------------------------------------------------------------------------- too few documents


@pytest.mark.parametrize("eval_fraction", [0.0, 0.1, 0.9])
@pytest.mark.parametrize("split", ["train", "eval"])
def test_a_corpus_of_fewer_than_two_documents_names_each_file(
    tmp_path, text_config, split, eval_fraction
):
    empty = _write(tmp_path / "empty.txt", b"")
    blank = _write(tmp_path / "blank.txt", b"\n  \n\t\r\n\n")
    single = _write(tmp_path / "single.txt", b"One sentence.\nAnother one.\n")
    needs = (
        "at least 2"
        if eval_fraction == 0
        else "2 in the train split and, to evaluate, 2 in the held-out one"
    )
    no_documents = (
        "; no documents to pretrain on (a sentence a line, a blank line between documents)"
    )
    for files, message in (
        (empty, f"config.data.text_files: {empty}: empty{no_documents}"),
        (blank, f"config.data.text_files: {blank}: only blank lines{no_documents}"),
        (
            single,
            f"config.data.text_files: {single}: 1 document; next-sentence prediction pairs "
            f"sentences of two documents: it needs {needs}",
        ),
        (
            tmp_path / "*.txt",
            f"config.data.text_files: {blank}: only blank lines; {empty}: empty; "
            f"{single}: 1 document; 1 document in all; next-sentence prediction pairs "
            f"sentences of two documents: it needs {needs}",
        ),
    ):
        config = text_config(files, eval_fraction=eval_fraction)
        with pytest.raises(corpus.CorpusError) as raised:
            corpus.check_two_documents(config, split=split)
        assert str(raised.value) == message


def test_many_files_too_few_documents_are_named_up_to_five(tmp_path, text_config):
    for i in range(7):
        _write(tmp_path / f"part-{i}.txt", b"\n")
    with pytest.raises(corpus.CorpusError) as raised:
        corpus.check_two_documents(text_config(tmp_path / "*.txt"), split="train")
    assert str(raised.value).startswith(
        "config.data.text_files: "
        + "; ".join(f"{tmp_path}/part-{i}.txt: only blank lines" for i in range(5))
        + "; 2 more files; no documents to pretrain on"
    )


@pytest.mark.parametrize("count", [2, 3, 5])
def test_a_corpus_too_small_for_two_documents_in_each_split_says_so(tmp_path, text_config, count):
    # It once said "raise config.data.eval_fraction" or "lower" it, as if the split were
    # at fault, for a corpus no fraction would serve.
    text = "\n\n".join(f"Document number {i}." for i in range(count)).encode()
    path = _write(tmp_path / "small.txt", text + b"\n")
    for split in ("train", "eval"):
        try:
            corpus.check_two_documents(text_config(path, eval_fraction=0.1), split=split)
        except corpus.CorpusError as error:
            assert str(error) == (
                f"config.data.text_files={str(path)!r}: the corpus is too small, {count} "
                "documents: next-sentence prediction needs 2 in each split, about 20 at "
                "config.data.eval_fraction=0.1; add documents"
            )
        else:
            assert split == "train"  # the eval split of 5 or fewer has fewer than 2


def test_a_split_short_of_two_documents_in_a_big_enough_corpus_names_the_fraction(
    tmp_path, text_config
):
    # 20 documents, all but one held out at 0.9 (the split is a hash of the text).
    held_out = [f"Doc {i}." for i in range(200) if corpus.is_eval_document([f"Doc {i}."], 0.9)]
    trained = next(
        f"Doc {i}." for i in range(200) if not corpus.is_eval_document([f"Doc {i}."], 0.9)
    )
    path = _write(tmp_path / "twenty.txt", "\n\n".join([*held_out[:19], trained]).encode() + b"\n")
    with pytest.raises(corpus.CorpusError) as raised:
        corpus.check_two_documents(text_config(path, eval_fraction=0.9), split="train")
    assert str(raised.value) == (
        f"config.data.text_files={str(path)!r}: the train split has a single document "
        f"({path}:19), of the corpus's 20 documents; next-sentence prediction needs NotNext "
        "segments from another document (lower config.data.eval_fraction=0.9)"
    )


def test_glob_matching_nothing_names_the_glob(tmp_path, text_config):
    _write(tmp_path / "real.txt", b"Text.\n")
    pattern = f"{tmp_path}/*.nothing"
    config = text_config(f"{tmp_path}/real.txt,{pattern}")
    for call in (corpus.list_files, corpus.check_sources):
        with pytest.raises(corpus.CorpusError, match=re.escape(pattern)):
            call(config)
    # Raised by the call itself, before any document is read.
    with pytest.raises(corpus.CorpusError, match=re.escape(pattern)):
        corpus.iter_documents(config, split="train")


def test_missing_file_directory_and_broken_link_are_named(tmp_path, text_config):
    missing = tmp_path / "missing.txt"
    with pytest.raises(corpus.CorpusError, match=re.escape(f"no such file '{missing}'")):
        corpus.list_files(text_config(missing))
    (tmp_path / "sub.txt").mkdir()
    with pytest.raises(corpus.CorpusError, match="sub.txt.* is a directory"):
        corpus.check_sources(text_config(tmp_path / "*.txt"))
    os.symlink(tmp_path / "gone", tmp_path / "link.text")
    with pytest.raises(corpus.CorpusError, match="link.text.* does not exist"):
        corpus.check_sources(text_config(tmp_path / "*.text"))


def test_unreadable_files_are_named_before_reading(tmp_path, text_config):
    corrupt = _write(tmp_path / "corrupt.txt.gz", b"this is not gzip data\n")
    with pytest.raises(corpus.CorpusError, match="corrupt.txt.gz"):
        corpus.check_sources(text_config(corrupt))
    with pytest.raises(corpus.CorpusError, match="corrupt.txt.gz"):
        list(corpus.iter_documents(text_config(corrupt), split="train"))
    truncated_data = gzip.compress(b"A sentence.\n" * 1000)[:-30]
    truncated = _write(tmp_path / "truncated.txt.gz", truncated_data)
    with pytest.raises(corpus.CorpusError, match="truncated.txt.gz"):
        list(corpus.iter_documents(text_config(truncated), split="train"))
    if os.geteuid() != 0:  # root reads anything
        locked = _write(tmp_path / "locked.txt", b"Secret.\n")
        locked.chmod(0)
        with pytest.raises(corpus.CorpusError, match="locked.txt"):
            corpus.check_sources(text_config(locked))


def test_bad_split_process_and_tfrecord_source(tmp_path, text_config):
    config = text_config(_write(tmp_path / "a.txt", b"A.\n"))
    with pytest.raises(ValueError, match="'validation'"):
        corpus.iter_documents(config, split="validation")
    with pytest.raises(ValueError, match="process_index=2"):
        corpus.iter_documents(config, split="train", process_index=2, process_count=2)
    tfrecord = config.replace(source="tfrecord", tfrecord_train_files="x.tfrecord")
    with pytest.raises(config_lib.ConfigError, match="tfrecord"):
        corpus.iter_documents(tfrecord, split="train")
    with pytest.raises(config_lib.ConfigError, match="tfrecord"):
        corpus.check_sources(tfrecord)


def test_stats_merge_and_as_dict():
    a = corpus.CorpusStats(files_read=1, documents_read=3, invalid_bytes=2)
    a.merge(corpus.CorpusStats(files_read=2, documents_read=1, control_characters=5))
    assert a.as_dict() == {
        "files_read": 3,
        "documents_read": 4,
        "documents_in_other_split": 0,
        "sentences_read": 0,
        "empty_lines_skipped": 0,
        "invalid_bytes": 2,
        "control_characters": 5,
        "long_lines_cut": 0,
        "long_line_bytes_skipped": 0,
    }


# ----------------------------------------------------------------------------- held-out split


def test_is_eval_document_is_deterministic_and_about_eval_fraction():
    documents = [(f"Document number {i}.", "Its second sentence.") for i in range(4000)]
    held_out = [corpus.is_eval_document(d, 0.1) for d in documents]
    assert held_out == [corpus.is_eval_document(d, 0.1) for d in documents]
    assert 0.08 < sum(held_out) / len(held_out) < 0.12
    assert not any(corpus.is_eval_document(d, 0.0) for d in documents)
    # Growing the fraction only adds documents to the held-out set.
    wider = [corpus.is_eval_document(d, 0.3) for d in documents]
    assert all(w for h, w in zip(held_out, wider, strict=True) if h)


def test_is_eval_document_is_pinned():
    # hashlib, not Python's salted hash(): the split is the same in every process and
    # run. A change here would silently move documents between train and eval.
    flags = [int(corpus.is_eval_document((f"Sentence {i}.",), 0.5)) for i in range(16)]
    assert flags == [1, 1, 1, 1, 0, 1, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0]


def test_train_and_eval_are_disjoint_and_cover_everything(tmp_path, text_config):
    _many_documents(tmp_path, num_files=4, docs_per_file=100)
    # The same document twice, in two files: both copies must land in the same split.
    (tmp_path / "part-dup1.txt").write_text("A duplicated document.\nWord for word.\n")
    (tmp_path / "part-dup2.txt").write_text("A duplicated document.\nWord for word.\n")
    config = text_config(tmp_path / "*.txt", eval_fraction=0.2)
    train, train_stats = _read(config, "train")
    evaluation, eval_stats = _read(config, "eval")
    train_ids = {d.doc_id for d in train}
    eval_ids = {d.doc_id for d in evaluation}
    assert not train_ids & eval_ids
    assert len(train_ids | eval_ids) == 402
    assert 0.14 < len(eval_ids) / 402 < 0.26
    duplicates = {i for i in train_ids | eval_ids if "dup" in i}
    assert duplicates <= train_ids or duplicates <= eval_ids
    assert train_stats.documents_read == eval_stats.documents_read == 402
    assert train_stats.documents_in_other_split == len(eval_ids)
    assert eval_stats.documents_in_other_split == len(train_ids)


# ----------------------------------------------------------------------------- sharding


@pytest.mark.parametrize(
    ("num_files", "process_count"),
    [(6, 3), (5, 2), (7, 7), (2, 3), (1, 4)],  # the last two shard by document
)
@pytest.mark.parametrize("split", ["train", "eval"])
def test_process_shards_are_disjoint_and_cover_the_split(
    tmp_path, text_config, num_files, process_count, split
):
    _many_documents(tmp_path, num_files=num_files, docs_per_file=9)
    first = tmp_path / "part-000.txt"  # add defects around its documents
    first.write_bytes(b"\n\nDefects \xff here.\n\n\n" + first.read_bytes() + b"\n\x00\n\n\n")
    config = text_config(tmp_path / "*.txt", eval_fraction=0.3)
    whole, whole_stats = _read(config, split)
    shards, total = [], corpus.CorpusStats()
    for index in range(process_count):
        documents, stats = _read(config, split, process_index=index, process_count=process_count)
        shards.append([d.doc_id for d in documents])
        total.merge(stats)
    ids = [i for shard in shards for i in shard]
    assert len(ids) == len(set(ids))  # disjoint
    assert sorted(ids) == sorted(d.doc_id for d in whole)  # union is the whole split
    assert whole
    by_file = num_files >= process_count
    for shard in shards:
        files = {i.rsplit(":", 1)[0] for i in shard}
        if by_file:
            assert not any(
                files & {i.rsplit(":", 1)[0] for i in other}
                for other in shards
                if other is not shard
            )
    # Every counter but files_read sums to the single-process value.
    for name, value in whole_stats.as_dict().items():
        if name != "files_read":
            assert getattr(total, name) == value, name
    assert total.files_read == (num_files if by_file else num_files * process_count)


def test_shuffle_seed_changes_file_order_deterministically(tmp_path, text_config):
    _many_documents(tmp_path, num_files=8, docs_per_file=2)
    config = text_config(tmp_path / "*.txt")

    def file_order(**kwargs):
        documents, _ = _read(config, **kwargs)
        return list(dict.fromkeys(d.doc_id.rsplit(":", 1)[0] for d in documents))

    assert file_order() == sorted(file_order())
    assert file_order(shuffle_seed=1) == file_order(shuffle_seed=1)
    assert file_order(shuffle_seed=1) != file_order(shuffle_seed=2)
    assert sorted(file_order(shuffle_seed=1)) == file_order()
    # Shuffling does not move documents between processes or splits.
    for index in range(2):
        plain, _ = _read(config, process_index=index, process_count=2)
        shuffled, _ = _read(config, process_index=index, process_count=2, shuffle_seed=5)
        assert sorted(d.doc_id for d in plain) == sorted(d.doc_id for d in shuffled)


def _check_resumes_after_every_document(config, **kwargs):
    """Reading from any document's position gives the documents after it, ids included."""
    documents, _ = _read(config, **kwargs)
    assert len(documents) > 2
    for k, document in enumerate(documents):
        rest, _ = _read(config, start=document.position, **kwargs)
        assert rest == documents[k + 1 :], k


@pytest.mark.parametrize("num_files,process_count", [(3, 1), (3, 2), (1, 2)])
def test_text_reading_resumes_at_a_position(tmp_path, text_config, num_files, process_count):
    _many_documents(tmp_path, num_files=num_files, docs_per_file=5)
    first = tmp_path / "part-000.txt"  # defects, a gzipped copy, no final newline
    first.write_bytes(b"\n\nDefects \xff here.\n\n\n" + first.read_bytes() + b"\n\x00\n\n\n")
    _write(tmp_path / "part-100.txt.gz", gzip.compress(first.read_bytes().rstrip()))
    config = text_config(f"{tmp_path}/*.txt*", eval_fraction=0.3)
    for index in range(process_count):
        shard = {"process_index": index, "process_count": process_count, "shuffle_seed": 4}
        _check_resumes_after_every_document(config, **shard)


def test_builtin_reading_resumes_at_a_position(data_config):
    config = config_lib.from_config(data_config)
    documents, _ = _read(config, shuffle_seed=2, process_index=1, process_count=3)
    for k in (0, 57, len(documents) - 2):
        start = documents[k].position
        rest, _ = _read(config, shuffle_seed=2, process_index=1, process_count=3, start=start)
        assert rest == documents[k + 1 :]


# ----------------------------------------------------------------------------- TFDS


@pytest.fixture(scope="session")
def tfds():
    import tensorflow as tf  # noqa: F401  (tfds needs TensorFlow imported first)
    import tensorflow_datasets

    return tensorflow_datasets


@pytest.fixture(scope="session")
def tiny_tfds(tfds, tmp_path_factory):
    """A 25-document TFDS dataset, 'bertjax_tiny_corpus', prepared into a temporary data_dir.

    Once per process: TFDS registers the builder class by name when it is defined, and
    refuses a second class of the same name."""

    class BertjaxTinyCorpus(tfds.core.GeneratorBasedBuilder):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            features = tfds.features.FeaturesDict(
                {"title": tfds.features.Text(), "body": tfds.features.Text()}
            )
            return tfds.core.DatasetInfo(builder=self, features=features)

        def _split_generators(self, dl_manager):
            del dl_manager  # nothing to download
            return {"train": self._generate_examples()}

        def _generate_examples(self):
            for i in range(25):
                body = (
                    f"Article {i} opens with a sentence. It continues with Dr. Example's remark.\n\n"
                    f"A second paragraph holds version 3.{i} of the text."
                )
                yield i, {"title": f"Article {i}", "body": body}

    data_dir = tmp_path_factory.mktemp("tfds")
    BertjaxTinyCorpus(data_dir=str(data_dir)).download_and_prepare()
    return str(data_dir)


def _tfds_config(data_config, **changes):
    base = config_lib.from_config(data_config)
    return base.replace(
        **{"source": "tfds", "eval_fraction": 0.0, "tfds_text_field": "body", **changes}
    )


def test_tfds_local_dataset_is_read_and_split_into_sentences(tiny_tfds, data_config):
    config = _tfds_config(data_config, tfds_name="bertjax_tiny_corpus", tfds_data_dir=tiny_tfds)
    corpus.check_sources(config)
    documents, stats = _read(config)
    assert len(documents) == 25 == stats.documents_read
    first = next(d for d in documents if d.sentences[0].startswith("Article 0 "))
    assert first.sentences == (
        "Article 0 opens with a sentence.",
        "It continues with Dr. Example's remark.",
        "A second paragraph holds version 3.0 of the text.",
    )
    assert first.doc_id.startswith("tfds:bertjax_tiny_corpus:")
    assert len({d.doc_id for d in documents}) == 25


@pytest.mark.parametrize(
    ("tfds_split", "process_count"),
    [("train", 3), ("train[:4]", 5)],  # 4 examples for 5 processes: by document
)
def test_tfds_process_shards_cover_the_split(tiny_tfds, data_config, tfds_split, process_count):
    config = _tfds_config(
        data_config,
        tfds_name="bertjax_tiny_corpus",
        tfds_data_dir=tiny_tfds,
        tfds_split=tfds_split,
        eval_fraction=0.2,
    )
    for split in ("train", "eval"):
        whole = sorted(d.doc_id for d in _read(config, split)[0])
        shards = [
            [
                d.doc_id
                for d in _read(config, split, process_index=i, process_count=process_count)[0]
            ]
            for i in range(process_count)
        ]
        ids = [i for shard in shards for i in shard]
        assert sorted(ids) == whole
        assert len(set(ids)) == len(ids)
    shuffled = [d.doc_id for d in _read(config, shuffle_seed=3)[0]]
    assert shuffled == [d.doc_id for d in _read(config, shuffle_seed=3)[0]]


@pytest.mark.slow
def test_tfds_reading_resumes_at_a_position(tiny_tfds, data_config):
    config = _tfds_config(data_config, tfds_name="bertjax_tiny_corpus", tfds_data_dir=tiny_tfds)
    _check_resumes_after_every_document(config, shuffle_seed=3)
    _check_resumes_after_every_document(config, process_index=1, process_count=3)


def test_tfds_errors_name_the_dataset(tiny_tfds, data_config, tmp_path):
    unknown = _tfds_config(data_config, tfds_name="no_such_dataset_bertjax")
    with pytest.raises(corpus.CorpusError, match="no_such_dataset_bertjax"):
        corpus.check_sources(unknown)
    with pytest.raises(corpus.CorpusError, match="no_such_dataset_bertjax"):
        corpus.iter_documents(unknown, split="train")
    empty_dir = str(tmp_path / "empty_data_dir")
    unprepared = _tfds_config(data_config, tfds_name="bertjax_tiny_corpus", tfds_data_dir=empty_dir)
    with pytest.raises(
        corpus.CorpusError, match=f"bertjax_tiny_corpus.*not prepared.*{re.escape(empty_dir)}"
    ):
        corpus.check_sources(unprepared)
    with pytest.raises(corpus.CorpusError, match="bertjax_tiny_corpus"):
        corpus.iter_documents(unprepared, split="train")
    wrong_field = _tfds_config(
        data_config,
        tfds_name="bertjax_tiny_corpus",
        tfds_data_dir=tiny_tfds,
        tfds_text_field="text",
    )
    with pytest.raises(corpus.CorpusError, match="'text'.*'body'"):
        corpus.iter_documents(wrong_field, split="train")
    wrong_split = _tfds_config(
        data_config, tfds_name="bertjax_tiny_corpus", tfds_data_dir=tiny_tfds, tfds_split="test"
    )
    with pytest.raises(corpus.CorpusError, match="'test'"):
        corpus.check_sources(wrong_split)


def test_tfds_mock_wikipedia(tfds, data_config):
    # mock_data fakes the registered Wikipedia builder's examples; nothing is downloaded.
    config = _tfds_config(data_config, tfds_name="wikipedia/20230601.en", tfds_text_field="text")
    with tfds.testing.mock_data(num_examples=12):
        documents, stats = _read(config)
    assert len(documents) == 12 == stats.documents_read
    assert all(d.doc_id.startswith("tfds:wikipedia/20230601.en:") for d in documents)
    assert all(s and s == s.strip() for d in documents for s in d.sentences)


def test_tfds_corpus_through_the_whole_pipeline(tiny_tfds, data_config, bert_tokenizer_json):
    from data_pipeline import pretraining_input

    data_config.update(
        source="tfds",
        tfds_name="bertjax_tiny_corpus",
        tfds_data_dir=tiny_tfds,
        tfds_text_field="body",
        eval_fraction=0.0,
        vocab_file=bert_tokenizer_json,
        document_buffer_size=8,
        shuffle_buffer_size=16,
    )
    dataset = pretraining_input.make_pretraining_dataset(
        data_config, split="train", batch_size=8, seed=0
    )
    batch = next(dataset.as_numpy_iterator())
    assert batch["input_ids"].shape == (8, 128)
    assert batch["masked_lm_weights"].sum() > 0
    assert set(batch["next_sentence_labels"]) <= {0, 1}


def test_a_file_that_is_not_text_is_refused_before_reading(tmp_path, text_config):
    good = tmp_path / "good.txt"
    good.write_text("One sentence.\n\nAnother document.\n")
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)) * 64)
    utf16 = tmp_path / "notes.txt"
    utf16.write_text("Text saved as UTF-16.\n", encoding="utf-16")
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("é".encode("latin-1") * 1000)
    for path, bad in (
        (binary, "8,256 of its first 16,384"),
        (utf16, "24 of its first 46"),
        (latin1, "1,000 of its first 1,000"),
    ):
        config = text_config(f"{good},{path}")
        with pytest.raises(corpus.CorpusError, match=f"{path}' is not text: {bad} bytes are"):
            corpus.check_sources(config)
    corpus.check_sources(text_config(good))


def test_a_huge_line_keeps_its_first_64_kib_cut_at_a_space(tmp_path, text_config):
    # 5 MB on one line (words, then 200 KB of one unbroken CJK "word"), then a document.
    path = tmp_path / "dump.txt"
    line = " ".join(f"word{i}" for i in range(600_000)) + " " + "字" * 70_000
    path.write_text(line + "\n\nA short document.\nIt ends here.\n")
    stats = corpus.CorpusStats()
    config = text_config(path)
    docs = list(corpus.iter_documents(config, split="train", stats=stats))
    ((kept,), (a, b)) = (d.sentences for d in docs)
    assert len(kept.encode()) <= corpus.MAX_LINE_BYTES and line.startswith(kept + " ")
    assert line[len(kept) + 1 :].startswith("word")  # a whole word is the first one skipped
    assert (a, b) == ("A short document.", "It ends here.")
    assert stats.long_lines_cut == 1 and stats.invalid_bytes == 0
    assert stats.long_line_bytes_skipped == len(line[len(kept) + 1 :].encode())
    # The skipped bytes count in the reader's positions: a resume starts at the next document.
    resumed = corpus.iter_documents(config, split="train", start=docs[0].position)
    assert [d.sentences for d in resumed] == [(a, b)]
