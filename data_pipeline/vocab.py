"""Vocabularies: BERT's vocab.txt, a Hugging Face tokenizer.json, or a sentencepiece model.

`load_vocab` picks the format from the file name: `*.json` is a tokenizer.json
(a WordPiece model's vocabulary, ordered by id; or a byte-level BPE model's
vocabulary with its added tokens), `*.model` is a sentencepiece model, anything
else is a vocab.txt (one token a line, UTF-8, line n holds id n - 1). Every
error is a `VocabError` whose message starts with the file name.
"""

import dataclasses
import functools
import json
import os
from collections.abc import Sequence

import numpy as np

from data_pipeline import files
from data_pipeline.errors import UserError

# The five tokens every vocabulary must hold. Learned vocabularies (WordPiece
# and sentencepiece alike) put them at ids 0..4 in this order; the released
# BERT vocabularies have them elsewhere ([PAD]=0, [UNK]=100, ..., [MASK]=103).
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
WORDPIECE_PREFIX = "##"
SENTENCEPIECE_WORD_START = "\u2581"
# What a byte-level BPE token shows for a whitespace byte at its start: GPT-2's byte
# to character map (encoder.py, bytes_to_unicode) sends each byte under 33 to
# chr(256 + byte), so space, tab, LF, VT, FF and CR read "Ġ", "ĉ", "Ċ", "ċ", "Č", "č".
BYTE_LEVEL_WHITESPACE = "\u0120\u0109\u010a\u010b\u010c\u010d"
_BYTE_LEVEL_WHITESPACE = tuple(BYTE_LEVEL_WHITESPACE)


class VocabError(UserError):
    """A vocabulary file that cannot be used; the message names the file."""


# eq=False: the NumPy fields make generated __eq__/__hash__ raise, so a Vocab
# compares and hashes by identity.
@dataclasses.dataclass(frozen=True, eq=False)
class Vocab:
    path: str
    # The config.data.tokenizer that reads it: 'wordpiece', 'sentencepiece' or 'bpe'.
    kind: str
    tokens: tuple[str, ...]
    pad_id: int
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int
    # bool [V]: never produced from text ("[...]" WordPiece tokens, [unused*]
    # included; sentencepiece control, user-defined, unknown and unused pieces;
    # a BPE tokenizer.json's added tokens marked special).
    is_special: np.ndarray
    # bool [V]: continues the word of the token before it ("##x"; for
    # sentencepiece, a non-special piece that does not start with U+2581; for
    # byte-level BPE, one that does not start with a whitespace byte, "Ġ" for a space).
    is_continuation: np.ndarray
    # int32: every non-special id; masking's random replacement draws from these.
    random_token_ids: np.ndarray

    def __len__(self) -> int:
        return len(self.tokens)

    def token_to_id(self, token: str) -> int:
        try:
            return self._ids[token]
        except KeyError:
            raise KeyError(f"{token!r} is not in the vocabulary {self.path}") from None

    def decode(self, ids) -> list[str]:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        bad = ids[(ids < 0) | (ids >= len(self.tokens))]
        if bad.size:
            raise IndexError(f"id {bad[0]} is outside the vocabulary {self.path} ({len(self)} ids)")
        return [self.tokens[i] for i in ids]

    @property
    def is_sentencepiece(self) -> bool:
        return self.kind == "sentencepiece"

    @functools.cached_property
    def _ids(self) -> dict[str, int]:
        return {token: i for i, token in enumerate(self.tokens)}


def load_vocab(path: str) -> Vocab:
    path = os.fspath(path)
    data = read_bytes(path, "the vocabulary file")
    if not data.strip():
        raise VocabError(f"{path}: the vocabulary file is empty")
    if _is_sentencepiece_path(path):
        return _sentencepiece_vocab(path, data)
    text = _decode_utf8(path, data)
    if not path.endswith(".json"):
        return wordpiece_vocab(path, _vocab_txt_tokens(path, text))
    config = _read_tokenizer_json(path, text)
    if config["model"]["type"] == "BPE":
        return _bpe_vocab(path, config)
    return wordpiece_vocab(path, _wordpiece_json_tokens(path, config["model"]))


def write_placeholder_vocab(path: str, size: int) -> str:
    """A vocab.txt of `size` entries: the five specials, then placeholder pieces; for
    building a model of a given vocabulary size where the text does not matter."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += [f"piece{i}" for i in range(size - len(tokens))]
    with files.writing(path), open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    return path


def read_bytes(path: str, what: str) -> bytes:
    """The bytes of a local or Cloud Storage file; a VocabError that names it if unreadable."""
    try:
        return files.read_bytes(path)
    except OSError as e:
        raise VocabError(f"{path}: cannot read {what}: {e.strerror or e}") from None


def wordpiece_vocab(path: str, tokens: Sequence[str]) -> Vocab:
    """The Vocab of WordPiece `tokens` (in id order); `path` names it in messages."""
    is_special = np.array([len(t) > 2 and t[0] == "[" and t[-1] == "]" for t in tokens])
    is_continuation = np.array(
        [t.startswith(WORDPIECE_PREFIX) and len(t) > len(WORDPIECE_PREFIX) for t in tokens]
    )
    return _make_vocab(path, "wordpiece", tokens, is_special, is_continuation & ~is_special)


def _is_sentencepiece_path(path: str) -> bool:
    return path.endswith(".model")


def _decode_utf8(path: str, data: bytes) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise VocabError(
            f"{path}: not UTF-8 (line {line}, byte offset {e.start}); a vocabulary must be "
            "UTF-8 text, or a sentencepiece model named *.model"
        ) from None
    return text.removeprefix("\ufeff")


def _vocab_txt_tokens(path: str, text: str) -> tuple[str, ...]:
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    first_line = {}
    for number, line in enumerate(lines, start=1):
        token = line.strip()  # as the original load_vocab
        if not token:
            raise VocabError(f"{path}: line {number} is blank; every line must hold one token")
        if token in first_line:
            raise VocabError(
                f"{path}: line {number}: duplicate token {token!r} "
                f"(first on line {first_line[token]})"
            )
        first_line[token] = number
    return tuple(first_line)


def _read_tokenizer_json(path: str, text: str) -> dict:
    """A tokenizer.json's object, checked to hold a WordPiece or BPE model."""

    def unique_keys(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise VocabError(f"{path}: duplicate key {key!r}")
            seen.add(key)
        return dict(pairs)

    try:
        config = json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as e:
        raise VocabError(f"{path}: not valid JSON: {e}") from None
    model = config.get("model") if isinstance(config, dict) else None
    if not isinstance(model, dict):
        raise VocabError(f"{path}: no 'model' object; expected a Hugging Face tokenizer.json")
    if model.get("type") not in ("WordPiece", "BPE"):
        raise VocabError(
            f"{path}: the tokenizer model is {model.get('type')!r}; only 'WordPiece' and "
            "'BPE' are supported"
        )
    return config


def _wordpiece_json_tokens(path: str, model: dict) -> tuple[str, ...]:
    prefix = model.get("continuing_subword_prefix", WORDPIECE_PREFIX)
    if prefix != WORDPIECE_PREFIX:
        raise VocabError(
            f"{path}: continuing_subword_prefix is {prefix!r}; only {WORDPIECE_PREFIX!r} is supported"
        )
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or not vocab:
        raise VocabError(f"{path}: the WordPiece model has an empty vocabulary")
    return _tokens_by_id(path, vocab.items())


def _bpe_vocab(path: str, config: dict) -> Vocab:
    """The model's vocabulary and the added tokens, by id; the added tokens marked special
    are never produced from text (tokenizer.BpeTokenizer encodes their spelling as text)."""
    if not _is_byte_level(config.get("pre_tokenizer")):
        raise VocabError(
            f"{path}: a BPE model without a ByteLevel pre-tokenizer; only byte-level BPE "
            "(GPT-2's, RoBERTa's, ModernBERT's) is supported"
        )
    vocab = config["model"].get("vocab")
    if not isinstance(vocab, dict) or not vocab:
        raise VocabError(f"{path}: the BPE model has an empty vocabulary")
    ids = dict(vocab)
    special, added = set(), set()
    for entry in config.get("added_tokens") or []:
        entry = entry if isinstance(entry, dict) else {}
        content, i = entry.get("content"), entry.get("id")
        if not isinstance(content, str) or not content:
            raise VocabError(f"{path}: an added token without content: {entry!r}")
        if ids.get(content, i) != i:
            raise VocabError(
                f"{path}: the added token {content!r} has the id {i!r}, the model {ids[content]}"
            )
        ids[content] = i
        added.add(content)
        if entry.get("special"):
            special.add(content)
    tokens = _tokens_by_id(path, ids.items())
    is_special = np.array([t in special for t in tokens])
    # An added token is matched in the text before the byte-level step, so it is spelt as
    # the text spells it ("   " for a run of spaces).
    is_continuation = np.array(
        [
            not (t.startswith(_BYTE_LEVEL_WHITESPACE) or (t in added and t[:1].isspace()))
            for t in tokens
        ]
    )
    return _make_vocab(path, "bpe", tokens, is_special, is_continuation)


def _is_byte_level(pre_tokenizer) -> bool:
    """Whether a tokenizer.json's pre_tokenizer object is, or holds, a ByteLevel one."""
    if not isinstance(pre_tokenizer, dict):
        return False
    if pre_tokenizer.get("type") == "Sequence":
        return any(_is_byte_level(p) for p in pre_tokenizer.get("pretokenizers") or [])
    return pre_tokenizer.get("type") == "ByteLevel"


def _tokens_by_id(path: str, pairs) -> tuple[str, ...]:
    """The tokens of (token, id) pairs in id order; the ids must be 0, 1, ... n - 1."""
    by_id = {}
    for token, i in pairs:
        if not isinstance(i, int) or isinstance(i, bool) or i < 0:
            raise VocabError(f"{path}: token {token!r} has the id {i!r}; ids are integers >= 0")
        if i in by_id:
            raise VocabError(f"{path}: tokens {by_id[i]!r} and {token!r} share the id {i}")
        by_id[i] = token
    missing = [i for i in range(len(by_id)) if i not in by_id]
    if missing:
        raise VocabError(
            f"{path}: vocabulary ids are not contiguous: {len(by_id)} tokens, but id "
            f"{missing[0]} is missing ({len(missing)} gaps, highest id {max(by_id)})"
        )
    return tuple(by_id[i] for i in range(len(by_id)))


def _sentencepiece_vocab(path: str, data: bytes) -> Vocab:
    from sentencepiece import sentencepiece_model_pb2

    piece_type = sentencepiece_model_pb2.ModelProto.SentencePiece.Type
    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as e:  # protobuf's DecodeError has no stable import path
        raise VocabError(f"{path}: not a sentencepiece model: {e}") from None
    if not proto.pieces:
        raise VocabError(f"{path}: not a sentencepiece model (no pieces)")
    tokens = tuple(p.piece for p in proto.pieces)
    never_from_text = (
        piece_type.CONTROL,
        piece_type.USER_DEFINED,
        piece_type.UNKNOWN,
        piece_type.UNUSED,
    )
    is_special = np.array([p.type in never_from_text for p in proto.pieces])
    is_continuation = np.array([not t.startswith(SENTENCEPIECE_WORD_START) for t in tokens])
    return _make_vocab(path, "sentencepiece", tokens, is_special, is_continuation & ~is_special)


def _make_vocab(path, kind, tokens, is_special, is_continuation) -> Vocab:
    ids = {token: i for i, token in enumerate(tokens)}
    missing = [t for t in SPECIAL_TOKENS if t not in ids]
    if missing:
        raise VocabError(
            f"{path}: missing special token(s) {', '.join(missing)}; "
            f"a vocabulary needs all of {', '.join(SPECIAL_TOKENS)}"
        )
    pad_id, unk_id, cls_id, sep_id, mask_id = (ids[t] for t in SPECIAL_TOKENS)
    # The five are special in every format, whatever their spelling rule says.
    is_special = is_special.astype(bool)
    is_special[[pad_id, unk_id, cls_id, sep_id, mask_id]] = True
    is_continuation = is_continuation.astype(bool) & ~is_special
    random_token_ids = np.flatnonzero(~is_special).astype(np.int32)
    if random_token_ids.size == 0:
        raise VocabError(f"{path}: the vocabulary holds only special tokens")
    for array in (is_special, is_continuation, random_token_ids):
        array.setflags(write=False)
    vocab = Vocab(
        path=path,
        kind=kind,
        tokens=tuple(tokens),
        pad_id=pad_id,
        unk_id=unk_id,
        cls_id=cls_id,
        sep_id=sep_id,
        mask_id=mask_id,
        is_special=is_special,
        is_continuation=is_continuation,
        random_token_ids=random_token_ids,
    )
    vocab.__dict__["_ids"] = ids  # what cached_property would store
    return vocab
