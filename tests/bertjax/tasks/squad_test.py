"""SQuAD answer decoding (bertjax/tasks/squad.py): logits back to answer text, the null answer,
n-best lists and the files written, with the real bert-base-uncased vocab. Reading,
windowing and batching SQuAD (data_pipeline/finetune/squad_input.py) is
tests/data_pipeline/finetune/squad_input_test.py's.

The fixtures (tests/testdata/finetune/squad_v*.json) are small files in the
official formats: 1.1 with several gold answers per question, 2.0 with
unanswerable questions and their plausible answers.
"""

import json
import pathlib

import numpy as np
import pytest
from support.bpe import modernbert_like
from support.squad import V1_CONFIG, V2_CONFIG, example, rows_of

from bertjax import losses
from bertjax.tasks import scores, squad
from bertjax.tasks.squad import final_text, predict_answers, write_predictions
from data_pipeline.finetune import squad_config, squad_input
from data_pipeline.tokenizer import BpeTokenizer, SentencePieceTokenizer
from data_pipeline.vocab import load_vocab


def oracle_logits(features):
    """Logits peaked on the labelled positions: the gold span, or [CLS] for no answer."""
    start = np.zeros(features.input_ids.shape, np.float32)
    end = np.zeros(features.input_ids.shape, np.float32)
    rows = np.arange(features.num_features)
    start[rows, features.start_positions] = 10.0
    end[rows, features.end_positions] = 10.0
    return rows, start, end


# ----------------------------------------------------------------------------- decoding


def test_answer_split_by_a_window_is_recovered_from_its_max_context_window(
    v1_data, small_features, tokenizer
):
    f = small_features
    marry = example(v1_data, "Whom did she marry?")
    rows = rows_of(f, marry.qid)
    # "pierre cu ##rie": the window that holds all of it labels it; the one
    # before holds "pierre cu" only, at its end, and labels [CLS].
    (full,) = [r for r in rows if f.start_positions[r]]
    split = full - 1
    start_piece = f.doc_start[full] + f.start_positions[full] - f.doc_offset[full]
    end_piece = f.doc_start[full] + f.end_positions[full] - f.doc_offset[full]
    split_start, split_end = f.doc_start[split], f.doc_start[split] + f.doc_length[split]
    assert split_start <= start_piece < split_end <= end_piece
    assert f.start_positions[split] == f.end_positions[split] == 0
    start_in_split = start_piece - split_start + f.doc_offset[split]
    assert not f.max_context[split, start_in_split]
    assert f.max_context[full, f.start_positions[full]]

    # The split window scores its truncated span highest, but its start has
    # more context in the next window, so that window's span wins.
    # (Any other start of the split window makes 0 + 15 with that end, below 10 + 10.)
    feature_index, start_logits, end_logits = oracle_logits(f)
    start_logits[split, start_in_split] = 15.0
    end_logits[split, f.doc_offset[split] + f.doc_length[split] - 1] = 15.0
    predictions = predict_answers(f, feature_index, start_logits, end_logits, tokenizer)
    assert predictions.answers[marry.qid] == "Pierre Curie"
    # Every other question, however its answer falls across windows, comes back too.
    for e in v1_data.examples:
        assert predictions.answers[e.qid] == e.answers[0].text


def test_oracle_logits_give_back_the_gold_text_v1(v1_data, v1_features, tokenizer):
    predictions = predict_answers(v1_features, *oracle_logits(v1_features), tokenizer)
    # The context's own characters come back: "Zürich" (not "zurich"), "1911"
    # out of "(1911).", "Pierre Curie" out of "Curie.".
    assert predictions.answers == {e.qid: e.answers[0].text for e in v1_data.examples}
    assert predictions.null_odds is None
    result = scores.squad_scores(v1_data.gold_answers(), predictions.answers, version="v1.1")
    assert result == {"exact_match": 1.0, "f1": 1.0}
    best = predictions.nbest[example(v1_data, "Whom did she marry?").qid]
    assert best[0]["text"] == "Pierre Curie"
    assert best[0]["start_logit"] == best[0]["end_logit"] == 10.0
    assert sum(entry["probability"] for entry in best) == pytest.approx(1.0)
    assert len({entry["text"] for entry in best}) == len(best) <= V1_CONFIG.n_best_size


def test_oracle_logits_give_back_the_gold_text_v2(v2_data, v2_features, tokenizer):
    predictions = predict_answers(v2_features, *oracle_logits(v2_features), tokenizer)
    expected = {e.qid: e.answers[0].text if e.answers else "" for e in v2_data.examples}
    assert predictions.answers == expected
    result = scores.squad_scores(v2_data.gold_answers(), predictions.answers, version="v2.0")
    assert result["exact_match"] == result["f1"] == 1.0
    for e in v2_data.examples:
        # The null answer scores 20 on unanswerable questions, 0 elsewhere.
        assert (predictions.null_odds[e.qid] > 0) == e.is_impossible
        assert "" in [entry["text"] for entry in predictions.nbest[e.qid]]


def test_null_answer_against_the_threshold(v2_data, tokenizer):
    chlorophyll = example(v2_data, "What pigment do chloroplasts contain?")
    data = squad_input.SquadData(v2_data.source, (chlorophyll,))
    for threshold, answer in ((0.0, ""), (1.4, ""), (1.6, "chlorophyll")):
        config = squad_config.SquadConfig(
            version_2_with_negative=True, null_score_diff_threshold=threshold
        )
        features = squad_input.make_features(data, tokenizer, config)
        _, start, end = oracle_logits(features)
        start *= 0.25  # the span scores 2.5 + 2.5
        end *= 0.25
        start[0, 0], end[0, 0] = 3.0, 3.5  # the null answer 6.5: 1.5 above the span
        predictions = predict_answers(features, [0], start, end, tokenizer)
        assert predictions.null_odds[chlorophyll.qid] == pytest.approx(1.5)
        assert predictions.answers[chlorophyll.qid] == answer
        assert predictions.nbest[chlorophyll.qid][0]["text"] == ""
        assert predictions.spans[chlorophyll.qid] == "chlorophyll"  # at any threshold


def test_v2_scores_at_the_null_threshold_best_on_dev(v2_data, v2_features, tokenizer):
    # The oracle's spans, with the null answer 1.5 above each answerable question's span
    # and 20 above each unanswerable one's: at threshold 0.0 every answer is "", and
    # the best threshold lies between 1.5 and 20.
    rows, start, end = oracle_logits(v2_features)
    start[:, 0] = np.maximum(start[:, 0], 11.5)
    end[:, 0] = np.maximum(end[:, 0], 10.0)
    predictions = predict_answers(v2_features, rows, start, end, tokenizer)
    gold = v2_data.gold_answers()
    at_zero = scores.squad_scores(gold, predictions.answers, version="v2.0")
    answerable = sum(bool(answers) for answers in gold.values())
    assert at_zero["f1"] == pytest.approx(1 - answerable / len(gold))
    tuned = squad.tuned_scores(gold, predictions)
    assert tuned["tuned_f1"] == tuned["tuned_exact_match"] == 1.0
    assert tuned["tuned_f1_threshold"] == pytest.approx(1.5)
    again = scores.null_thresholded(predictions.spans, predictions.null_odds, 1.5)
    assert scores.squad_scores(gold, again, version="v2.0")["f1"] == 1.0


def test_v1_never_answers_null(v1_data, v1_features, tokenizer):
    rows, start, end = oracle_logits(v1_features)
    start[:, 0] = end[:, 0] = 50.0  # [CLS] is not part of any document
    predictions = predict_answers(v1_features, rows, start, end, tokenizer)
    assert all(predictions.answers.values())


def test_spans_are_limited(v1_data, tokenizer):
    e = example(v1_data, "Whom did she marry?")
    features = squad_input.make_features(squad_input.SquadData("x", (e,)), tokenizer, V1_CONFIG)
    start = np.full(features.input_ids.shape, -100.0)
    end = np.full(features.input_ids.shape, -100.0)
    gold_start, gold_end = features.start_positions[0], features.end_positions[0]
    start[0, gold_start], end[0, gold_end] = 10.0, 10.0
    assert gold_start - 45 >= features.doc_offset[0]
    # The decoys score far above the answer, but their spans run 31 and 40
    # pieces (max_answer_length=30) or end before they start.
    start[0, gold_start - 31], end[0, gold_start - 1] = 100.0, 100.0
    start[0, gold_start - 40], end[0, gold_start - 45] = 90.0, 90.0
    predictions = predict_answers(features, [0], start, end, tokenizer)
    assert predictions.answers[e.qid] == "Pierre Curie"
    assert predictions.nbest[e.qid][0]["text"] == "Pierre Curie"


def test_rows_may_come_in_any_order_with_padding(v1_data, v1_features, tokenizer):
    rows, start, end = oracle_logits(v1_features)
    order = np.random.default_rng(0).permutation(rows.size)
    index = np.concatenate([rows[order], [-1, -1]])
    pad = np.zeros((2, start.shape[1]), np.float32)
    predictions = predict_answers(
        v1_features,
        index,
        np.concatenate([start[order], pad + 99]),
        np.concatenate([end[order], pad + 99]),
        tokenizer,
    )
    assert predictions.answers == {e.qid: e.answers[0].text for e in v1_data.examples}


def test_logits_must_cover_every_feature_once(v1_features, tokenizer):
    rows, start, end = oracle_logits(v1_features)
    with pytest.raises(
        squad_input.SquadError, match=r"feature 3 \(question '[0-9a-f]+'\) has 0 rows"
    ):
        predict_answers(v1_features, np.r_[rows[:3], rows[4:]], start[rows != 3], end[rows != 3], tokenizer)  # fmt: skip
    twice = np.r_[rows, 0]
    with pytest.raises(squad_input.SquadError, match="feature 0 .* has 2 rows"):
        predict_answers(v1_features, twice, start[twice], end[twice], tokenizer)
    with pytest.raises(ValueError, match="expected"):
        predict_answers(v1_features, rows, start[:, :10], end[:, :10], tokenizer)


def oracle_answers(tokenizer, v1_data, v2_data) -> dict:
    """Both versions' answers from logits peaked on the gold spans, each exactly right."""
    answers = {}
    for data, config in ((v1_data, V1_CONFIG), (v2_data, V2_CONFIG)):
        features = squad_input.make_features(data, tokenizer, config)
        predictions = predict_answers(features, *oracle_logits(features), tokenizer)
        version = "v2.0" if config.version_2_with_negative else "v1.1"
        result = scores.squad_scores(data.gold_answers(), predictions.answers, version=version)
        assert result["exact_match"] == 1.0
        answers.update(predictions.answers)
    return answers


def test_sentencepiece_tokenizer(sentencepiece_model, v1_data, v2_data):
    tokenizer = SentencePieceTokenizer(load_vocab(sentencepiece_model), lower_case=True)
    answers = oracle_answers(tokenizer, v1_data, v2_data)
    # Inside a word the pieces lack the word-start mark that the answer
    # tokenized alone has, so the span stays the whole word "(1911).", which
    # normalizes to the gold "1911".
    assert answers[example(v1_data, "In what year").qid] == "(1911)."
    assert answers[example(v1_data, "What is the largest city").qid] == "Zürich"


def test_bpe_tokenizer(tmp_path, v1_data, v2_data):
    # Byte-level BPE as ModernBERT's (support/bpe.py): cased, no accents stripped.
    path = tmp_path / "tokenizer.json"
    modernbert_like().save(str(path))
    tokenizer = BpeTokenizer(load_vocab(str(path)), lower_case=False)
    answers = oracle_answers(tokenizer, v1_data, v2_data)
    # The pieces' bytes give back the text as written: case, accents and all.
    assert answers[example(v1_data, "What is the largest city").qid] == "Zürich"


@pytest.mark.parametrize(
    "predicted, original, tokenized, expected",
    [
        ("zurich", "Zürich,", "zurich ,", "Zürich"),  # accents and case come back
        ("1911", "(1911).", "( 1911 ) .", "1911"),
        ("north - west", "north-west", "north - west", "north-west"),
        ("pierre cu", "Pierre Curie.", "pierre curie .", "Pierre Cu"),
        ("paris", "Warsaw", "warsaw", "Warsaw"),  # not found: the whole span
        ("i̇stanbul", "İstanbul", "i̇stanbul", "İstanbul"),  # lowercasing grew a character
        ("[UNK]", "Skłodowska", "skłodowska", "Skłodowska"),
    ],
)
def test_final_text(predicted, original, tokenized, expected):
    assert final_text(predicted, original, tokenized) == expected


def test_write_predictions(v2_features, tokenizer, tmp_path):
    predictions = predict_answers(v2_features, *oracle_logits(v2_features), tokenizer)
    paths = write_predictions(predictions, str(tmp_path / "out"))
    names = sorted(pathlib.Path(p).name for p in paths)
    assert names == ["nbest_predictions.json", "null_odds.json", "predictions.json"]
    assert json.loads((tmp_path / "out" / "predictions.json").read_text()) == predictions.answers
    assert json.loads((tmp_path / "out" / "null_odds.json").read_text()) == predictions.null_odds


# ----------------------------------------------------------------------------- packing


def test_the_span_loss_is_a_softmax_over_each_examples_own_tokens():
    rng = np.random.default_rng(0)
    start, end = rng.normal(size=(2, 10)).astype(np.float32)
    # One row: example 1 on tokens 0-3, example 2 on 4-8, padding at 9.
    packed = {
        "input_mask": np.array([[1, 1, 1, 1, 2, 2, 2, 2, 2, 0]]),
        "start_positions": np.array([[1, 6]]),
        "end_positions": np.array([[2, 8]]),
        "example_weight": np.ones((1, 2), np.float32),
    }

    def nll(logits, position):
        return np.log(np.exp(logits).sum()) - logits[position]

    expected = (nll(start[:4], 1) + nll(start[4:9], 2) + nll(end[:4], 2) + nll(end[4:9], 4)) / 2
    sums = losses.span_sums((start[None], end[None]), packed)
    assert sums["loss_sum"] == pytest.approx(expected, rel=1e-5)
    assert sums["weight"] == 2
    # Each example alone in its row, padding scored high: padding counts no more than
    # another example's tokens.
    plain_start, plain_end = np.full((2, 2, 10), 50.0, np.float32)
    plain_start[0, :4], plain_start[1, :5] = start[:4], start[4:9]
    plain_end[0, :4], plain_end[1, :5] = end[:4], end[4:9]
    plain = {
        "input_mask": (np.arange(10) < np.array([[4], [5]])).astype(np.int32),
        "start_positions": np.array([1, 2]),
        "end_positions": np.array([2, 4]),
        "example_weight": np.ones(2, np.float32),
    }
    plain_sums = losses.span_sums((plain_start, plain_end), plain)
    for key in sums:
        np.testing.assert_allclose(plain_sums[key], sums[key], rtol=1e-6)
