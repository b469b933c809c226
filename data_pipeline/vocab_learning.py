"""Learns the vocabulary a run tokenizes with when config.data.vocab_file is ''
(and `python -m data_pipeline.build_vocab`'s work).

Every kind of learned vocabulary starts with vocab.SPECIAL_TOKENS at ids 0-4
(the released English BERT vocab has them elsewhere; read ids from the Vocab).

WordPiece (vocab.txt, one token per line, the line number is the id): after the
specials come the single characters of the alphabet, then the learned pieces by
decreasing frequency; a piece that continues a word carries the '##' prefix.
Words are split exactly as `tokenizer.WordPieceTokenizer.words` splits them
(cleaning, lowercasing and accent stripping when uncased, punctuation and CJK
splits), counted in at most `max_words_in_memory` entries (see WordCounter), and
handed to tensorflow-text's WordPiece learner.

SentencePiece (.model, and a .vocab listing beside it): unigram or BPE; the same
five specials, [CLS] [SEP] [MASK] as user-defined symbols; no BOS/EOS; NFKC
normalization. Uncased: the training sentences are lowercased in Python before
SentencePiece sees them, exactly as tokenizer.SentencePieceTokenizer lowercases
its input in graph; the model itself keeps case, so code that bypasses that
tokenizer must lowercase too.

Byte-level BPE (tokenizer.json, for config.data.tokenizer='bpe'): built as
ModernBERT's is (a modified OLMo tokenizer; answerdotai/ModernBERT-base's
tokenizer.json): a ByteLevel pre-tokenizer without a prefix space, a BPE model,
[CLS] $A [SEP] and [CLS] $A [SEP] $B [SEP] as its post-processor, the five
specials as special added tokens. Hugging Face tokenizers' BpeTrainer learns it
from the train sentences, the 256 bytes always in its alphabet (so no text is
[UNK]). Uncased, a Lowercase normalizer is part of the file, so any user of it
lowercases. The trainer counts the distinct pre-tokenizer pieces in memory.

Only the train split is read, so held-out documents stay unseen. A learning that takes
long says how far it is every 30 s on stderr (progress.py): the words counted, then the
time the learner has taken; for SentencePiece and BPE, the sentences read and the time.
"""

import collections
import hashlib
import io
import itertools
import json
import math
import os
import platform
import time
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import sentencepiece as spm
import tensorflow as tf
import tokenizers
from absl import logging
from sentencepiece import sentencepiece_model_pb2
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

from data_pipeline import builtin_corpus, files, progress
from data_pipeline import corpus as corpus_lib
from data_pipeline import tokenizer as tokenizer_lib
from data_pipeline import vocab as vocab_lib
from data_pipeline.config import DataConfig, from_config
from data_pipeline.errors import ConfigError

# Bump when a change here changes what is learned, so cached vocabularies are relearned.
_ALGORITHM_VERSION = 1
# tensorflow-text's learner default; longer words are left out of learning (they are
# still tokenized, into pieces learned from shorter words).
_MAX_PIECE_CHARS = 50
# A learned size up to this share above vocab_size is accepted, then cut to fit.
_SLACK = 0.05
_SENTENCES_PER_BATCH = 1024
_UNUSED_PIECE = sentencepiece_model_pb2.ModelProto.SentencePiece.Type.UNUSED


class WordCounter:
    """Counts words in a dict that never holds more than `max_words` entries.

    Pruning rule: when a new word arrives and the dict is full, every word whose
    count is at most the median count is dropped (at least half the entries,
    ties included), then the new word is inserted. Frequent words therefore
    survive; a dropped word that comes back restarts from its new occurrences, so
    a count is exact for words never dropped and an underestimate otherwise.
    The result depends only on the order of the words, which is fixed for an
    unshuffled corpus, so learning is deterministic. (While pruning, the kept
    half is copied: the peak is 1.5 x max_words entries for a moment.)
    """

    def __init__(self, max_words: int):
        if max_words < 1:
            raise ValueError(f"max_words must be at least 1, got {max_words}")
        self.max_words = max_words
        self.counts: dict[bytes, int] = {}
        self.total_words = 0
        self.prunings = 0
        # The highest count dropped by a pruning: rarer words may be missing or undercounted.
        self.max_threshold = 0
        self.peak_size = 0

    def add(self, words: Iterable[bytes], *, skipped: int = 0) -> None:
        """Counts `words`; `skipped` more were seen but not counted (in total_words only)."""
        batch = collections.Counter(words)
        self.total_words += batch.total() + skipped
        counts = self.counts
        for word, n in batch.items():
            old = counts.get(word)
            if old is None and len(counts) >= self.max_words:
                counts = self._prune()
            counts[word] = n if old is None else old + n
        self.peak_size = max(self.peak_size, len(counts))

    def _prune(self) -> dict[bytes, int]:
        self.peak_size = max(self.peak_size, len(self.counts))
        values = np.fromiter(self.counts.values(), dtype=np.int64, count=len(self.counts))
        middle = len(values) // 2
        threshold = int(np.partition(values, middle)[middle])
        self.counts = {w: c for w, c in self.counts.items() if c > threshold}
        self.prunings += 1
        self.max_threshold = max(self.max_threshold, threshold)
        return self.counts

    def decoded_counts(self) -> dict[str, int]:
        return {w.decode("utf-8", errors="replace"): c for w, c in self.counts.items()}


def count_words(
    config: DataConfig,
    *,
    max_words_in_memory: int = 2_000_000,
    max_word_chars: int = _MAX_PIECE_CHARS,
) -> WordCounter:
    """Counts the train split's words, split as the WordPiece tokenizer splits them.

    Words longer than `max_word_chars` (or config.max_chars_per_word, which
    makes them [UNK]) are counted in `total_words` only.
    """
    word_limit = min(max_word_chars, config.max_chars_per_word)
    tokenizer = _word_splitter(config)

    @tf.autograph.experimental.do_not_convert  # graph code: no autograph rewrite at start
    def words(sentences):
        flat = tokenizer.words(sentences).flat_values
        keep = tf.strings.length(flat, unit="UTF8_CHAR") <= word_limit
        return tf.boolean_mask(flat, keep), tf.size(flat)

    errors = []
    dataset = _sentence_batches(config, split="train", errors=errors).map(
        words, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    counter = WordCounter(max_words_in_memory)
    counting = progress.Progress("counting the train split's words", unit="words")
    for kept, seen in dataset.prefetch(tf.data.AUTOTUNE).as_numpy_iterator():
        counter.add(kept.tolist(), skipped=int(seen) - len(kept))
        counting.update(counter.total_words)
    counting.finish()
    if errors:
        raise errors[0]
    return counter


def wordpiece_tokens(word_counts: dict[str, int], vocab_size: int) -> list[str]:
    """The specials, then a WordPiece vocabulary learned from (word, count) pairs.

    Uses tensorflow-text's learner (`learn_with_thresh`: a piece enters when it
    is seen at least `threshold` times) with its own search for the threshold
    (see _search_threshold), then cuts the rarest pieces to exactly
    `vocab_size` entries. When the words hold fewer distinct pieces even at
    threshold 1 (a small corpus), [unusedN] placeholders fill the rest, logged.
    The alphabet is capped so that its characters and their '##' forms fill at
    most the non-special entries; words with a character outside it are left out
    of learning (and become [UNK] when tokenized).
    """
    specials = list(vocab_lib.SPECIAL_TOKENS)
    room = vocab_size - len(specials)
    if room < 2:
        raise vocab_lib.VocabError(f"vocab_size={vocab_size} leaves no room after the specials")
    params = learner.Params(
        upper_thresh=None,
        lower_thresh=1,
        num_iterations=4,
        max_input_tokens=-1,
        max_token_length=_MAX_PIECE_CHARS,
        max_unique_chars=min(1000, room // 2),
        vocab_size=vocab_size,
        slack_ratio=0.0,
        include_joiner_token=True,
        joiner="##",
        reserved_tokens=specials,
    )
    words = learner.get_input_words(list(word_counts.items()), specials, _MAX_PIECE_CHARS)
    alphabet = learner.get_allowed_chars(words, params.max_unique_chars)
    words = learner.filter_input_words(words, alphabet, -1)
    if not words:
        raise vocab_lib.VocabError("the corpus has no words to learn a vocabulary from")
    # The learner adds "##c" for every character c, but punctuation and CJK are always
    # words of their own, so their "##" forms would be dead entries.
    inner = {c for word, _ in words for c in word[1:]}
    learned = _search_threshold(words, vocab_size, params, keep=lambda t: _is_live(t, inner))
    tokens = _fit(learned[len(specials) :], room)
    if len(tokens) < room:
        logging.warning(
            "The corpus holds only %d distinct word pieces; %d [unusedN] placeholders fill "
            "the vocabulary to vocab_size=%d.",
            len(tokens),
            room - len(tokens),
            vocab_size,
        )
        tokens += _placeholders(room - len(tokens), tokens)
    return specials + tokens


def _placeholders(count: int, taken: Iterable[str] = ()) -> list[str]:
    """BERT's filler entries: vocab.Vocab marks them special, so no text or masking yields them."""
    taken = set(taken)
    names = (f"[unused{i}]" for i in itertools.count())
    return list(itertools.islice((n for n in names if n not in taken), count))


def _is_live(token: str, inner_characters: set[str]) -> bool:
    """False for "##c" when no word has the character c after its first position."""
    return not (len(token) == 3 and token.startswith("##") and token[2] not in inner_characters)


def _search_threshold(
    words: list[tuple[str, int]], vocab_size: int, params, keep: Callable[[str], bool]
) -> list[str]:
    """The vocabulary of the highest threshold that gives at least vocab_size entries.

    Accepts any size in [vocab_size, vocab_size * (1 + _SLACK)] (_fit cuts the
    rest). The vocabulary shrinks roughly as a power of the threshold, so each
    guess interpolates in log-log space between the closest sizes seen on either
    side: a handful of learner runs instead of tensorflow-text's ~log2(max count)
    binary-search steps, each of which re-learns from all words.
    """
    counts = sorted((c for _, c in words), reverse=True)
    # No piece is seen more often than all words together.
    ceiling = sum(counts) + 1
    target = vocab_size * (1 + _SLACK / 2)
    above = below = None  # (threshold, vocab) with >= and < vocab_size entries
    previous = None
    threshold = max(1, counts[min(vocab_size // 2, len(counts) - 1)])
    while True:
        vocab = [t for t in learner.learn_with_thresh(words, threshold, params) if keep(t)]
        logging.info("WordPiece threshold %d gives %d entries.", threshold, len(vocab))
        if len(vocab) >= vocab_size:
            if len(vocab) <= vocab_size * (1 + _SLACK):
                return vocab
            if above is None or threshold > above[0]:
                above = (threshold, vocab)
        elif threshold == 1:
            return vocab
        elif below is None or threshold < below[0]:
            below = (threshold, vocab)
        # size ~ threshold ** -slope, the slope measured on the last two runs (1 at first).
        slope = 1.0
        if previous and previous[0] != threshold and previous[1] != len(vocab):
            slope = math.log(previous[1] / len(vocab)) / math.log(threshold / previous[0])
        previous = (threshold, len(vocab))
        guess = threshold * (len(vocab) / target) ** (1 / min(max(slope, 0.1), 10.0))
        low = above[0] + 1 if above else 1
        high = below[0] - 1 if below else min(threshold * 16, ceiling)
        if low > high:
            return above[1]
        threshold = min(max(round(guess), low), high)


def _fit(learned: list[str], room: int) -> list[str]:
    """Cuts the rarest multi-character pieces, keeping every single character (and its ## form).

    The learner lists pieces by decreasing count after the alphabet, so the cut
    drops the least frequent ones; without the characters some words could not
    be segmented at all.
    """
    unique = [t for t in dict.fromkeys(learned) if t not in vocab_lib.SPECIAL_TOKENS]
    characters = [t for t in unique if len(t.removeprefix("##")) == 1]
    pieces = [t for t in unique if len(t.removeprefix("##")) != 1]
    kept = set(characters + pieces[: max(room - len(characters), 0)])
    return [t for t in unique if t in kept]


def learn_wordpiece_vocab(
    config: DataConfig, *, vocab_size: int, output_path: str, max_words_in_memory: int = 2_000_000
) -> vocab_lib.Vocab:
    """Learns a WordPiece vocab.txt of `vocab_size` entries from the train split; see the module doc.

    Memory is bounded by `max_words_in_memory` distinct words, whatever the
    corpus size; so is the learner's time (pure Python, roughly distinct words
    x word length squared per run, a few runs: minutes at a million words).
    """
    corpus_lib.check_sources(config)
    start = time.monotonic()
    counter = count_words(config, max_words_in_memory=max_words_in_memory)
    counted = time.monotonic()
    logging.info(
        "Counted %d words (%d distinct kept, %d prunings, max pruned count %d) in %.1f s.",
        counter.total_words,
        len(counter.counts),
        counter.prunings,
        counter.max_threshold,
        counted - start,
    )
    learning = progress.Progress(
        f"learning WordPiece pieces from {len(counter.counts):,} distinct words"
    )
    with learning.heartbeat():
        tokens = wordpiece_tokens(counter.decoded_counts(), vocab_size)
    files.atomic_write(output_path, "".join(t + "\n" for t in tokens).encode("utf-8"))
    logging.info(
        "Learned %d WordPiece entries in %.1f s; wrote %s.",
        len(tokens),
        time.monotonic() - counted,
        output_path,
    )
    return vocab_lib.load_vocab(output_path)


def train_sentencepiece(
    config: DataConfig,
    *,
    vocab_size: int,
    output_prefix: str,
    model_type: str = "unigram",
    max_sentences: int = 1_000_000,
) -> str:
    """Trains a SentencePiece model on the train split; returns `output_prefix + '.model'`.

    Sentences are streamed; SentencePiece keeps a uniform random sample of at
    most `max_sentences` of them (reservoir sampling), which bounds memory.
    Also writes `output_prefix + '.vocab'` (piece and score per line). The
    model has exactly `vocab_size` pieces: when the corpus supports fewer, unused
    [unusedN] pieces (never produced by encoding) fill the rest, which is logged.
    """
    if model_type not in ("unigram", "bpe"):
        raise ValueError(f"model_type must be 'unigram' or 'bpe', got {model_type!r}")
    corpus_lib.check_sources(config)
    model = io.BytesIO()
    errors = []
    training = progress.Progress(
        f"training a {model_type} SentencePiece model", unit="sentences read"
    )
    sentences = _counted(_stop_on_error(_sentencepiece_sentences(config), errors), training)
    try:
        with training.heartbeat():
            spm.SentencePieceTrainer.train(
                sentence_iterator=sentences,
                model_writer=model,
                model_type=model_type,
                vocab_size=vocab_size,
                hard_vocab_limit=False,
                pad_id=0,
                pad_piece="[PAD]",
                unk_id=1,
                unk_piece="[UNK]",
                bos_id=-1,
                eos_id=-1,
                user_defined_symbols=list(vocab_lib.SPECIAL_TOKENS[2:]),
                normalization_rule_name="nmt_nfkc",
                input_sentence_size=max_sentences,
                shuffle_input_sentence=True,
                num_threads=os.cpu_count() or 1,
                minloglevel=1,
            )
    except RuntimeError as e:
        if not errors:
            raise vocab_lib.VocabError(f"SentencePiece training failed: {e}") from e
    if errors:
        raise errors[0]
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model.getvalue())
    pieces = [p.piece for p in proto.pieces]
    if pieces[: len(vocab_lib.SPECIAL_TOKENS)] != list(vocab_lib.SPECIAL_TOKENS):
        raise vocab_lib.VocabError(f"SentencePiece put the specials at {pieces[:5]}")
    if len(pieces) < vocab_size:
        logging.warning(
            "The corpus supports only %d SentencePiece pieces; %d unused [unusedN] pieces "
            "fill the model to vocab_size=%d.",
            len(pieces),
            vocab_size - len(pieces),
            vocab_size,
        )
        for name in _placeholders(vocab_size - len(pieces), pieces):
            proto.pieces.add(piece=name, score=0.0, type=_UNUSED_PIECE)
            pieces.append(name)
    scores = [p.score for p in proto.pieces]
    listing = "".join(f"{p}\t{score:g}\n" for p, score in zip(pieces, scores, strict=True))
    path = output_prefix + ".model"
    files.atomic_write(output_prefix + ".vocab", listing.encode("utf-8"))
    files.atomic_write(path, proto.SerializeToString())
    logging.info(
        "Trained a %s SentencePiece model of %d pieces in %.1f s; wrote %s.",
        model_type,
        len(pieces),
        training.elapsed(),
        path,
    )
    return path


def learn_bpe_tokenizer(
    config: DataConfig, *, vocab_size: int, output_path: str
) -> vocab_lib.Vocab:
    """Learns a byte-level BPE tokenizer.json of `vocab_size` entries; see the module doc.

    When the corpus has fewer pairs to merge, [unusedN] special added tokens fill it
    (ModernBERT fills its vocabulary the same way), which is logged.
    """
    corpus_lib.check_sources(config)
    start = time.monotonic()
    specials = list(vocab_lib.SPECIAL_TOKENS)
    tokenizer = tokenizers.Tokenizer(models.BPE())
    if config.do_lower_case:
        tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    errors = []
    training = progress.Progress("learning a byte-level BPE tokenizer", unit="sentences read")
    sentences = _counted(_stop_on_error(_sentences(config), errors), training)
    with training.heartbeat():
        tokenizer.train_from_iterator(_batched(sentences), trainer=trainer)
    if errors:
        raise errors[0]
    learned = tokenizer.get_vocab_size(with_added_tokens=True)
    if learned < vocab_size:
        logging.warning(
            "The corpus supports only %d BPE entries; %d [unusedN] special tokens fill the "
            "tokenizer to vocab_size=%d.",
            learned,
            vocab_size - learned,
            vocab_size,
        )
        names = _placeholders(vocab_size - learned, tokenizer.get_vocab(with_added_tokens=True))
        tokenizer.add_special_tokens(names)
    cls_id, sep_id = (tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]"))
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    files.atomic_write(output_path, tokenizer.to_str().encode("utf-8"))
    logging.info(
        "Learned a byte-level BPE tokenizer of %d entries in %.1f s; wrote %s.",
        tokenizer.get_vocab_size(with_added_tokens=True),
        time.monotonic() - start,
        output_path,
    )
    return vocab_lib.load_vocab(output_path)


def _counted(items: Iterator, counter: progress.Progress) -> Iterator:
    """`items`, each counted by `counter` as it passes."""
    for item in items:
        counter.advance()
        yield item


def _batched(items: Iterator[str]) -> Iterator[list[str]]:
    """Lists of items: the trainer then crosses into Python once per list."""
    while batch := list(itertools.islice(items, _SENTENCES_PER_BATCH)):
        yield batch


# What a learned vocabulary of each tokenizer is written as (name.json describes it).
_SUFFIXES = {"wordpiece": ".txt", "sentencepiece": ".model", "bpe": ".tokenizer.json"}


def resolve_vocab_file(config: DataConfig) -> str:
    """config.vocab_file when set, else a vocabulary learned once from the train split and
    cached (see cache_key)."""
    if config.vocab_file:
        if not tf.io.gfile.exists(config.vocab_file):
            raise vocab_lib.VocabError(
                f"config.data.vocab_file={config.vocab_file!r}: no such file"
            )
        return config.vocab_file
    if config.source == "tfrecord":
        raise ConfigError(
            "config.data.vocab_file='': source='tfrecord' holds token ids, so set "
            "vocab_file to the vocabulary they were made with"
        )
    corpus_lib.check_sources(config)
    key = cache_key(config)
    directory = cache_dir(config)
    suffix = _SUFFIXES[config.tokenizer]
    name = (
        f"{config.tokenizer}-{config.vocab_size}-"
        f"{'uncased' if config.do_lower_case else 'cased'}-{config.source}-{key[:16]}"
    )
    path = os.path.join(directory, name + suffix)
    if tf.io.gfile.exists(path):
        logging.info("Using the cached vocabulary %s.", path)
        return path
    # The vocabulary serves a pretraining stream: a corpus it cannot make (an empty file,
    # one document) is named before the learning, not as a vocabulary without words.
    corpus_lib.check_two_documents(config, split="train")
    logging.info(
        "config.data.vocab_file is '': learning a %d-entry %s vocabulary from the %s "
        "train split into %s.",
        config.vocab_size,
        config.tokenizer,
        config.source,
        path,
    )
    tf.io.gfile.makedirs(directory)
    if config.tokenizer == "wordpiece":
        learn_wordpiece_vocab(config, vocab_size=config.vocab_size, output_path=path)
    elif config.tokenizer == "bpe":
        learn_bpe_tokenizer(config, vocab_size=config.vocab_size, output_path=path)
    else:
        train_sentencepiece(
            config, vocab_size=config.vocab_size, output_prefix=os.path.join(directory, name)
        )
    description = json.dumps(_key_fields(config), indent=1, sort_keys=True) + "\n"
    files.atomic_write(os.path.join(directory, name + ".json"), description.encode("utf-8"))
    return path


def cache_dir(config: DataConfig) -> str:
    if config.vocab_cache_dir:
        return config.vocab_cache_dir
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "bertjax")


def cache_key(config: DataConfig) -> str:
    """A hash of everything that determines a learned vocabulary."""
    text = json.dumps(_key_fields(config), sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _key_fields(config: DataConfig) -> dict:
    fields = {
        "algorithm_version": _ALGORITHM_VERSION,
        "source": config.source,
        "eval_fraction": config.eval_fraction,
        "tokenizer": config.tokenizer,
        "vocab_size": config.vocab_size,
        "do_lower_case": config.do_lower_case,
        "max_chars_per_word": config.max_chars_per_word,
    }
    if config.source == "builtin":
        # The built-in corpus is this Python's own documentation, as builtin_corpus cleans it.
        fields["python_version"] = platform.python_version()
        digest = hashlib.sha256()
        for doc_id, sentences in builtin_corpus.documents():
            digest.update("\n".join((doc_id, *sentences, "")).encode("utf-8", "surrogatepass"))
        fields["builtin_corpus_sha256"] = digest.hexdigest()
    elif config.source == "text":
        # The files as found now: a changed or added file gives a new vocabulary.
        fields["text_files"] = [
            [path, *_size_and_mtime(path)] for path in corpus_lib.list_files(config)
        ]
    elif config.source == "tfds":
        fields.update(
            tfds_name=config.tfds_name,
            tfds_split=config.tfds_split,
            tfds_data_dir=config.tfds_data_dir,
            tfds_text_field=config.tfds_text_field,
        )
    return fields


def _size_and_mtime(path: str) -> tuple[int, int]:
    """A file's size and modification time in ns (gfile's local mtime has whole seconds)."""
    if "://" not in path:
        stat = os.stat(path)
        return stat.st_size, stat.st_mtime_ns
    stat = tf.io.gfile.stat(path)
    return stat.length, stat.mtime_nsec


def _sentences(config: DataConfig, split: str = "train") -> Iterator[str]:
    for document in corpus_lib.iter_documents(config, split=split):
        for sentence in document.sentences:
            if sentence.strip():
                yield sentence


def _sentencepiece_sentences(config: DataConfig) -> Iterator[str]:
    """Train sentences, lowercased as SentencePieceTokenizer lowercases them when uncased."""
    for sentence in _sentences(config):
        # tf.strings.lower, used by the tokenizer, is ICU's full lowercase, as str.lower.
        yield sentence.replace("\x00", "").lower() if config.do_lower_case else sentence


def _sentence_batches(config: DataConfig, *, split: str, errors: list) -> tf.data.Dataset:
    """Sentences in batches, so the Python generator costs once per batch, not per sentence."""

    def batches():
        sentences = _stop_on_error(_sentences(config, split), errors)
        while batch := list(itertools.islice(sentences, _SENTENCES_PER_BATCH)):
            yield batch

    return tf.data.Dataset.from_generator(
        batches, output_signature=tf.TensorSpec([None], tf.string)
    )


def _stop_on_error(items: Iterator, errors: list) -> Iterator:
    """Ends `items` at its first exception and keeps it in `errors`.

    tf.data and SentencePiece would wrap an exception raised inside their
    iteration, traceback included; the caller re-raises it as itself instead.
    """
    try:
        yield from items
    except Exception as e:
        errors.append(e)


def _word_splitter(config: DataConfig) -> tokenizer_lib.WordPieceTokenizer:
    """A WordPieceTokenizer for its `words`, which needs no vocabulary yet.

    A Vocab needs the specials plus at least one ordinary token, hence the
    placeholder "a"; WordPiece itself is never run with this vocabulary.
    """
    vocab = vocab_lib.wordpiece_vocab("<word splitter>", (*vocab_lib.SPECIAL_TOKENS, "a"))
    return tokenizer_lib.WordPieceTokenizer(
        vocab, lower_case=config.do_lower_case, max_chars_per_word=config.max_chars_per_word
    )


def _sample_summary(config: DataConfig, vocab_file: str, max_sentences: int) -> str:
    """Whole-word coverage and [UNK] share over held-out sentences (else train ones); '' if none."""
    for split in ("eval", "train"):
        sentences = list(itertools.islice(_sentences(config, split), max_sentences))
        if sentences:
            break
    else:
        return ""
    texts = tf.constant(sentences)
    tokenizer = tokenizer_lib.make_tokenizer(config, vocab_file)
    vocab = tokenizer.vocab
    ids = tokenizer.tokenize(texts).flat_values.numpy()
    words = tokenizer.words(texts).flat_values.numpy().tolist()
    if vocab.kind == "bpe":
        # A whole word is one token where it follows a space ("Ġword", byte-level).
        spaced = tokenizer.tokenize(tf.constant([b" " + w for w in words]))
        whole = int(np.sum(spaced.row_lengths().numpy() == 1))
    else:
        # A whole word is one entry: "word" for WordPiece, "\u2581word" for SentencePiece.
        prefix = vocab_lib.SENTENCEPIECE_WORD_START if vocab.is_sentencepiece else ""
        entries = set(vocab.tokens)
        whole = sum(prefix + w.decode("utf-8", errors="replace") in entries for w in words)
    unknown = int(np.sum(ids == vocab.unk_id))
    return (
        f"{len(sentences)} {'held-out' if split == 'eval' else 'train'} sentences: "
        f"{whole / max(len(words), 1):.1%} of {len(words)} words are whole "
        f"entries; {unknown / max(ids.size, 1):.2%} of {ids.size} tokens are [UNK]"
    )


def main(args) -> None:
    """python -m data_pipeline.build_vocab, once its flags are parsed."""
    config = from_config(args.config.data)
    vocab_size = config.vocab_size if args.vocab_size is None else args.vocab_size
    # Validates vocab_size as config.data.vocab_size would be.
    config = config.replace(vocab_file="", vocab_size=vocab_size)
    start = time.monotonic()
    if config.tokenizer == "wordpiece":
        path = args.output
        learn_wordpiece_vocab(config, vocab_size=vocab_size, output_path=path)
    elif config.tokenizer == "bpe":
        path = args.output
        learn_bpe_tokenizer(config, vocab_size=vocab_size, output_path=path)
    else:
        path = train_sentencepiece(
            config,
            vocab_size=vocab_size,
            output_prefix=args.output.removesuffix(".model"),
            model_type=args.model_type,
        )
    seconds = time.monotonic() - start
    entries = len(vocab_lib.load_vocab(path))
    summary = _sample_summary(config, path, args.sample_sentences)
    case = "uncased" if config.do_lower_case else "cased"
    print(f"{path}: {entries} {config.tokenizer} entries ({case}), learned in {seconds:.1f} s")
    if summary:
        print(summary)
