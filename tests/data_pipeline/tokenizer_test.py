"""WordPiece parity with BERT's original tokenization; sentencepiece in tf.data.

The oracle is Hugging Face `tokenizers` (the engine of transformers'
BertTokenizerFast) built from bert-base-uncased's tokenizer.json. Where HF itself
departs from the original google-research/bert tokenization.py, the line is
checked against a hand-written expectation instead (HF_DEVIATIONS).
"""

import dataclasses
import json
import random
import unicodedata
from pathlib import Path
from pydoc_data.topics import topics

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf
import tokenizers

from data_pipeline import config as config_lib
from data_pipeline.tokenizer import SentencePieceTokenizer, WordPieceTokenizer, make_tokenizer
from data_pipeline.vocab import SPECIAL_TOKENS, VocabError, load_vocab


@pytest.fixture(scope="module")
def bert_json(bert_tokenizer_json):
    """bert-base-uncased's tokenizer.json (conftest.py unpacks it)."""
    return Path(bert_tokenizer_json)


@pytest.fixture(scope="module")
def cased_json(bert_json, tmp_path_factory):
    """bert-base-uncased's vocabulary plus UPPER and Capitalized forms of its pieces.

    No cased vocabulary ships offline; without one, every capitalized word would
    be [UNK] on both sides and the cased comparison would prove little.
    """
    config = json.loads(bert_json.read_text())
    vocab = config["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.get)
    for token in list(tokens):
        if token.startswith("[") and token.endswith("]"):
            continue
        prefix = "##" if token.startswith("##") and len(token) > 2 else ""
        body = token[len(prefix) :]
        for variant in (body.upper(), body.capitalize()):
            if prefix + variant not in vocab:
                vocab[prefix + variant] = len(vocab)
                tokens.append(prefix + variant)
    path = tmp_path_factory.mktemp("cased") / "tokenizer.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def hf_oracle(path, *, lower_case):
    config = json.loads(path.read_text())
    # HF's WordPiece gives up at 100 characters a word; BERT's original at 200.
    config["model"]["max_input_chars_per_word"] = 200
    config["normalizer"].update(lowercase=lower_case, strip_accents=lower_case)
    config["padding"] = None
    config["truncation"] = None
    return tokenizers.Tokenizer.from_str(json.dumps(config))


def tokens_of(tokenizer, lines):
    ids = tokenizer.tokenize(tf.constant(lines)).to_list()
    return [tokenizer.vocab.decode(row) for row in ids]


# Lines written to cover what the original handles specially. Escapes mark every
# invisible character.
HAND_WRITTEN = [
    # English and code.
    "Hello, World! This is BERT's tokenizer.",
    "The quick brown fox jumps over the lazy dog.",
    "unaffable unbelievable tokenization preprocessing",
    'He said: "don\'t" -- and left... (twice) [really] {braces} <angle>',
    "def f(x): return x**2 + 1  # comment",
    "snake_case_word CamelCaseWord UPPERCASE WORDS mIxEd",
    "can't won't e.g. i.e. U.S.A. a.b.c",
    # Accents and case mappings.
    "café naïve Ångström résumé coöperate façade jalapeño Zoë",
    "CAFÉ NAÏVE ÅNGSTRÖM RÉSUMÉ",
    "cafe\u0301 e\u0301te\u0301 decomposed accents, n\u0303",
    "Straße ß ẞ STRASSE",
    "İstanbul ıİ DİYARBAKIR",
    "ǅungla ǈubljana ǋ Ǳ titlecase digraphs",
    "ﬁsh ﬂow ﬀ ligatures",
    "\u2126 ohm \u212a kelvin \u212b angstrom signs",
    "Ελληνικά: Καλημέρα κόσμε, ή γλώσσα μας.",
    "Ἀθῆναι ὦ ἄνδρες Ἀθηναῖοι",
    "Привет, мир! Ёлка ЁЛКА й Й ї",
    "Ünïcödé ÀÉÎÕÜ àéîõü çÇ",
    # CJK and other scripts.
    "中文字符测试，包括标点。",
    "日本語のテキスト、カタカナとひらがな。東京タワー",
    "한국어 텍스트입니다. 안녕하세요!",
    "\U00020000\U0002a700\U0002b740 extensions B C D, \u3400 extension A",
    "\uf900\ufa0e compatibility ideographs \U0002f800",
    "「引用」『二重』【括弧】〈角〉・中黒",
    "Fullwidth ＡＢＣ\u3000１２３！？",
    "مرحبا بالعالم، كيف حالك؟",
    "مَرْحَبًا ٣٫١٤ ١٢٣",
    "שָׁלוֹם עולם, מה שלומך?",
    "नमस्ते दुनिया। हिन्दी",
    "สวัสดีครับ ภาษาไทย",
    "Ethiopic ሰላም ዓለም። Armenian Բարեւ",
    # Emoji.
    "I \u2764\ufe0f NY \U0001f44d\U0001f3fd \U0001f600\U0001f603",
    "family \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 rainbow \U0001f3f3\ufe0f\u200d\U0001f308",
    "keycaps 1\ufe0f\u20e3 #\ufe0f\u20e3 flags \U0001f1fa\U0001f1f8\U0001f1ec\U0001f1e7",
    "\U0001f44b\U0001f3ff\U0001f44b\U0001f3fb wave",
    # Control characters: dropped, except tab, newline and CR (whitespace).
    "a\x00b",
    "bell\x07ring",
    "vt\x0bff\x0cend",
    "del\x7fete",
    "nel\x85line",
    "tab\there cr\rlf\nline crlf\r\nend",
    "\x1c\x1d\x1e\x1f separators",
    "esc\x1b[31mred\x1b[0m",
    "\x01\x02\x03 start of text",
    # Zero-width and other format (Cf) characters: dropped, gluing their neighbours.
    "zero\u200bwidth space",
    "non\u200cjoiner",
    "joi\u200dner",
    "bom\ufeffmark",
    "\ufeffleading BOM",
    "soft\u00adhyphen",
    "word\u2060joiner",
    "lrm\u200e rlm\u200f",
    "mongolian\u180evowel separator",
    # U+FFFD: dropped.
    "bad\ufffdchar",
    "\ufffd\ufffd",
    # Unicode whitespace (Zs, U+2028, U+2029): separates words.
    "nbsp\u00a0here",
    "ideographic\u3000space",
    "en\u2002em\u2003thin\u2009hair\u200a",
    "narrow\u202fnbsp",
    "line\u2028separator\u2029paragraph",
    "ogham\u1680space",
    # URLs, e-mail, numbers.
    "https://example.com/path/to?q=1&r=two#frag",
    "mailto:first.last+tag@sub.example.co.uk",
    "www.google.com ftp://user:pass@host:21/",
    "3.14 1,000,000 1e-5 -42 +7 0x1F 50% $9.99",
    "€5 £3 ¥100 ½ ² ³ ① ⅷ",
    "2024-01-01T12:00:00Z 10:30pm",
    # Long words: BERT gives up above 200 characters.
    "a" * 150,
    "b" * 199,
    "c" * 200,
    "d" * 201,
    "e" * 5000,
    "x " + "é" * 200 + " y",
    "x " + "é" * 201 + " y",
    "e\u0301" * 150,
    "\u4e2d" * 300,
    "\U0001f600" * 200,
    "\U0001f600" * 201,
    "ab" * 100 + "!" + "cd" * 101,
    # Mixed scripts and punctuation runs.
    "helloМИРworld",
    "BERT模型tokenizer",
    "αβγabc カタカナkatakana 日本Japan",
    "!!!???...",
    "---***+++===",
    "«guillemets» „quotes“ ‘single’ “double”",
    "…—–‐ ellipsis and dashes",
    "(((nested)))",
    "@#$%^&*~`|\\",
    "¿Qué? ¡Hola!",
    "〜〰 wave dashes ♪♫ notes",
    # Empty and whitespace-only.
    "",
    " ",
    "\t\n",
    "\u00a0\u3000",
    "\u200b",
    "\x00",
]


@dataclasses.dataclass(frozen=True)
class Deviation:
    """A line where HF differs from the original BERT code, and what the original gives."""

    line: str
    reason: str
    uncased: list[str] | None  # None: HF agrees with the original in this mode
    cased: list[str] | None


HF_DEVIATIONS = [
    Deviation(
        "[MASK] [CLS] [SEP] [PAD] [UNK] here",
        "HF matches added special tokens in the raw text; the original splits "
        "'[', 'mask', ']' like any other text, so text cannot forge a [MASK].",
        uncased=["[", "mask", "]", "[", "cl", "##s", "]", "[", "sep", "]"]
        + ["[", "pad", "]", "[", "un", "##k", "]", "here"],
        cased=["[", "MASK", "]", "[", "CL", "##S", "]", "[", "SEP", "]"]
        + ["[", "PAD", "]", "[", "UN", "##K", "]", "here"],
    ),
    Deviation(
        "e\ue000f caf\U000f0000é x",
        "HF drops private-use (Co) and unassigned (Cn) characters as controls; the "
        "original drops only Cc and Cf, so these words cannot be segmented.",
        uncased=["[UNK]", "[UNK]", "x"],
        cased=["[UNK]", "[UNK]", "x"],
    ),
    Deviation(
        "ΟΔΟΣ ΣΟΦΙΑΣ. ΑΣ.Β",
        "HF lowercases character by character (Σ -> σ everywhere); the original's "
        "str.lower() writes a word-final capital sigma as ς.",
        uncased=["ο", "##δ", "##ος", "σ", "##ο", "##φ", "##ια", "##ς", ".", "α", "##σ", ".", "β"],
        cased=None,
    ),
]


def generated_lines(count, seed=0):
    """Random mixtures of fragments, glued by spaces, nothing, or invisible characters."""
    fragments = [
        word
        for line in HAND_WRITTEN[:40]
        for word in line.split()
        if len(word) < 40 and "Σ" not in word
    ]
    fragments += ["\x00", "\x07", "\x85", "\u200d", "\ufeff", "\ufffd", "\u0301", "\u20e3"]
    fragments += ["\U0001f3fd", "...", "!?", "--", "http://x.org/a?b=c", "3.14", "1,000"]
    glue = [" ", " ", " ", "", "\u00a0", "\t", "\u200b", "\u3000", "-", "\u200d", "\n"]
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        pieces = rng.choices(fragments, k=rng.randint(1, 14))
        lines.append("".join(p + rng.choice(glue) for p in pieces))
    return lines


def pydoc_lines(count):
    """Python's own documentation: English prose and code, every k-th line."""
    lines = [
        line.strip()
        for name in sorted(topics)
        for line in topics[name].splitlines()
        if line.strip()
    ]
    return lines[:: len(lines) // count][:count]


def parity_lines():
    lines = pydoc_lines(300) + HAND_WRITTEN + generated_lines(200)
    return list(dict.fromkeys(lines))


@pytest.mark.parametrize("lower_case", [True, False], ids=["uncased", "cased"])
def test_parity_with_hugging_face(bert_json, cased_json, lower_case):
    path = bert_json if lower_case else cased_json
    oracle = hf_oracle(path, lower_case=lower_case)
    tokenizer = WordPieceTokenizer(load_vocab(str(path)), lower_case=lower_case)
    lines = parity_lines()
    ours = tokenizer.tokenize(tf.constant(lines)).to_list()
    theirs = [e.ids for e in oracle.encode_batch(lines, add_special_tokens=False)]
    disagree = [(line, a, b) for line, a, b in zip(lines, ours, theirs, strict=True) if a != b]
    agree = len(lines) - len(disagree)
    mode = "uncased" if lower_case else "cased"
    print(f"\ntokenizer parity: {agree}/{len(lines)} lines ({mode}) identical to Hugging Face")
    for line, a, b in disagree[:10]:
        print(
            f"  {line!r}\n    ours {tokenizer.vocab.decode(a)}\n    HF   {tokenizer.vocab.decode(b)}"
        )
    assert agree == len(lines)

    checked = 0
    for deviation in HF_DEVIATIONS:
        expected = deviation.uncased if lower_case else deviation.cased
        [ours] = tokens_of(tokenizer, [deviation.line])
        [theirs] = [
            tokenizer.vocab.decode(e.ids)
            for e in oracle.encode_batch([deviation.line], add_special_tokens=False)
        ]
        if expected is None:
            assert ours == theirs, deviation.line
            continue
        assert ours == expected, deviation.reason
        assert theirs != expected, f"HF now follows the original here; drop: {deviation.reason}"
        checked += 1
    print(
        f"tokenizer parity: {checked} more lines ({mode}) where HF deviates from the original "
        "match hand-written expectations"
    )


def reference_words(text, lower_case):
    """The original BasicTokenizer (docs/reference.md#tokenizer), in plain Python."""
    cjk = [
        (0x4E00, 0x9FFF),
        (0x3400, 0x4DBF),
        (0x20000, 0x2A6DF),
        (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F),
        (0x2B820, 0x2CEAF),
        (0xF900, 0xFAFF),
        (0x2F800, 0x2FA1F),
    ]
    cleaned = []
    for char in text:
        category = unicodedata.category(char)
        if char in "\x00\ufffd" or (category in ("Cc", "Cf") and char not in "\t\n\r"):
            continue
        if char in "\t\n\r" or category == "Zs":
            cleaned.append(" ")
        elif any(lo <= ord(char) <= hi for lo, hi in cjk):
            cleaned.append(f" {char} ")
        else:
            cleaned.append(char)
    words = []
    for token in "".join(cleaned).split():
        if lower_case:
            token = unicodedata.normalize("NFD", token.lower())
            token = "".join(c for c in token if unicodedata.category(c) != "Mn")
        word = ""
        for char in token:
            code = ord(char)
            ascii_punctuation = 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96
            if ascii_punctuation or 123 <= code <= 126 or unicodedata.category(char)[0] == "P":
                words += [word, char] if word else [char]
                word = ""
            else:
                word += char
        if word:
            words.append(word)
    return words


@pytest.mark.slow
@pytest.mark.parametrize("lower_case", [True, False], ids=["uncased", "cased"])
def test_words_match_reference_for_every_character(bert_json, lower_case):
    """Every character whose Unicode data is unchanged since 3.2, in a word-final-sigma context.

    Newer characters are left out: Python 3.11 (Unicode 14), TensorFlow's ICU and
    RE2 each carry their own Unicode version, and disagree on recent additions.
    """
    old = unicodedata.ucd_3_2_0
    chars = [
        chr(code)
        for code in range(0x110000)
        if not 0xD800 <= code <= 0xDFFF
        and old.category(chr(code)) == unicodedata.category(chr(code)) != "Cn"
        and old.decomposition(chr(code)) == unicodedata.decomposition(chr(code))
    ]
    texts = [f"Σ{c}Σ b{c}C" for c in chars]
    tokenizer = WordPieceTokenizer(load_vocab(str(bert_json)), lower_case=lower_case)
    ours = tokenizer.words(tf.constant(texts)).to_list()
    bad = []
    for text, words in zip(texts, ours, strict=True):
        if [w.decode() for w in words] != reference_words(text, lower_case):
            bad.append(f"U+{ord(text[1]):04X}")
    assert not bad, f"{len(bad)} characters differ: {bad[:20]}"


def test_case_mappings_follow_str_lower(bert_json):
    tokenizer = WordPieceTokenizer(load_vocab(str(bert_json)), lower_case=True)
    words = tokenizer.words(tf.constant(["Straße ẞ İi ΟΔΟΣ ΑΣ.Β Ω K Å ǅ"])).to_list()[0]
    # ß stays (no case folding to "ss"); İ lowercases to i + U+0307, then loses the
    # mark; a word-final Σ becomes ς.
    expected = ["straße", "ß", "ii", "οδος", "ασ", ".", "β", "ω", "k", "a", "ǆ"]
    assert [w.decode() for w in words] == expected


def test_words_cased_keeps_case_and_accents(bert_json):
    tokenizer = WordPieceTokenizer(load_vocab(str(bert_json)), lower_case=False)
    words = tokenizer.words(tf.constant(["Café\u200dX, 中文 a\u00a0b\u3000c"])).to_list()[0]
    assert [w.decode() for w in words] == ["CaféX", ",", "中", "文", "a", "b", "c"]


def test_max_chars_per_word(bert_json):
    vocab = load_vocab(str(bert_json))
    # Eight e + U+0301: 16 characters, 8 once lowercasing strips the accents.
    lines = ["a" * 10, "a" * 11, "e\u0301" * 8]
    for lower_case, expected in [(True, [False, True, False]), (False, [False, True, True])]:
        tokenizer = WordPieceTokenizer(vocab, lower_case=lower_case, max_chars_per_word=10)
        ids = tokenizer.tokenize(tf.constant(lines)).to_list()
        assert [row == [vocab.unk_id] for row in ids] == expected
    # Characters, not bytes: 200 two-byte characters are within the limit.
    tokenizer = WordPieceTokenizer(vocab, lower_case=False)
    ids = tokenizer.tokenize(tf.constant(["д" * 200, "д" * 201])).to_list()
    assert ids[0] == [vocab.token_to_id("д")] + [vocab.token_to_id("##д")] * 199
    assert ids[1] == [vocab.unk_id]
    with pytest.raises(ValueError, match="max_chars_per_word"):
        WordPieceTokenizer(vocab, lower_case=True, max_chars_per_word=0)


def test_invalid_utf8_never_fails(bert_json):
    tokenizer = WordPieceTokenizer(load_vocab(str(bert_json)), lower_case=True)
    [row] = tokens_of(tokenizer, [b"caf\xc3 ok \xff\xfehello \xed\xa0\x80"])
    # Uncased, lowercasing turns invalid bytes into U+FFFD, which is dropped.
    assert row == ["caf", "ok", "hello"]
    tokenizer = WordPieceTokenizer(tokenizer.vocab, lower_case=False)
    [row] = tokens_of(tokenizer, [b"caf\xc3 ok \xff\xfehello"])
    assert row == ["[UNK]", "ok", "[UNK]"]


@pytest.mark.parametrize("lower_case", [True, False], ids=["uncased", "cased"])
def test_tokenize_in_dataset_map(bert_json, lower_case):
    tokenizer = WordPieceTokenizer(load_vocab(str(bert_json)), lower_case=lower_case)
    lines = parity_lines()
    expected = tokenizer.tokenize(tf.constant(lines)).to_list()
    dataset = (
        tf.data.Dataset.from_tensor_slices(lines)
        .batch(37)
        .map(tokenizer.tokenize, num_parallel_calls=4, deterministic=True)
        .unbatch()
    )
    assert [row.numpy().tolist() for row in dataset] == expected
    assert dataset.element_spec.dtype == tf.int32


def test_words_in_dataset_map(bert_json):
    tokenizer = WordPieceTokenizer(load_vocab(str(bert_json)), lower_case=True)
    dataset = tf.data.Dataset.from_tensor_slices(["Hello, World!", "ΟΔΟΣ"]).batch(2)
    [words] = dataset.map(tokenizer.words).take(1)
    assert words.to_list() == [[b"hello", b",", b"world", b"!"], ["οδος".encode()]]


def test_sentencepiece_in_dataset_map(sentencepiece_model):
    vocab = load_vocab(sentencepiece_model)
    tokenizer = SentencePieceTokenizer(vocab, lower_case=False)
    processor = sentencepiece.SentencePieceProcessor(model_file=sentencepiece_model)
    lines = pydoc_lines(200)
    dataset = (
        tf.data.Dataset.from_tensor_slices(lines)
        .batch(16)
        .map(tokenizer.tokenize, num_parallel_calls=2, deterministic=True)
        .unbatch()
    )
    assert [row.numpy().tolist() for row in dataset] == processor.encode(lines)


def test_sentencepiece_lower_case_and_specials(sentencepiece_model):
    vocab = load_vocab(sentencepiece_model)
    processor = sentencepiece.SentencePieceProcessor(model_file=sentencepiece_model)
    cased = SentencePieceTokenizer(vocab, lower_case=False)
    uncased = SentencePieceTokenizer(vocab, lower_case=True)
    text = "The Return Statement"
    assert uncased.tokenize(tf.constant([text])).to_list() == [processor.encode(text.lower())]
    assert uncased.words(tf.constant([text + "\u3000x"])).to_list() == [
        [b"the", b"return", b"statement", b"x"]
    ]
    # Text that spells a special token does not produce it.
    [ids] = cased.tokenize(tf.constant(["a [MASK] b [CLS]"])).to_list()
    specials = {vocab.token_to_id(t) for t in SPECIAL_TOKENS} - {vocab.unk_id}
    assert vocab.unk_id in ids and not specials & set(ids)


def test_make_tokenizer(bert_json, sentencepiece_model):
    config = config_lib.from_config(config_lib.default_config())
    wordpiece = make_tokenizer(config.replace(max_chars_per_word=7), str(bert_json))
    assert isinstance(wordpiece, WordPieceTokenizer)
    assert wordpiece.lower_case and wordpiece.max_chars_per_word == 7
    config = config.replace(tokenizer="sentencepiece", do_lower_case=False)
    spm = make_tokenizer(config, sentencepiece_model)
    assert isinstance(spm, SentencePieceTokenizer) and not spm.lower_case
    assert np.array_equal(spm.vocab.is_special[:5], [True] * 5)
    with pytest.raises(VocabError, match="needs a sentencepiece"):
        make_tokenizer(config, str(bert_json))
    with pytest.raises(VocabError, match="not a sentencepiece model"):
        make_tokenizer(config.replace(tokenizer="wordpiece"), sentencepiece_model)
