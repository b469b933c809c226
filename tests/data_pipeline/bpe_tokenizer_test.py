"""Byte-level BPE (config.data.tokenizer='bpe'): parity with Hugging Face tokenizers, the
vocabulary, errors, learning, and the pretraining stream.

No ModernBERT file ships offline, so the fixture builds one the way its tokenizer.json is
built (answerdotai/ModernBERT-base: a ByteLevel pre-tokenizer without a prefix space, a
BPE model, the BERT specials as added tokens after the learned entries, [unusedN] fillers,
and the [CLS] $A [SEP] template), trained on a few thousand lines of Python's docs.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import tokenizers
from support import REPO
from support.bpe import corpus_lines, modernbert_like
from tokenizers import pre_tokenizers

from data_pipeline import config as config_lib
from data_pipeline import pretraining_input, schema, vocab_learning
from data_pipeline.errors import ConfigError
from data_pipeline.tokenizer import BpeTokenizer, make_tokenizer
from data_pipeline.vocab import BYTE_LEVEL_WHITESPACE, SPECIAL_TOKENS, VocabError, load_vocab

LINES = [
    "Hello, World! This is a BPE tokenizer.",
    "def f(x): return x**2 + 1  # comment",
    "café naïve Ångström résumé coöperate façade jalapeño Zoë",
    "cafe\u0301 decomposed accents, n\u0303",
    "Straße İstanbul ǅungla ﬁsh",
    "Ελληνικά: Καλημέρα κόσμε. Привет, мир!",
    "中文字符测试，包括标点。日本語のテキスト、カタカナ",
    "한국어 텍스트입니다. مرحبا بالعالم، שָׁלוֹם",
    "I \u2764\ufe0f NY \U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f1fa\U0001f1f8",
    "  two leading spaces",
    " one leading space",
    "trailing spaces   ",
    "tab\tseparated\twords\t",
    "new\nlines\r\nand\rreturns\n",
    "runs  of   spaces    inside",
    "",
    " ",
    "\t\n",
    "a\x00b bell\x07 del\x7f nel\x85 zero\u200bwidth",
    "Fullwidth ＡＢＣ\u3000１２３！？",
    "numbers 3.14159 1,000,000 2024-12-19 0x1F",
    "don't won't it's we'll they're I'm",
    "https://example.com/path?q=1&b=2 user@example.org",
    "x" * 300,
]


@pytest.fixture(scope="module")
def bpe_json(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("bpe") / "tokenizer.json"
    modernbert_like().save(str(path))
    return str(path)


@pytest.fixture(scope="module")
def bpe(bpe_json) -> BpeTokenizer:
    return make_tokenizer(bpe_config(), bpe_json)


def bpe_config(**changes) -> config_lib.DataConfig:
    default = config_lib.from_config(config_lib.default_config())
    return default.replace(**{"tokenizer": "bpe", "do_lower_case": False, **changes})


def oracle(path) -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_file(str(path))


def encode(tokenizer, texts) -> list[list[int]]:
    return tokenizer.tokenize(tf.constant(texts)).to_list()


def test_ids_are_the_libraries(bpe, bpe_json):
    lines = LINES + corpus_lines(4000)[3000:]
    expected = [oracle(bpe_json).encode(line, add_special_tokens=False).ids for line in lines]
    assert encode(bpe, lines) == expected
    # In tf.data's graph too, in batches of any size.
    dataset = tf.data.Dataset.from_tensor_slices(lines).batch(7).map(bpe.tokenize)
    assert [row for batch in dataset for row in batch.to_list()] == expected
    assert encode(bpe, []) == []


def test_invalid_utf8_is_replaced_as_the_corpus_readers_replace_it(bpe, bpe_json):
    texts = [b"caf\xe9 au lait", b"\xff\xfe\x00", b"cut \xe2\x82", b"\xc3\xa9t\xc3\xa9"]
    expected = [
        oracle(bpe_json).encode(t.decode("utf-8", errors="replace"), add_special_tokens=False).ids
        for t in texts
    ]
    assert encode(bpe, texts) == expected


def test_text_that_spells_a_special_token_is_encoded_as_text(bpe, bpe_json):
    text = "a [MASK] b [CLS][SEP] <|endoftext|> [PAD][unused0]"
    [ids] = encode(bpe, [text])
    assert not bpe.vocab.is_special[ids].any()
    library = oracle(bpe_json)
    library.encode_special_tokens = True
    assert ids == library.encode(text, add_special_tokens=False).ids
    # The library alone gives the special ids: the one place this tokenizer departs from it.
    assert bpe.vocab.mask_id in oracle(bpe_json).encode(text, add_special_tokens=False).ids


def test_padding_and_truncation_in_the_file_are_ignored(tmp_path):
    tokenizer = modernbert_like()
    plain = tokenizer.encode(LINES[0], add_special_tokens=False).ids
    tokenizer.enable_padding(length=64, pad_id=tokenizer.token_to_id("[PAD]"))
    tokenizer.enable_truncation(max_length=3)
    path = tmp_path / "padded.json"
    tokenizer.save(str(path))
    assert encode(make_tokenizer(bpe_config(), str(path)), [LINES[0], ""]) == [plain, []]


def test_vocabulary_takes_the_specials_from_the_added_tokens(bpe_json):
    library = oracle(bpe_json)
    vocab = load_vocab(bpe_json)
    assert vocab.kind == "bpe" and not vocab.is_sentencepiece
    assert len(vocab) == library.get_vocab_size(with_added_tokens=True)
    assert vocab.tokens[:2] == ("<|endoftext|>", "<|padding|>")
    for name, token in zip(
        ("pad_id", "unk_id", "cls_id", "sep_id", "mask_id"), SPECIAL_TOKENS, strict=True
    ):
        assert getattr(vocab, name) == library.token_to_id(token)
    special = {t for t in vocab.tokens if t.startswith(("<|", "[")) and len(t) > 2}
    assert {vocab.tokens[i] for i in np.flatnonzero(vocab.is_special)} == special
    assert not vocab.is_special[vocab.token_to_id("  ")]
    assert not vocab.is_special[vocab.random_token_ids].any()
    assert len(vocab.random_token_ids) == len(vocab) - len(special)
    # A word starts at a token that starts with whitespace: "Ġthe", the added "  ".
    assert not vocab.is_continuation[vocab.token_to_id("\u0120the")]
    assert not vocab.is_continuation[vocab.token_to_id("  ")]
    assert vocab.is_continuation[vocab.token_to_id("the")]
    assert not vocab.is_continuation[vocab.is_special].any()


def test_the_byte_level_whitespace_is_the_libraries():
    [(mapped, _)] = pre_tokenizers.ByteLevel(
        add_prefix_space=False, use_regex=False
    ).pre_tokenize_str(" \t\n\x0b\x0c\r")
    assert mapped == BYTE_LEVEL_WHITESPACE


def test_words_are_what_whole_word_masking_groups(bpe):
    texts = ["The quick-brown fox, jumps over the lazy dog's tail.", "one"]
    vocab = bpe.vocab
    words = bpe.words(tf.constant(texts)).to_list()
    assert words[0][:3] == [b"The", b"quick-brown", b"fox,"]
    for ids, row in zip(encode(bpe, texts), words, strict=True):
        starts = [not vocab.is_continuation[i] for i in ids]
        starts[0] = True  # the first token of a text has no space before it
        assert sum(starts) == len(row)


def test_make_tokenizer_names_what_each_kind_needs(bpe_json, bert_tokenizer_json, tmp_path):
    assert isinstance(make_tokenizer(bpe_config(), bpe_json), BpeTokenizer)
    with pytest.raises(VocabError, match="needs a byte-level BPE tokenizer.json, not a WordPiece"):
        make_tokenizer(bpe_config(), bert_tokenizer_json)
    wordpiece = bpe_config(tokenizer="wordpiece")
    with pytest.raises(
        VocabError, match="needs a vocab.txt or a WordPiece tokenizer.json, not a BPE"
    ):
        make_tokenizer(wordpiece, bpe_json)
    with pytest.raises(VocabError, match=r"keeps case; set config\.data\.do_lower_case=False"):
        make_tokenizer(bpe_config(do_lower_case=True), bpe_json)
    lowercase = tmp_path / "lower.json"
    modernbert_like(lowercase=True).save(str(lowercase))
    uncased = make_tokenizer(bpe_config(do_lower_case=True), str(lowercase))
    assert encode(uncased, ["The CAT"]) == encode(uncased, ["the cat"])
    with pytest.raises(VocabError, match=r"lowercases; set config\.data\.do_lower_case=True"):
        make_tokenizer(bpe_config(), str(lowercase))


def edited(tmp_path, bpe_json, name, edit) -> str:
    config = json.loads(Path(bpe_json).read_text(encoding="utf-8"))
    edit(config)
    path = tmp_path / name
    path.write_text(json.dumps(config), encoding="utf-8")
    return str(path)


def renamed(**names):
    """Added tokens respelt, as a RoBERTa file spells [CLS] "<s>"."""

    def edit(config):
        for token in config["added_tokens"]:
            token["content"] = names.get(token["content"], token["content"])

    return edit


def metaspace(config):
    config["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581"}


def unigram(config):
    config["model"] = {"type": "Unigram", "vocab": [["a", 0.0]]}


def broken_merges(config):
    config["model"]["merges"].append(["zzzq", "qqqz"])


@pytest.mark.parametrize(
    "name, edit, message",
    [
        ("no_cls.json", renamed(**{"[CLS]": "<s>"}), r"missing special token\(s\) \[CLS\];"),
        (
            "roberta.json",
            renamed(**{"[SEP]": "</s>", "[MASK]": "<mask>", "[PAD]": "<pad>"}),
            r"missing special token\(s\) \[PAD\], \[SEP\], \[MASK\];",
        ),
        ("metaspace.json", metaspace, "without a ByteLevel pre-tokenizer"),
        ("unigram.json", unigram, "'Unigram'; only 'WordPiece' and 'BPE'"),
        ("merges.json", broken_merges, "tokenizers cannot load it"),
    ],
)
def test_a_file_that_cannot_serve_is_named(tmp_path, bpe_json, name, edit, message):
    path = edited(tmp_path, bpe_json, name, edit)
    with pytest.raises(VocabError, match=message) as e:
        make_tokenizer(bpe_config(), path)
    assert str(e.value).startswith(path) and "\n" not in str(e.value)


def test_malformed_json_and_invalid_utf8_are_named(tmp_path, bpe_json):
    text = Path(bpe_json).read_text(encoding="utf-8")
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2], encoding="utf-8")
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes(text.replace('"version"', '"versi\u00f3n"').encode("latin-1", "replace"))
    for path, message in ((cut, "not valid JSON"), (latin1, r"not UTF-8 \(line 2")):
        with pytest.raises(VocabError, match=message) as e:
            make_tokenizer(bpe_config(), str(path))
        assert str(e.value).startswith(str(path)) and "\n" not in str(e.value)


def test_a_learned_vocabulary_needs_room_for_the_bytes():
    with pytest.raises(ConfigError, match=r"^config\.data\.vocab_size=200: .* at least 261"):
        bpe_config(vocab_size=200)
    assert bpe_config(vocab_size=200, vocab_file="tokenizer.json").vocab_size == 200


def write_corpus(path, documents=30) -> str:
    lines = []
    for d in range(documents):
        lines += [
            f"Document {d} tells of a river, a stone bridge and the town of Ålberg.",
            f"In year {1900 + d} the bridge was rebuilt; people crossed it every day.",
            "The lantern by the window stayed lit until morning came.",
            "",
        ]
    path.write_text("\n".join(lines), encoding="utf-8")
    return str(path)


def text_config(tmp_path, **changes) -> config_lib.DataConfig:
    return bpe_config(
        source="text",
        text_files=write_corpus(tmp_path / "corpus.txt"),
        vocab_cache_dir=str(tmp_path / "cache"),
        eval_fraction=0.0,
        **changes,
    )


def test_learned_tokenizer_is_laid_out_as_modernberts(tmp_path):
    config = text_config(tmp_path, do_lower_case=True, vocab_size=400)
    path = tmp_path / "learned.json"
    vocab = vocab_learning.learn_bpe_tokenizer(config, vocab_size=400, output_path=str(path))
    assert vocab.tokens[:5] == SPECIAL_TOKENS and len(vocab) == 400
    assert vocab.is_special[:5].all() and not vocab.is_special[5:].any()
    library = oracle(path)
    assert library.normalizer is not None  # uncased: the file lowercases
    pair = library.encode("The river", "a bridge")
    assert pair.tokens[0] == "[CLS]" and pair.tokens.count("[SEP]") == 2
    assert pair.type_ids == [0] * 4 + [1] * 3
    assert "\u0120bridge" in vocab.tokens
    tokenizer = make_tokenizer(config, str(path))
    assert encode(tokenizer, ["THE RIVER"]) == encode(tokenizer, ["the river"])
    assert encode(tokenizer, LINES) == [
        library.encode(line, add_special_tokens=False).ids for line in LINES
    ]


def test_a_small_corpus_is_filled_with_unused_tokens(tmp_path):
    config = text_config(tmp_path, vocab_size=3000)
    path = tmp_path / "small.json"
    vocab = vocab_learning.learn_bpe_tokenizer(config, vocab_size=3000, output_path=str(path))
    assert len(vocab) == 3000 == oracle(path).get_vocab_size(with_added_tokens=True)
    unused = [i for i, t in enumerate(vocab.tokens) if t.startswith("[unused")]
    assert unused and unused[-1] == 2999 and vocab.is_special[unused].all()


def test_resolve_vocab_file_learns_a_bpe_tokenizer_once(tmp_path, monkeypatch):
    calls = []
    learn = vocab_learning.learn_bpe_tokenizer

    def counting_learn(*args, **kwargs):
        calls.append(kwargs["vocab_size"])
        return learn(*args, **kwargs)

    monkeypatch.setattr(vocab_learning, "learn_bpe_tokenizer", counting_learn)
    config = text_config(tmp_path, vocab_size=300)
    path = vocab_learning.resolve_vocab_file(config)
    assert path.startswith(str(tmp_path / "cache" / "bpe-300-cased-text-"))
    assert path.endswith(".tokenizer.json")
    assert load_vocab(path).kind == "bpe" and len(load_vocab(path)) == 300
    description = json.loads(Path(path.removesuffix(".tokenizer.json") + ".json").read_text())
    assert description["tokenizer"] == "bpe"
    assert vocab_learning.resolve_vocab_file(config) == path and calls == [300]
    wordpiece = config.replace(tokenizer="wordpiece")
    assert vocab_learning.cache_key(wordpiece) != vocab_learning.cache_key(config)


def test_the_pretraining_stream_runs_on_a_bpe_tokenizer(tmp_path, bpe_json):
    config = text_config(
        tmp_path,
        vocab_file=bpe_json,
        max_seq_length=64,
        max_predictions_per_seq=10,
        document_buffer_size=8,
        whole_word_mask=True,
    )
    vocab = load_vocab(bpe_json)
    dataset = pretraining_input.make_pretraining_dataset(
        config, split="train", batch_size=8, seed=0
    )
    batch = next(dataset.as_numpy_iterator())
    shapes = schema.feature_shapes(64, 10)
    for name in schema.FEATURES:
        assert batch[name].shape == (8, *shapes[name]), name
    ids = batch["input_ids"]
    assert (ids[:, 0] == vocab.cls_id).all()
    assert ((ids >= 0) & (ids < len(vocab))).all()
    # Padding is the file's [PAD], wherever the file puts it.
    assert (ids[batch["input_mask"] == 0] == vocab.pad_id).all()
    labels = batch["masked_lm_ids"][batch["masked_lm_weights"] > 0]
    assert labels.size and not vocab.is_special[labels].any()


EXIT_SCRIPT = """
import time
from data_pipeline import config, pretraining_input

data = config.default_config()
data.update(tokenizer="bpe", vocab_file={vocab!r}, do_lower_case=False, max_seq_length=64,
            max_predictions_per_seq=10)
batches = pretraining_input.make_pretraining_dataset(
    data, split="train", batch_size=64, seed=0).as_numpy_iterator()
for count, batch in enumerate(batches, 1):
    if count == 3:
        break
print("read", count, "batches at", time.time(), flush=True)
"""


@pytest.mark.integration
def test_an_abandoned_bpe_stream_does_not_hold_up_exit(bpe_json):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT.format(vocab=bpe_json)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    ended = time.time()
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("read 3 batches at ")
    assert ended - float(result.stdout.split()[-1]) < 10
