import json
from pathlib import Path

import numpy as np
import pytest
import sentencepiece

from data_pipeline.vocab import SPECIAL_TOKENS, Vocab, VocabError, load_vocab


@pytest.fixture(scope="module")
def bert_json(bert_tokenizer_json):
    """bert-base-uncased's tokenizer.json (conftest.py unpacks it)."""
    return Path(bert_tokenizer_json)


@pytest.fixture(scope="module")
def bert_tokens(bert_json):
    vocab = json.loads(bert_json.read_text())["model"]["vocab"]
    return sorted(vocab, key=vocab.get)


def write_lines(path, tokens, newline="\n"):
    path.write_bytes(newline.join(tokens).encode("utf-8") + newline.encode())
    return path


def test_released_bert_vocab(bert_json):
    vocab = load_vocab(str(bert_json))
    assert len(vocab) == 30522
    assert (vocab.pad_id, vocab.unk_id, vocab.cls_id, vocab.sep_id, vocab.mask_id) == (
        0,
        100,
        101,
        102,
        103,
    )
    assert vocab.token_to_id("the") == 1996
    assert vocab.decode([101, 7592, 102]) == ["[CLS]", "hello", "[SEP]"]
    # The five specials plus [unused0] ... [unused993].
    assert vocab.is_special.sum() == 5 + 994
    assert vocab.is_special[vocab.token_to_id("[unused0]")]
    assert not vocab.is_special[vocab.token_to_id("[")]
    assert vocab.is_continuation[vocab.token_to_id("##s")]
    assert not vocab.is_continuation[vocab.token_to_id("s")]
    assert not vocab.is_continuation[vocab.token_to_id("#")]
    assert vocab.random_token_ids.dtype == np.int32
    assert len(vocab.random_token_ids) == len(vocab) - vocab.is_special.sum()
    assert not vocab.is_special[vocab.random_token_ids].any()


def test_vocab_txt_and_tokenizer_json_agree(bert_json, bert_tokens, tmp_path):
    from_json = load_vocab(str(bert_json))
    from_txt = load_vocab(str(write_lines(tmp_path / "vocab.txt", bert_tokens)))
    from_crlf = load_vocab(str(write_lines(tmp_path / "crlf.txt", bert_tokens, "\r\n")))
    for vocab in (from_txt, from_crlf):
        assert vocab.tokens == from_json.tokens
        for name in ("pad_id", "unk_id", "cls_id", "sep_id", "mask_id"):
            assert getattr(vocab, name) == getattr(from_json, name)
        for name in ("is_special", "is_continuation", "random_token_ids"):
            np.testing.assert_array_equal(getattr(vocab, name), getattr(from_json, name))


def test_learned_layout_puts_specials_first(tmp_path):
    vocab = load_vocab(str(write_lines(tmp_path / "v.txt", [*SPECIAL_TOKENS, "a", "##b", "c"])))
    assert (vocab.pad_id, vocab.unk_id, vocab.cls_id, vocab.sep_id, vocab.mask_id) == (
        0,
        1,
        2,
        3,
        4,
    )
    assert vocab.random_token_ids.tolist() == [5, 6, 7]
    assert vocab.is_continuation.tolist() == [False] * 6 + [True, False]


def test_vocab_is_frozen_and_read_only(tmp_path):
    vocab = load_vocab(str(write_lines(tmp_path / "v.txt", [*SPECIAL_TOKENS, "a"])))
    assert isinstance(vocab, Vocab)
    with pytest.raises(AttributeError):
        vocab.unk_id = 0
    with pytest.raises(ValueError):
        vocab.is_special[0] = False
    assert vocab == vocab and hash(vocab) == hash(vocab)


def test_decode_and_token_to_id_errors(tmp_path):
    path = write_lines(tmp_path / "v.txt", [*SPECIAL_TOKENS, "a"])
    vocab = load_vocab(str(path))
    assert vocab.decode(np.array([[5, 1]])) == ["a", "[UNK]"]
    with pytest.raises(IndexError, match="id 6"):
        vocab.decode([6])
    with pytest.raises(IndexError, match="id -1"):
        vocab.decode([-1])
    with pytest.raises(KeyError, match="'zzz'"):
        vocab.token_to_id("zzz")


def tokenizer_json(path, model):
    path.write_text(json.dumps({"version": "1.0", "model": model}), encoding="utf-8")
    return path


WORDPIECE = {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##"}


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("empty.txt", b"", "empty"),
        ("blank.txt", b" \n\n", "empty"),
        ("latin1.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\ncaf\xe9\n".encode("latin-1"), "line 6"),
        ("dup.txt", b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nb\na\n", "line 8.*'a'.*line 6"),
        ("no_unk.txt", b"[PAD]\n[CLS]\n[SEP]\n[MASK]\na\n", r"missing special token\(s\) \[UNK\]"),
        ("no_mask.txt", b"[PAD]\n[UNK]\n[CLS]\n[SEP]\na\n", r"\[MASK\]"),
        ("hole.txt", b"[PAD]\n[UNK]\n\n[CLS]\n[SEP]\n[MASK]\n", "line 3 is blank"),
        ("only_specials.txt", b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n", "only special"),
        ("bad.json", b"{not json", "not valid JSON"),
        ("nomodel.json", b'{"version": "1.0"}', "no 'model'"),
    ],
)
def test_vocab_errors_name_the_file(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(VocabError, match=message) as e:
        load_vocab(str(path))
    assert str(e.value).startswith(str(path))


def test_missing_and_unreadable_files(tmp_path):
    for path in (tmp_path / "nope.txt", tmp_path):
        with pytest.raises(VocabError, match="cannot read") as e:
            load_vocab(str(path))
        assert str(path) in str(e.value)


def test_tokenizer_json_errors(tmp_path):
    ok = {t: i for i, t in enumerate([*SPECIAL_TOKENS, "a", "##b"])}
    cases = [
        ({"type": "Unigram", "vocab": [["a", 0.0]]}, "'Unigram'; only 'WordPiece' and 'BPE'"),
        ({**WORDPIECE, "vocab": {**ok, "c": 9}}, "not contiguous.*id 7 is missing"),
        ({**WORDPIECE, "vocab": {**ok, "c": 5}}, "share the id 5"),
        ({**WORDPIECE, "vocab": {}}, "empty vocabulary"),
        ({**WORDPIECE, "vocab": {"[PAD]": 0, "a": 1}}, r"missing special token\(s\) \[UNK\]"),
        ({**WORDPIECE, "continuing_subword_prefix": "@@", "vocab": ok}, "'@@'"),
    ]
    for i, (model, message) in enumerate(cases):
        path = tokenizer_json(tmp_path / f"t{i}.json", model)
        with pytest.raises(VocabError, match=message) as e:
            load_vocab(str(path))
        assert str(e.value).startswith(str(path))
    path = tmp_path / "dupkey.json"
    path.write_text('{"model": {"type": "WordPiece", "vocab": {"a": 0, "a": 1}}}')
    with pytest.raises(VocabError, match="duplicate key 'a'"):
        load_vocab(str(path))
    assert load_vocab(str(tokenizer_json(tmp_path / "ok.json", {**WORDPIECE, "vocab": ok})))


def test_sentencepiece_vocab(sentencepiece_model):
    vocab = load_vocab(sentencepiece_model)
    processor = sentencepiece.SentencePieceProcessor(model_file=sentencepiece_model)
    assert len(vocab) == processor.get_piece_size() == 300
    assert vocab.tokens[:5] == SPECIAL_TOKENS
    assert (vocab.pad_id, vocab.unk_id, vocab.cls_id, vocab.sep_id, vocab.mask_id) == (
        0,
        1,
        2,
        3,
        4,
    )
    assert vocab.is_special.tolist() == [True] * 5 + [False] * 295
    for i, token in enumerate(vocab.tokens[5:], start=5):
        assert vocab.is_continuation[i] == (not token.startswith("\u2581")), token
    assert vocab.random_token_ids.tolist() == list(range(5, 300))


def test_sentencepiece_errors(sentencepiece_model, tmp_path):
    garbage = tmp_path / "garbage.model"
    garbage.write_bytes(b"\xff\x00 this is not a model")
    with pytest.raises(VocabError, match="not a sentencepiece model") as e:
        load_vocab(str(garbage))
    assert str(e.value).startswith(str(garbage))
    # A model trained without the five specials.
    prefix = tmp_path / "plain"
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(["a b c d e f g h", "abc def ghi"] * 50),
        model_prefix=str(prefix),
        vocab_size=15,
        minloglevel=2,
    )
    with pytest.raises(VocabError, match=r"missing special token\(s\) \[PAD\], \[UNK\]"):
        load_vocab(f"{prefix}.model")
