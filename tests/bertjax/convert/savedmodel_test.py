"""`python -m bertjax.convert export --format savedmodel`: a SavedModel that takes text,
served in a process with tensorflow and tensorflow_text alone
(tests/support/serve_savedmodel.py), against bertjax's own answers. The embedder is
exported by the command; the other workdirs by the function it calls, in this process
(the command's own start would add seconds of imports to each test).

The workdirs are all-MiniLM-L6-v2 imported (an embedder) and its encoder under random
heads (support/finetuned.py)."""

import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from support import REPO
from support.bpe import modernbert_like
from support.finetuned import finetuned_workdir
from support.serve_savedmodel import serve

import bertjax
from bertjax.convert import savedmodel
from bertjax.convert.errors import ConversionError
from data_pipeline.finetune import classification_input

pytestmark = pytest.mark.slow

# What breaks tokenizers: accents, CJK, control characters, an empty text, a text past
# the length limit, a 40-character word, and plain English.
TEXTS = [
    "Café résumé: naïve Ångström measurements!",
    "中文字符和日本語のテキスト，还有한국어",
    "control\x00chars\x07and\u200bzero\u00a0width\tspaces \x00 \x1f end",
    "",
    "The quick brown fox jumps over the lazy dog, again and again. " * 25,
    "pneumonoultramicroscopicsilicovolcanoconiosis"[:40] + " is one word",
    "The quick brown fox jumps over the lazy dog.",
]
PAIRS = ["Where?", "", "中文 and spaces", "an empty first text", "short", "x" * 40, "Why?"]


def export_command(workdir, out) -> str:
    """The command as a user runs it; returns what it printed."""
    done = subprocess.run(
        [sys.executable, "-m", "bertjax.convert", "export", "--format", "savedmodel",
         str(workdir), str(out)],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def ids_of_no_text(out) -> dict:
    """serve_ids's outputs for an empty batch (a tagger's: no words, word_splits [0]), in
    this process."""
    import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

    signature = tf.saved_model.load(str(out)).signatures["serve_ids"]
    inputs = {}
    for name, spec in signature.structured_input_signature[1].items():
        shape = [0, 32] if spec.shape.rank == 2 else [1 if name == "word_splits" else 0]
        inputs[name] = tf.zeros(shape, tf.int32)
    return {name: value.numpy() for name, value in signature(**inputs).items()}


def assert_empty(outputs: dict, shapes: dict) -> None:
    """Each output has its shape, and its dtype: float, or text (numpy's str, or TensorFlow's
    bytes objects) for a shape given as a list."""
    assert {name: list(value.shape) for name, value in outputs.items()} == {
        name: list(shape) for name, shape in shapes.items()
    }
    for name, shape in shapes.items():
        assert outputs[name].dtype.kind in ("USO" if isinstance(shape, list) else "f"), name


def host_features(restored, texts, pairs, length) -> dict:
    """The host pipeline's model inputs for `texts` (with `pairs`), as lists."""
    vocab = restored.tokenizer.vocab
    features = classification_input.encode_texts(
        restored.tokenizer, tf.constant(texts), tf.constant(pairs), max_seq_length=length,
        cls_id=vocab.cls_id, sep_id=vocab.sep_id, pad_id=vocab.pad_id,
    )  # fmt: skip
    return {name: np.asarray(value).tolist() for name, value in features.items()}


def test_a_classifier_of_pairs_answers_as_classify_from_text_and_from_ids(minilm_workdir, tmp_path):
    workdir = finetuned_workdir(minilm_workdir, tmp_path, "classification")
    out = tmp_path / "served"
    exported = savedmodel.export_savedmodel(workdir, str(out))
    assert (list(exported["texts"]), exported["outputs"]) == (
        ["text", "text_pair"],
        ["label", "logits", "probabilities"],
    )
    restored = bertjax.restore(workdir)
    ids = host_features(restored, TEXTS, PAIRS, restored.max_seq_length)
    by_text, by_ids, no_text, short = serve(
        out,
        [
            {"signature": "serving_default", "inputs": {"text": TEXTS, "text_pair": PAIRS}},
            {"signature": "serve_ids", "inputs": {k: ids[k] for k in savedmodel_inputs()}},
            {"signature": "serving_default", "inputs": {"text": [], "text_pair": []}},
            {"signature": "serve_ids", "inputs": {k: [row[:32] for row in ids[k][:2]]
                                                  for k in savedmodel_inputs()}},
        ],
        tmp_path,
    )  # fmt: skip
    # An empty batch: empty outputs of each output's dtype.
    for outputs in (no_text, ids_of_no_text(out)):
        assert_empty(outputs, {"label": [0], "probabilities": (0, 2), "logits": (0, 2)})
    ours = bertjax.classify(restored, TEXTS, PAIRS)
    assert list(by_text["label"]) == [row["label"] for row in ours]
    probabilities = [list(row["probabilities"].values()) for row in ours]
    np.testing.assert_allclose(by_text["probabilities"], probabilities, atol=1e-5)
    # The graph's tokens are the host pipeline's: the ids signature gives the same logits.
    np.testing.assert_array_equal(by_ids["logits"], by_text["logits"])
    # Any length up to the model's: the short texts padded to 32 give their logits.
    np.testing.assert_allclose(short["logits"], by_text["logits"][:2], atol=1e-5)


def test_a_reranker_scores_each_pair_as_rerank_does(minilm_workdir, tmp_path):
    workdir = finetuned_workdir(minilm_workdir, tmp_path, "reranking")
    out = tmp_path / "served"
    exported = savedmodel.export_savedmodel(workdir, str(out))
    assert (list(exported["texts"]), exported["outputs"]) == (["query", "passage"], ["score"])
    restored = bertjax.restore(workdir)
    # Each text as the query of the next, past the query's 16 tokens and the pair's 128.
    queries = TEXTS[1:] + TEXTS[:1]
    by_text, no_text = serve(
        out,
        [
            {"signature": "serving_default", "inputs": {"query": queries, "passage": TEXTS}},
            {"signature": "serving_default", "inputs": {"query": [], "passage": []}},
        ],
        tmp_path,
    )
    assert_empty(no_text, {"score": (0,)})
    ours = [bertjax.rerank(restored, q, [p])[0] for q, p in zip(queries, TEXTS, strict=True)]
    np.testing.assert_allclose(by_text["score"], ours, atol=1e-5)


def savedmodel_inputs() -> tuple[str, ...]:
    return ("input_ids", "input_mask", "segment_ids")


def test_an_imported_embedder_embeds_as_embed_past_its_length_limit(minilm_workdir, tmp_path):
    out = tmp_path / "served"
    printed = export_command(minilm_workdir, out)
    assert "text -> embedding" in printed
    response, no_text = serve(
        out,
        [
            {"signature": "serving_default", "inputs": {"text": TEXTS}},
            {"signature": "serving_default", "inputs": {"text": []}},
        ],
        tmp_path,
    )
    for outputs in (no_text, ids_of_no_text(out)):
        assert_empty(outputs, {"embedding": (0, 384)})
    ours = bertjax.embed(bertjax.restore(str(minilm_workdir)), TEXTS)
    assert response["embedding"].shape == (len(TEXTS), 384)
    np.testing.assert_allclose(response["embedding"], ours, atol=1e-5)

    listed = subprocess.run(
        [str(REPO / ".venv/bin/saved_model_cli"), "show", "--all", "--dir", str(out)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "signature_def['serving_default']" in listed
    assert "signature_def['serve_ids']" in listed


def test_a_shorter_length_cuts_texts_there_and_a_length_past_the_positions_is_one_line(
    minilm_workdir, tmp_path
):
    result = savedmodel.export_savedmodel(str(minilm_workdir), str(tmp_path / "s"), None, 32)
    assert result["length"] == 32
    (response,) = serve(
        tmp_path / "s", [{"signature": "serving_default", "inputs": {"text": TEXTS}}], tmp_path
    )
    restored = savedmodel.with_length(bertjax.restore(str(minilm_workdir)), 32)
    np.testing.assert_allclose(response["embedding"], bertjax.embed(restored, TEXTS), atol=1e-5)
    with pytest.raises(ConversionError, match="--max_seq_length=513: from 3"):
        savedmodel.export_savedmodel(str(minilm_workdir), str(tmp_path / "t"), None, 513)
    assert not (tmp_path / "t").exists()


def test_a_regressor_returns_its_score(minilm_workdir, tmp_path):
    workdir = finetuned_workdir(minilm_workdir, tmp_path, "regression")
    out = tmp_path / "served"
    savedmodel.export_savedmodel(workdir, str(out))
    response, no_text = serve(
        out,
        [
            {"signature": "serving_default", "inputs": {"text": TEXTS[:3], "text_pair": PAIRS[:3]}},
            {"signature": "serving_default", "inputs": {"text": [], "text_pair": []}},
        ],
        tmp_path,
    )
    assert_empty(no_text, {"score": (0,)})
    ours = bertjax.classify(bertjax.restore(workdir), TEXTS[:3], PAIRS[:3])
    np.testing.assert_allclose(response["score"], [row["score"] for row in ours], atol=1e-5)


def test_a_tagger_tags_each_word_as_tag_does_across_windows(minilm_workdir, tmp_path):
    # The long text is 300 words: three windows of a 128-token model. A word of a NUL
    # alone is [UNK], and U+001F splits words as str.split() splits them.
    workdir = finetuned_workdir(minilm_workdir, tmp_path, "tagging")
    out = tmp_path / "served"
    exported = savedmodel.export_savedmodel(workdir, str(out))
    assert (list(exported["texts"]), exported["outputs"]) == (["text"], ["tags"])
    response, no_text, no_word = serve(
        out,
        [
            {"signature": "serving_default", "inputs": {"text": TEXTS}},
            {"signature": "serving_default", "inputs": {"text": []}},
            {"signature": "serving_default", "inputs": {"text": ["", " \t "]}},
        ],
        tmp_path,
    )
    # No text, and texts without a word: no tags.
    for outputs in (no_text, ids_of_no_text(out)):
        assert_empty(outputs, {"tags": [0, 0]})
    assert_empty(no_word, {"tags": [2, 0]})
    restored = bertjax.restore(workdir)
    for text, row in zip(TEXTS, response["tags"], strict=True):
        ours = [tag for _, tag in bertjax.tag(restored, text)]
        assert list(row[: len(ours)]) == ours and set(row[len(ours) :]) <= {""}


def test_a_reader_answers_as_answer_does_across_windows(minilm_workdir, tmp_path):
    # The contexts are TEXTS: the long one is 325 words, five windows of a 128-token
    # model 32 tokens apart; the empty one has no span, so "" (answer() refuses it).
    workdir = finetuned_workdir(minilm_workdir, tmp_path, "squad")
    out = tmp_path / "served"
    exported = savedmodel.export_savedmodel(workdir, str(out))
    assert (list(exported["texts"]), exported["outputs"]) == (
        ["question", "context"],
        ["answer", "score"],
    )
    questions = ["Who?", "", "中文?", "what is résumé", "", "why a word", "where"]
    restored = bertjax.restore(workdir)
    rows = host_features(restored, ["q"], ["a b"], 32)
    by_text, by_ids, no_text, no_word = serve(
        out,
        [
            {"signature": "serving_default", "inputs": {"question": questions, "context": TEXTS}},
            {"signature": "serve_ids", "inputs": {k: rows[k] for k in savedmodel_inputs()}},
            {"signature": "serving_default", "inputs": {"question": [], "context": []}},
            {"signature": "serving_default", "inputs": {"question": ["Who?"], "context": [" "]}},
        ],
        tmp_path,
    )
    assert_empty(no_text, {"answer": [0], "score": (0,)})
    assert_empty(ids_of_no_text(out), {"start_logits": (0, 32), "end_logits": (0, 32)})
    assert (list(no_word["answer"]), list(no_word["score"])) == ([""], [0.0])
    for question, context, answer, score in zip(
        questions, TEXTS, by_text["answer"], by_text["score"], strict=True
    ):
        if not context:
            assert (answer, score) == ("", 0.0)
            continue
        ours = bertjax.answer(restored, question, context)
        best = next(entry for entry in ours["nbest"] if entry["text"] == ours["text"])
        assert answer == ours["text"]
        assert abs(score - best["start_logit"] - best["end_logit"]) < 1e-4
    assert by_ids["start_logits"].shape == by_ids["end_logits"].shape == (1, 32)


def test_a_bpe_tokenizer_is_one_line_before_anything_loads(minilm_workdir, tmp_path):
    bpe = tmp_path / "bpe"
    bpe.mkdir()
    (bpe / "task.json").write_text((minilm_workdir / "task.json").read_text())
    modernbert_like().save(str(bpe / "vocab.json"))
    with pytest.raises(ConversionError, match="vocab.json: a byte-level BPE tokenizer runs in"):
        savedmodel.export_savedmodel(str(bpe), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_an_out_folder_that_is_not_empty_is_refused_before_anything_loads(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "kept.txt").write_text("mine")
    with pytest.raises(ConversionError, match="already exists and is not empty"):
        savedmodel.export_savedmodel(str(tmp_path / "no_workdir"), str(tmp_path / "out"))
    assert (tmp_path / "out" / "kept.txt").read_text() == "mine"
