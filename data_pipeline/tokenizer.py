"""Text to token ids in tf.data: BERT's WordPiece, sentencepiece, or byte-level BPE.

`WordPieceTokenizer` reproduces the original BERT tokenization (google-research/bert
`tokenization.py`: BasicTokenizer, then WordPiece) with tensorflow-text ops, so it
runs inside `tf.data` without Python:

    drop controls -> [uncased: lowercase, NFD, strip Mn] -> split on whitespace,
    punctuation and CJK ideographs -> words over max_chars_per_word characters
    become [UNK] -> WordPiece, greedy longest-match-first

tensorflow-text's own BertTokenizer is not used because it differs from the
original in four ways: it replaces control characters by a space (the original
drops them, so "a<ZWJ>b" is one word), it case-folds ("ß" -> "ss", "，" -> ",")
where the original lowercases, its whitespace is ASCII only (U+00A0 and U+3000
glue words together), and it limits words by bytes (100) where the original
limits them by characters (200).

What remains different comes from Unicode versions: Python 3.11 has Unicode 14,
TensorFlow's ICU case tables are older and its RE2 tables newer. Over every code
point, 386 tokenize differently uncased and 30 cased, all of them assigned in
Unicode 14 or later (for example, the Vithkuqi capitals are not lowercased).

`BpeTokenizer` runs a byte-level BPE tokenizer.json (GPT-2's, RoBERTa's,
ModernBERT's) with Hugging Face `tokenizers`, called from the graph through
tf.numpy_function: tensorflow-text has no byte-level BPE op.
"""

import atexit
import itertools
import json

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text
import tokenizers

from data_pipeline.config import DataConfig
from data_pipeline.exit_calls import PythonCalls
from data_pipeline.vocab import WORDPIECE_PREFIX, Vocab, VocabError, load_vocab, read_bytes

# Dropped before anything else: U+0000, U+FFFD, and the Cc and Cf characters
# except tab, newline and carriage return. Dropping NUL first also matters to
# tf.strings.lower, which stops reading a string at a NUL.
_DROPPED = r"[\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x9F\x{FFFD}\p{Cf}]+"
# Python's str.split() whitespace once controls are gone: the Zs characters,
# U+2028 and U+2029, and tab, newline and carriage return.
_WHITESPACE = r"[\t\n\r \p{Zs}\x{2028}\x{2029}]+"
# Characters that stand alone as a word: ASCII punctuation (33-47, 58-64,
# 91-96, 123-126), every Unicode P* character, and the CJK ideograph blocks.
_ALONE = (
    r"[!-/:-@\[-`{-~\p{P}"
    r"\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}"
    r"\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]"
)
# Nonspacing marks, stripped after NFD when lowercasing. U+FFFD goes too: ICU's
# lowercasing turns invalid UTF-8 bytes into it, and the original drops them.
_MARKS_AND_INVALID = r"[\p{Mn}\x{FFFD}]+"
# UTF-8 spends at most 4 bytes on a character.
_MAX_UTF8_BYTES = 4


class WordPieceTokenizer:
    """BERT's BasicTokenizer + WordPiece; ids exclude [CLS] and [SEP]."""

    def __init__(self, vocab: Vocab, *, lower_case: bool, max_chars_per_word: int = 200):
        if vocab.kind != "wordpiece":
            raise VocabError(f"{vocab.path}: a {vocab.kind} vocabulary, not a WordPiece one")
        if max_chars_per_word < 1:
            raise ValueError(f"max_chars_per_word={max_chars_per_word} must be at least 1")
        self.vocab = vocab
        self.lower_case = lower_case
        self.max_chars_per_word = max_chars_per_word
        self._unk = vocab.tokens[vocab.unk_id]
        # Words are already cut at max_chars_per_word characters, so the byte limit
        # of tensorflow-text must never be the one that applies.
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=list(vocab.tokens),
            suffix_indicator=WORDPIECE_PREFIX,
            max_bytes_per_word=_MAX_UTF8_BYTES * max_chars_per_word,
            token_out_type=tf.int32,
            unknown_token=self._unk,
            no_pretokenization=True,
        )

    def words(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """tf.string [N] -> tf.string [N, (words)]: the BasicTokenizer's words."""
        texts = tf.strings.regex_replace(texts, _DROPPED, "")
        if self.lower_case:
            # tf.strings.lower uses ICU's full lowercase mapping, as Python's
            # str.lower(): "İ" -> "i̇", a word-final "Σ" -> "ς", "ß" stays.
            texts = tf.strings.lower(texts, encoding="utf-8")
            texts = tf_text.normalize_utf8(texts, "NFD")
            texts = tf.strings.regex_replace(texts, _MARKS_AND_INVALID, "")
        return tf_text.regex_split(texts, f"{_WHITESPACE}|{_ALONE}", _ALONE)

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """tf.string [N] -> int32 [N, (tokens)]."""
        words = self.words(texts)
        too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > self.max_chars_per_word
        words = words.with_flat_values(tf.where(too_long, self._unk, words.flat_values))
        return self._wordpiece.tokenize(words).merge_dims(-2, -1)


class SentencePieceTokenizer:
    """A sentencepiece model (loaded as a Vocab from its .model file) run in graph.

    The model's own normalization applies; lower_case lowercases before it (so
    the model must be trained on lowercased text). The special tokens never come
    from text: sentencepiece matches a user-defined piece such as "[MASK]"
    wherever the text spells it, and such a match becomes [UNK] here.
    """

    def __init__(self, vocab: Vocab, *, lower_case: bool):
        if not vocab.is_sentencepiece:
            raise VocabError(f"{vocab.path}: not a sentencepiece model (*.model)")
        self.vocab = vocab
        self.lower_case = lower_case
        model = read_bytes(vocab.path, "the model")
        self._sentencepiece = tf_text.SentencepieceTokenizer(model=model, out_type=tf.int32)
        replace = np.arange(len(vocab), dtype=np.int32)
        replace[[vocab.pad_id, vocab.cls_id, vocab.sep_id, vocab.mask_id]] = vocab.unk_id
        self._replace = tf.constant(replace)

    def _normalize(self, texts):
        if self.lower_case:
            # tf.strings.lower would stop at a NUL and lose the rest of the text.
            texts = tf.strings.lower(tf.strings.regex_replace(texts, r"\x00", ""), encoding="utf-8")
        return texts

    def words(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """tf.string [N] -> tf.string [N, (words)]: the (lowercased) whitespace-separated words."""
        return tf_text.regex_split(self._normalize(texts), _WHITESPACE)

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """tf.string [N] -> int32 [N, (tokens)]."""
        ids = self._sentencepiece.tokenize(self._normalize(texts))
        return ids.with_flat_values(tf.gather(self._replace, ids.flat_values))


class BpeTokenizer:
    """A byte-level BPE tokenizer.json run by Hugging Face `tokenizers`; ids exclude [CLS] and
    [SEP].

    The ids are those of `tokenizers.Tokenizer.from_file(path).encode(text,
    add_special_tokens=False)`, the file's normalizer, pre-tokenizer and model
    included, with two exceptions: text that spells a special added token
    ("[MASK]") is encoded as the text it is (the library's
    encode_special_tokens), so no special id ever comes from text; and the
    file's padding and truncation are off. Invalid UTF-8 becomes U+FFFD
    (bytes.decode(errors="replace"); the corpus readers have replaced it
    already). `lower_case` must say whether the file's normalizer lowercases:
    lowercasing is the file's, never done here.

    A word (whole-word masking, `words`) starts at a token whose first byte is
    whitespace ("Ġ" for a space, Vocab.is_continuation) and holds the tokens up
    to the next such one: the text's whitespace-separated words, punctuation
    included, as sentencepiece's words. The first token of a text has no space
    before it ("Hello" not "ĠHello", add_prefix_space=False as ModernBERT), so
    a sentence's first word continues the last word of a sentence before it in
    the same segment.
    """

    def __init__(self, vocab: Vocab, *, lower_case: bool | None):
        """`lower_case` None: as the file's normalizer does."""
        if vocab.kind != "bpe":
            raise VocabError(f"{vocab.path}: a {vocab.kind} vocabulary, not a BPE tokenizer.json")
        self.vocab = vocab
        self.lower_case = lower_case
        text = read_bytes(vocab.path, "the tokenizer").decode("utf-8").removeprefix("\ufeff")
        try:
            self._tokenizer = tokenizers.Tokenizer.from_str(text)
        except Exception as e:  # the library raises a bare Exception
            raise VocabError(f"{vocab.path}: Hugging Face tokenizers cannot load it: {e}") from None
        lowercases = normalizer_lowercases(json.loads(text).get("normalizer"))
        if lower_case is None:
            self.lower_case = lower_case = lowercases
        if lowercases != lower_case:
            raise VocabError(
                f"{vocab.path}: its normalizer {'lowercases' if lowercases else 'keeps case'}; "
                f"set config.data.do_lower_case={lowercases}"
            )
        if self._tokenizer.get_vocab_size(with_added_tokens=True) != len(vocab):
            raise VocabError(
                f"{vocab.path}: tokenizers reads "
                f"{self._tokenizer.get_vocab_size(with_added_tokens=True)} tokens, "
                f"the vocabulary {len(vocab)}"
            )
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        self._tokenizer.encode_special_tokens = True

    def words(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """tf.string [N] -> tf.string [N, (words)]: the whitespace-separated words, as written."""
        return tf_text.regex_split(texts, _WHITESPACE)

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """tf.string [N] -> int32 [N, (tokens)]."""
        ids, lengths = tf.numpy_function(
            self._encode, [texts], [tf.int32, tf.int64], stateful=False
        )
        ids.set_shape([None])
        lengths.set_shape([None])
        return tf.RaggedTensor.from_row_lengths(ids, lengths, validate=False)

    def _encode(self, texts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with _encoding.running():
            if _encoding.stopping:  # the interpreter is exiting: see exit_calls.py
                return np.zeros(0, np.int32), np.zeros(len(texts), np.int64)
            lines = [text.decode("utf-8", errors="replace") for text in texts.tolist()]
            encodings = self._tokenizer.encode_batch_fast(lines, add_special_tokens=False)
            lengths = np.fromiter(map(len, encodings), np.int64, len(encodings))
            ids = itertools.chain.from_iterable(e.ids for e in encodings)
            return np.fromiter(ids, np.int32, int(lengths.sum())), lengths


def bpe_text(tokens) -> str:
    """Byte-level BPE tokens back to the text they spell ("Ġfox" -> " fox"); a run of
    tokens cut inside a character gives U+FFFD for it."""
    return _BYTE_LEVEL.decode(list(tokens))


_BYTE_LEVEL = tokenizers.decoders.ByteLevel()


def normalizer_lowercases(normalizer) -> bool:
    """Whether a tokenizer.json's normalizer object lowercases."""
    if not isinstance(normalizer, dict):
        return False
    kind = normalizer.get("type")
    if kind == "Sequence":
        return any(normalizer_lowercases(n) for n in normalizer.get("normalizers") or [])
    return kind == "Lowercase" or (kind == "BertNormalizer" and bool(normalizer.get("lowercase")))


# BpeTokenizer's calls. This module is imported before pretraining_input registers its
# own `stop`, so this one runs after it, once no new chunk comes.
_encoding = PythonCalls(0.2)
atexit.register(_encoding.stop)


# What reads each kind of vocabulary, for the message when config.tokenizer names another.
_NEEDS = {
    "wordpiece": "a vocab.txt or a WordPiece tokenizer.json",
    "sentencepiece": "a sentencepiece *.model file",
    "bpe": "a byte-level BPE tokenizer.json",
}
_IS_A = {
    "wordpiece": "a WordPiece vocabulary",
    "sentencepiece": "a sentencepiece model",
    "bpe": "a BPE tokenizer.json",
}


def make_tokenizer(
    config: DataConfig, vocab_file: str
) -> WordPieceTokenizer | SentencePieceTokenizer | BpeTokenizer:
    """The tokenizer config.tokenizer names, with config.do_lower_case and max_chars_per_word."""
    vocab = load_vocab(vocab_file)
    if config.tokenizer != vocab.kind:
        raise VocabError(
            f"{vocab_file}: config.data.tokenizer={config.tokenizer!r} needs "
            f"{_NEEDS[config.tokenizer]}, not {_IS_A[vocab.kind]}"
        )
    if vocab.kind == "sentencepiece":
        return SentencePieceTokenizer(vocab, lower_case=config.do_lower_case)
    if vocab.kind == "bpe":
        return BpeTokenizer(vocab, lower_case=config.do_lower_case)
    return WordPieceTokenizer(
        vocab, lower_case=config.do_lower_case, max_chars_per_word=config.max_chars_per_word
    )
