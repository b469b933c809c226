"""Documents for pretraining: where they come from, which split they belong to,
and which process reads them.

A document is a list of sentences (any contiguous spans of text), from
`config.source`: 'text' files in the original BERT format (a sentence a line, a
blank line between documents, `.gz` ok), 'tfds' (an example a document, split
into sentences) or 'builtin' (builtin_corpus.py). 'tfrecord' is read by tfrecords.py.

The held-out split is a hash of each document's text, so it does not depend on
file order, sharding or duplicates. Processes share the work by file when
there are at least as many files as processes, else by document ordinal; TFDS
splits are cut with `tfds.even_splits`.

Every document carries the reader's `ReaderPosition` after it, and
`iter_documents(start=...)` resumes an epoch's order from such a position
without reading what came before: text files seek to a byte offset (a `.gz`
file decompresses up to it), the built-in corpus indexes its list, and TFDS
skips raw records (no sentence splitting).

`CorpusStats` counts what this process read: the documents and sentences of
both splits (`documents_in_other_split` of them were skipped), and the input
defects, each charged to the document whose lines held it. Summed over the
processes of a run the counters give the whole corpus once, except
`files_read`: when sharding by document every process opens every file.
"""

import concurrent.futures
import dataclasses
import functools
import glob
import gzip
import hashlib
import io
import math
import os
import random
import re
import sys
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple, NoReturn

import tensorflow as tf

from data_pipeline import builtin_corpus
from data_pipeline.config import DataConfig
from data_pipeline.errors import ConfigError, UserError
from data_pipeline.sentences import split_sentences

SPLITS = ("train", "eval")

# surrogateescape turns each undecodable byte into one of these code points.
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")
_GLOB_CHARACTERS = frozenset("*?[")


class CorpusError(UserError):
    """A corpus file, glob or dataset that cannot be read; the message names it."""


class ReaderPosition(NamedTuple):
    """Where a reader stands in one epoch's document order: enough to resume reading there.

    Text files: the file's index in the epoch's file order, the byte offset in
    it and the documents read from it (they number the doc ids). The built-in
    corpus and TFDS: `offset` counts the records read. `documents` counts the
    documents read in the epoch (every process's, where processes share by
    document ordinal).
    """

    file: int = 0
    offset: int = 0
    file_documents: int = 0
    documents: int = 0


EPOCH_START = ReaderPosition()


@dataclasses.dataclass(frozen=True)
class Document:
    doc_id: str
    sentences: tuple[str, ...]
    position: ReaderPosition = EPOCH_START  # the reader's, after this document


@dataclasses.dataclass
class CorpusStats:
    """What one process read, both splits included (see the module docstring)."""

    files_read: int = 0
    documents_read: int = 0
    documents_in_other_split: int = 0
    sentences_read: int = 0
    empty_lines_skipped: int = 0
    invalid_bytes: int = 0
    # Cc/Cf characters other than \t \n \r (NUL included); the tokenizer drops them.
    control_characters: int = 0
    # Lines longer than MAX_LINE_BYTES, cut to their first MAX_LINE_BYTES (see _bounded_lines),
    # and the bytes of theirs that were skipped.
    long_lines_cut: int = 0
    long_line_bytes_skipped: int = 0

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    def merge(self, other: "CorpusStats") -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


# One document read from a source with the defects found on the way and the
# reader's position after it; a record with no sentences only carries defects
# (blank lines after a file's last document).
_Record = tuple[str, tuple[str, ...], CorpusStats, ReaderPosition]


def list_files(config: DataConfig) -> list[str]:
    """The sorted, de-duplicated files matched by the comma-separated globs `config.text_files`
    (local, or `gs://...` where `**` is not recursive)."""
    files = set()
    for pattern in (p.strip() for p in config.text_files.split(",")):
        if not pattern:
            continue
        remote = "://" in pattern
        try:
            matches = (
                tf.io.gfile.glob(pattern)
                if remote
                else glob.glob(os.path.expanduser(pattern), recursive=True)
            )
        except tf.errors.OpError as e:
            raise CorpusError(f"config.data.text_files: {pattern!r}: {e.message}") from None
        if not matches:
            if _GLOB_CHARACTERS.isdisjoint(pattern):
                raise CorpusError(f"config.data.text_files: no such file {pattern!r}")
            raise CorpusError(f"config.data.text_files: {pattern!r} matches no file")
        for path in matches:
            if tf.io.gfile.isdir(path):
                raise CorpusError(
                    f"config.data.text_files: {path!r} (from {pattern!r}) is a directory"
                )
            if not remote and not os.path.exists(path):
                raise CorpusError(
                    f"config.data.text_files: {path!r} (from {pattern!r}) does not exist "
                    "(a broken link?)"
                )
        files.update(matches)
    return sorted(files)


def check_sources(config: DataConfig) -> None:
    """Raises CorpusError for every problem that shows before reading a document."""
    if config.source == "text":
        files = list_files(config)
        with concurrent.futures.ThreadPoolExecutor(min(16, len(files))) as pool:
            list(pool.map(_check_text_file, files))
    elif config.source == "tfds":
        builder = _tfds_builder(config)
        if not builder.is_prepared():
            raise CorpusError(
                f"TFDS dataset {config.tfds_name!r} is not prepared in "
                f"{builder.data_dir!r} (config.data.tfds_data_dir={config.tfds_data_dir!r}); "
                "prepare it with `tfds build` or tfds.builder(...).download_and_prepare()"
            )
        _num_tfds_examples(builder, config)
        _check_tfds_text_field(builder, config)
    elif config.source == "tfrecord":
        _refuse_tfrecord()


def is_eval_document(sentences: Sequence[str], eval_fraction: float) -> bool:
    """Whether a document is held out, decided by a stable hash of its text alone."""
    if eval_fraction <= 0.0:
        return False
    text = "\n".join(sentences).encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(text, digest_size=8).digest()
    return int.from_bytes(digest, "big") < eval_fraction * 2**64


def iter_documents(
    config: DataConfig,
    *,
    split: str,
    process_index: int = 0,
    process_count: int = 1,
    shuffle_seed: int | None = None,
    stats: CorpusStats | None = None,
    start: ReaderPosition = EPOCH_START,
) -> Iterator[Document]:
    """Streams this process's documents of `split` ('train' or 'eval').

    Files (or TFDS shards) come in sorted order, or shuffled by `shuffle_seed`.
    Reading starts at `start`, a `Document.position` of the same order.
    Globs and datasets are resolved at the call, so errors show before reading.
    """
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: must be one of {', '.join(SPLITS)}")
    if process_count < 1 or not 0 <= process_index < process_count:
        raise ValueError(
            f"process_index={process_index}, process_count={process_count}: "
            "need 0 <= process_index < process_count"
        )
    if stats is None:
        stats = CorpusStats()
    if config.source == "text":
        records = _text_records(
            list_files(config), process_index, process_count, shuffle_seed, stats, start
        )
    elif config.source == "tfds":
        records = _tfds_records(config, process_index, process_count, shuffle_seed, start)
    elif config.source == "builtin":
        records = _builtin_records(process_index, process_count, shuffle_seed, start)
    else:
        _refuse_tfrecord()
    return _select_split(records, split == "eval", config.eval_fraction, stats)


def check_two_documents(
    config: DataConfig,
    *,
    split: str,
    process_index: int = 0,
    process_count: int = 1,
    shard: str = "process",
    hints: Sequence[str] = (),
) -> None:
    """Fails before any work when this shard cannot make NotNext pairs.

    Next-sentence prediction draws NotNext segments from another document, so
    every shard (`shard` names what a shard is for the message: a process or a
    worker) needs two documents. Reads only until it has seen two. When the
    whole corpus has fewer, the message names its files, each as empty, only
    blank lines or its number of documents; else it names the split, and how
    many documents the shard holds in all.
    """
    seen = []
    stats = CorpusStats()  # of the whole shard once the loop ends: both splits were read
    for document in iter_documents(
        config, split=split, process_index=process_index, process_count=process_count, stats=stats
    ):
        seen.append(document.doc_id)
        if len(seen) == 2:
            return
    if process_count == 1 and stats.documents_read < 2:
        raise CorpusError(_too_few_documents(config, stats.documents_read))
    source = {
        "text": f"config.data.text_files={config.text_files!r}",
        "tfds": f"TFDS dataset {config.tfds_name!r}",
    }.get(config.source, "the built-in corpus")
    if process_count == 1 and config.eval_fraction > 0 and stats.documents_read < _SPLITTABLE:
        # A split short of two in a corpus this small is its size, not the fraction held out.
        raise CorpusError(
            f"{source}: the corpus is too small, {_documents(stats.documents_read)}: "
            f"next-sentence prediction needs 2 in each split, about "
            f"{max(_documents_needed(config.eval_fraction), _SPLITTABLE)} at "
            f"config.data.eval_fraction={config.eval_fraction}; add documents"
        )
    where = f"{source}: the {split} split"
    if process_count > 1:
        where += f" of {shard} {process_index} of {process_count}"
    hints = list(hints)
    if split == "eval":
        hints.append("raise config.data.eval_fraction")
    elif config.eval_fraction > 0:
        hints.append(f"lower config.data.eval_fraction={config.eval_fraction}")
    hint = f" ({'; '.join(hints)})" if hints else ""
    total = _documents(stats.documents_read)
    of = f"its share's {total}" if process_count > 1 else f"the corpus's {total}"
    if not seen:
        raise CorpusError(f"{where} has no documents, of {of}{hint}")
    raise CorpusError(
        f"{where} has a single document ({seen[0]}), of {of}; next-sentence prediction "
        f"needs NotNext segments from another document{hint}"
    )


# The fewest documents that an eval_fraction of one half splits into two and two more
# often than not (6: 78% of the splits; 5: 63%, 4: 38%).
_SPLITTABLE = 6


def _documents_needed(eval_fraction: float) -> int:
    """The documents a corpus needs for 2 in each split, on average, when `eval_fraction`
    of them are held out (2 when none are)."""
    if not 0 < eval_fraction < 1:
        return 2
    return math.ceil(2 / min(eval_fraction, 1 - eval_fraction) - 1e-9)


def _too_few_documents(config: DataConfig, count: int) -> str:
    """What is wrong with a corpus of fewer than two documents, naming its files."""
    if config.source == "text":
        files = list_files(config)
        described = [_describe_text_file(path) for path in files[:_FILES_DESCRIBED]]
        if len(files) > _FILES_DESCRIBED:
            described.append(f"{len(files) - _FILES_DESCRIBED} more files")
        what = f"config.data.text_files: {'; '.join(described)}"
        if len(files) > 1 and count:
            what += f"; {_documents(count)} in all"
    elif config.source == "tfds":
        what = (
            f"TFDS dataset {config.tfds_name!r}, split {config.tfds_split!r}: {_documents(count)}"
        )
    else:
        what = f"the built-in corpus: {_documents(count)}"
    if not count:
        return f"{what}; no documents to pretrain on ({_FORMAT})"
    need = "2 in the train split and, to evaluate, 2 in the held-out one"
    if config.eval_fraction == 0:
        need = "at least 2"
    return f"{what}; next-sentence prediction pairs sentences of two documents: it needs {need}"


# Files named one by one when a corpus is too small; the rest are counted.
_FILES_DESCRIBED = 5
_FORMAT = "a sentence a line, a blank line between documents"


def _describe_text_file(path: str) -> str:
    """`PATH: empty`, `PATH: only blank lines` or `PATH: N documents`."""
    stats = CorpusStats()
    records = _read_text_files([path], stats, EPOCH_START)
    count = sum(1 for _ in _select_split(records, False, 0.0, stats))
    if count:
        return f"{path}: {_documents(count)}"
    return f"{path}: {'only blank lines' if stats.empty_lines_skipped else 'empty'}"


def _documents(count: int) -> str:
    return f"{count:,} document{'' if count == 1 else 's'}"


def _select_split(
    records: Iterable[_Record], want_eval: bool, eval_fraction: float, stats: CorpusStats
) -> Iterator[Document]:
    for doc_id, sentences, defects, position in records:
        stats.merge(defects)
        if not sentences:
            continue
        stats.documents_read += 1
        stats.sentences_read += len(sentences)
        if is_eval_document(sentences, eval_fraction) != want_eval:
            stats.documents_in_other_split += 1
            continue
        yield Document(doc_id, sentences, position)


def _shard_by_element(
    records: Iterable[_Record], process_index: int, process_count: int
) -> Iterator[_Record]:
    """Keeps every process_count-th document; defect-only records go with the next one."""
    for record in records:
        ordinal = record[3].documents - bool(record[1])  # the documents before this one
        if ordinal % process_count == process_index:
            yield record


def _refuse_tfrecord() -> NoReturn:
    raise ConfigError(
        "config.data.source='tfrecord' holds finished training instances, not documents; "
        "read it with the TFRecord reader"
    )


# ----------------------------------------------------------------------------- text files

# A line keeps at most this many bytes (_bounded_lines): a sentence this long is already
# far beyond a 512-token sequence (about 2 KB), and a line of megabytes (a binary, a
# minified dump) kept whole would cost a stream some 60 bytes of memory a byte.
MAX_LINE_BYTES = 1 << 16
# A file whose first bytes are this much NUL or invalid UTF-8 is not text.
_SNIFF_BYTES, _MOST_INVALID = 1 << 16, 0.1


def _open_text_file(path: str):
    """A binary file object of a local or Cloud Storage file, `.gz` decompressed."""
    try:
        if "://" in path:
            raw = io.BufferedReader(_GFileReader(tf.io.gfile.GFile(path, "rb")), 1 << 20)
            return gzip.GzipFile(fileobj=raw, mode="rb") if path.endswith(".gz") else raw
        return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")  # noqa: SIM115
    except (OSError, tf.errors.OpError) as e:
        raise CorpusError(f"cannot open {path!r}: {e}") from e


class _GFileReader(io.RawIOBase):
    """A GFile as a raw stream, so io.BufferedReader gives it `readline(size)` and seeks."""

    def __init__(self, gfile):
        self._gfile = gfile

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._gfile.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._gfile.seek(offset, whence)
        return self._gfile.tell()

    def tell(self) -> int:
        return self._gfile.tell()

    def close(self) -> None:
        self._gfile.close()
        super().close()


def _check_text_file(path: str) -> None:
    """Fails unless `path` opens, decompresses if `.gz`, and starts with text."""
    with _open_text_file(path) as f:
        try:
            sample = f.read(_SNIFF_BYTES)
        except (OSError, EOFError, tf.errors.OpError) as e:
            raise CorpusError(f"cannot read {path!r}: {e}") from e
    bad = _decode(sample)[1] + sample.count(b"\0")
    if bad > _MOST_INVALID * len(sample):
        raise CorpusError(
            f"config.data.text_files: {path!r} is not text: {bad:,} of its first "
            f"{len(sample):,} bytes are NUL or not UTF-8 (UTF-16, or a binary file?)"
        )


def _bounded_lines(f) -> Iterator[tuple[bytes, int, int]]:
    """(line, bytes of the file it took, bytes of it skipped) for each line of `f`.

    A line longer than MAX_LINE_BYTES keeps its first MAX_LINE_BYTES, cut after
    their last space (at a character boundary if they have none); the rest is
    read in pieces of that size and skipped. Skipped, not kept as more
    sentences: a document holds all of its lines, and a chunk of documents is
    tokenized at once, so every piece of the line would be in memory together,
    tokens and all (docs/pretraining.md has the figures).
    """
    while True:
        raw = f.readline(MAX_LINE_BYTES)
        if not raw:
            return
        if raw.endswith(b"\n") or len(raw) < MAX_LINE_BYTES:
            yield raw, len(raw), 0
            continue
        rest = f.readline(MAX_LINE_BYTES)
        if rest in (b"", b"\n", b"\r\n"):  # exactly MAX_LINE_BYTES: not longer
            yield raw + rest, len(raw) + len(rest), 0
            continue
        taken = len(raw) + len(rest)
        while len(rest) == MAX_LINE_BYTES and not rest.endswith(b"\n"):
            rest = f.readline(MAX_LINE_BYTES)
            taken += len(rest)
        cut = raw.rfind(b" ") + 1
        if not cut:  # no space: back off from the end to where a UTF-8 character starts
            cut = len(raw) - 4
            while 0x80 <= raw[cut] < 0xC0:
                cut -= 1
        yield raw[:cut], taken, taken - cut - rest.endswith(b"\n")


def _text_records(
    files: list[str],
    process_index: int,
    process_count: int,
    shuffle_seed: int | None,
    stats: CorpusStats,
    start: ReaderPosition,
) -> Iterator[_Record]:
    by_file = len(files) >= process_count
    if by_file:
        files = files[process_index::process_count]
    if shuffle_seed is not None:
        files = list(files)
        random.Random(shuffle_seed).shuffle(files)
    records = _read_text_files(files, stats, start)
    return records if by_file else _shard_by_element(records, process_index, process_count)


def _read_text_files(
    files: list[str], stats: CorpusStats, start: ReaderPosition
) -> Iterator[_Record]:
    documents = start.documents
    for index in range(start.file, len(files)):
        path = files[index]
        here = start if index == start.file else ReaderPosition(index, 0, 0, documents)
        with _open_text_file(path) as f:
            stats.files_read += 1
            try:
                if here.offset:
                    _seek_line_start(path, f, here.offset)
                for record in _read_documents(path, _bounded_lines(f), here):
                    documents = record[3].documents
                    yield record
            except (OSError, EOFError, tf.errors.OpError) as e:
                raise CorpusError(f"cannot read {path!r}: {e}") from e


def _seek_line_start(path: str, f, offset: int) -> None:
    """Seeks to `offset`, which must start a line or end the file."""
    f.seek(offset - 1)
    previous = f.read(1)
    if previous == b"\n":
        return
    if not previous or f.read(1):  # past the end, or inside a line
        raise CorpusError(f"{path!r}: byte offset {offset} is not the start of a line")


def _read_documents(
    path: str, lines: Iterable[tuple[bytes, int, int]], start: ReaderPosition
) -> Iterator[_Record]:
    """The records of one file from `start`, where `lines` (of _bounded_lines) stands."""
    file, offset, ordinal, documents = start
    sentences = []
    defects = CorpusStats()
    for raw, length, skipped in lines:
        offset += length
        defects.long_lines_cut += skipped > 0
        defects.long_line_bytes_skipped += skipped
        line, invalid = _decode(raw)
        defects.invalid_bytes += invalid
        defects.control_characters += _count_control_characters(line)
        line = line.strip()
        if line:
            sentences.append(line)
        elif sentences:
            ordinal, documents = ordinal + 1, documents + 1
            position = ReaderPosition(file, offset, ordinal, documents)
            yield f"{path}:{ordinal - 1}", tuple(sentences), defects, position
            sentences = []
            defects = CorpusStats()
        else:
            defects.empty_lines_skipped += 1
    position = ReaderPosition(file, offset, ordinal + bool(sentences), documents + bool(sentences))
    if sentences:
        yield f"{path}:{ordinal}", tuple(sentences), defects, position
    elif defects != CorpusStats():
        yield "", (), defects, position


def _decode(raw: bytes) -> tuple[str, int]:
    """UTF-8 text with each invalid byte replaced by U+FFFD, and the number replaced."""
    try:
        return raw.decode("utf-8"), 0
    except UnicodeDecodeError:
        text = raw.decode("utf-8", "surrogateescape")
        return _ESCAPED_BYTE.subn("\ufffd", text)


def _count_control_characters(text: str) -> int:
    if text.isprintable():  # fast path; false for any Cc/Cf, but also for tabs and spaces
        return 0
    return len(_control_character_pattern().findall(text))


@functools.cache
def _control_character_pattern() -> re.Pattern:
    """Matches one Cc or Cf character other than \\t \\n \\r, per this Python's Unicode tables."""
    ranges = []
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        if unicodedata.category(char) in ("Cc", "Cf") and char not in "\t\n\r":
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1][1] = code
            else:
                ranges.append([code, code])
    return re.compile(
        "[" + "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges) + "]"
    )


# ----------------------------------------------------------------------------- TFDS


def _tfds_builder(config: DataConfig):
    # Imported here: tensorflow_datasets takes seconds to import and only this source needs it
    # (after TensorFlow, above: tfds' lazy `tf` alias breaks when tfds is imported first).
    import tensorflow_datasets as tfds

    try:
        return tfds.builder(config.tfds_name, data_dir=config.tfds_data_dir or None)
    except (ValueError, OSError) as e:  # DatasetNotFoundError is a ValueError
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CorpusError(
            f"TFDS dataset config.data.tfds_name={config.tfds_name!r} "
            f"(data_dir={config.tfds_data_dir or 'the TFDS default'!r}): {first_line}"
        ) from e


def _num_tfds_examples(builder, config: DataConfig) -> int:
    try:
        return builder.info.splits[config.tfds_split].num_examples
    except (KeyError, ValueError) as e:
        raise CorpusError(
            f"TFDS dataset {config.tfds_name!r} has no split "
            f"config.data.tfds_split={config.tfds_split!r}: {e}"
        ) from e


def _check_tfds_text_field(builder, config: DataConfig) -> None:
    if config.tfds_text_field not in builder.info.features:
        raise CorpusError(
            f"TFDS dataset {config.tfds_name!r} has no feature "
            f"config.data.tfds_text_field={config.tfds_text_field!r}; "
            f"it has {sorted(builder.info.features)}"
        )


def _tfds_record(doc_id: str, raw: bytes) -> tuple[str, tuple[str, ...], CorpusStats]:
    text, invalid = _decode(raw)
    defects = CorpusStats(invalid_bytes=invalid, control_characters=_count_control_characters(text))
    return doc_id, tuple(split_sentences(text)), defects


def _tfds_records(
    config: DataConfig,
    process_index: int,
    process_count: int,
    shuffle_seed: int | None,
    start: ReaderPosition,
) -> Iterator[_Record]:
    import tensorflow_datasets as tfds  # see _tfds_builder

    builder = _tfds_builder(config)
    _check_tfds_text_field(builder, config)
    split = config.tfds_split
    by_element = False
    if process_count > 1:
        # An even split with fewer examples than processes would leave some empty, which TFDS rejects.
        if _num_tfds_examples(builder, config) >= process_count:
            split = tfds.even_splits(split, process_count, drop_remainder=False)[process_index]
        else:
            by_element = True
    read_config = tfds.ReadConfig(add_tfds_id=True, shuffle_seed=shuffle_seed, try_autocache=False)
    try:
        dataset = builder.as_dataset(
            split=split, shuffle_files=shuffle_seed is not None, read_config=read_config
        )
    except (AssertionError, KeyError, ValueError) as e:  # TFDS asserts that the data exists
        raise CorpusError(
            f"TFDS dataset {config.tfds_name!r} (data_dir={builder.data_dir!r}), "
            f"split {config.tfds_split!r}: {e}"
        ) from e
    field = config.tfds_text_field
    # Resuming skips the records read before: raw reads, no sentence splitting.
    dataset = dataset.skip(start.offset)
    # Graph code only: autograph's rewrite of Python source costs seconds at a program start.
    by_id = tf.autograph.experimental.do_not_convert(lambda x: (x["tfds_id"], x[field]))
    dataset = dataset.map(by_id)
    # Reading runs ahead in TensorFlow's threads while Python splits sentences.
    dataset = dataset.prefetch(tf.data.AUTOTUNE)
    prefix = f"tfds:{config.tfds_name}:"
    records = (
        _tfds_record(prefix + tfds_id.decode(), text)
        for tfds_id, text in dataset.as_numpy_iterator()
    )
    records = _numbered(records, start)
    return _shard_by_element(records, process_index, process_count) if by_element else records


def _builtin_records(
    process_index: int, process_count: int, shuffle_seed: int | None, start: ReaderPosition
) -> Iterator[_Record]:
    records = list(_builtin_with_defects())
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(records)
    return _shard_by_element(
        _numbered(records[start.offset :], start), process_index, process_count
    )


@functools.cache
def _builtin_with_defects() -> tuple[tuple[str, tuple[str, ...], CorpusStats], ...]:
    """The built-in documents with their defects, counted once: the corpus is fixed, and a
    stream goes over it several times a second."""
    return tuple(
        (
            doc_id,
            sentences,
            CorpusStats(control_characters=_count_control_characters("\n".join(sentences))),
        )
        for doc_id, sentences in builtin_corpus.documents()
    )


def _numbered(
    records: Iterable[tuple[str, tuple[str, ...], CorpusStats]], start: ReaderPosition
) -> Iterator[_Record]:
    """Records of a source read by record index (builtin, TFDS), from `start`, with positions."""
    offset, documents = start.offset, start.documents
    for doc_id, sentences, defects in records:
        offset, documents = offset + 1, documents + bool(sentences)
        yield doc_id, sentences, defects, ReaderPosition(0, offset, 0, documents)
