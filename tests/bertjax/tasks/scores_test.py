"""Task metrics against values worked out by hand, then against scipy/sklearn on random data."""

import math

import numpy as np
import pytest

from bertjax.tasks import scores

# ----------------------------------------------------------------------------- classification


def test_accuracy():
    assert scores.accuracy([0, 1, 1, 0], [0, 1, 0, 0]) == 0.75
    assert scores.accuracy(np.array([[2], [1]]), [2, 1]) == 1.0


def test_f1_of_the_positive_class():
    # tp=2, fp=1, fn=1: precision = recall = 2/3.
    assert scores.f1([1, 1, 0, 0, 1], [1, 0, 1, 0, 1]) == pytest.approx(2 / 3)
    # Class 0 does not count: all negatives right is still F1 0.
    assert scores.f1([0, 0, 0], [0, 0, 0]) == 0.0
    assert scores.f1([1, 1], [0, 0]) == 0.0


def test_matthews_binary():
    # tp=2, tn=2, fp=1, fn=1: (2*2 - 1*1) / sqrt(3*3*3*3) = 1/3.
    assert scores.matthews_corrcoef([1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 1]) == pytest.approx(1 / 3)
    assert scores.matthews_corrcoef([1, 0, 1, 0], [1, 0, 1, 0]) == pytest.approx(1.0)
    assert scores.matthews_corrcoef([1, 0, 1, 0], [0, 1, 0, 1]) == pytest.approx(-1.0)


def test_matthews_degenerate_is_zero():
    # A constant prediction (or constant labels) leaves the correlation undefined.
    assert scores.matthews_corrcoef([1, 0, 1, 0], [1, 1, 1, 1]) == 0.0
    assert scores.matthews_corrcoef([0, 0, 0], [1, 0, 1]) == 0.0
    assert scores.matthews_corrcoef([1, 1, 1], [1, 1, 1]) == 0.0


def test_matthews_multiclass():
    # Diagonal 4 of 6, every class 2 true and 2 predicted:
    # (4*6 - 12) / sqrt((36 - 12) * (36 - 12)) = 0.5.
    assert scores.matthews_corrcoef([0, 1, 2, 0, 1, 2], [0, 2, 1, 0, 1, 2]) == pytest.approx(0.5)


def test_length_mismatch_and_empty_inputs_fail():
    with pytest.raises(ValueError, match="3 labels but 2 predictions"):
        scores.accuracy([0, 1, 1], [0, 1])
    with pytest.raises(ValueError, match="no examples"):
        scores.pearson([], [])


# ----------------------------------------------------------------------------- regression


def test_pearson():
    # Deviations (-1.5, -.5, .5, 1.5) and (-3, -1, 0, 4): 11 / sqrt(5 * 26).
    assert scores.pearson([1, 2, 3, 4], [2, 4, 5, 9]) == pytest.approx(11 / math.sqrt(130))
    assert scores.pearson([1, 2, 3], [6, 4, 2]) == pytest.approx(-1.0)


def test_spearman_ties_share_their_average_rank():
    # Ranks (1, 2.5, 2.5, 4) and (1, 3, 2, 4): 4.5 / sqrt(4.5 * 5) = sqrt(0.9).
    assert scores.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(math.sqrt(0.9))
    # Any increasing relation is a perfect rank correlation.
    assert scores.spearman([1, 2, 3, 4], [1, 10, 100, 1000]) == pytest.approx(1.0)
    # All tied: every value has rank 2.
    np.testing.assert_array_equal(scores._average_ranks(np.array([5.0, 5.0, 5.0])), [2, 2, 2])
    np.testing.assert_array_equal(
        scores._average_ranks(np.array([3.0, 1.0, 3.0, 2.0, 3.0])), [4, 1, 4, 2, 4]
    )


def test_correlations_of_a_constant_are_nan():
    assert math.isnan(scores.pearson([1, 2, 3], [4, 4, 4]))
    assert math.isnan(scores.spearman([2, 2, 2], [1, 2, 3]))


def test_against_scipy_and_sklearn(test_extras):
    from scipy import stats
    from sklearn import metrics

    rng = np.random.default_rng(0)
    x = rng.integers(0, 6, 200).astype(float)  # many ties
    y = x + rng.normal(0, 2, 200).round()
    assert scores.pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
    assert scores.spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)
    labels, predictions = rng.integers(0, 2, 300), rng.integers(0, 2, 300)
    assert scores.f1(labels, predictions) == pytest.approx(metrics.f1_score(labels, predictions))
    for k in (2, 3):
        labels, predictions = rng.integers(0, k, 300), rng.integers(0, k, 300)
        assert scores.matthews_corrcoef(labels, predictions) == pytest.approx(
            metrics.matthews_corrcoef(labels, predictions)
        )


# ----------------------------------------------------------------------------- SQuAD
#
# Expected numbers follow the official scripts' rules by hand. Both: normalize =
# lowercase, drop string.punctuation, drop a/an/the as words, collapse spaces.
# evaluate-v1.1.py keeps every gold answer; token F1 is 0 when no token is in
# common (so "" against "" is F1 0, though EM 1). evaluate-v2.0.py drops gold
# answers that normalize to "" (falling back to [""]), calls a question HasAns
# when its raw answer list is non-empty, and scores F1 = (both token lists
# equal) when either side is empty.

VERSIONS = ("v1.1", "v2.0")


@pytest.mark.parametrize(
    "text, normalized",
    [
        ("The  Quick, brown fox!", "quick brown fox"),
        ("An apple a day", "apple day"),
        ("theater", "theater"),  # articles only as whole words
        ("A.B.C.", "abc"),
        ("the-end", "theend"),  # punctuation goes before articles are looked for
        ("Zürich's\tHB", "zürichs hb"),  # non-ASCII letters stay
        ("(1911).", "1911"),
        ("  ", ""),
        ("The", ""),
        ("--", ""),
        ("a . an", ""),
    ],
)
def test_normalize_answer(text, normalized):
    assert scores.normalize_answer(text) == normalized


@pytest.mark.parametrize("version", VERSIONS)
def test_answer_f1_is_over_token_bags(version):
    # "cat sat on mat" against "cat on mat": precision 3/4, recall 1, F1 6/7.
    f1 = scores.answer_f1(["a cat on a mat"], "the cat sat on the mat", version=version)
    assert f1 == pytest.approx(6 / 7)
    # Bags, not sets: one x and one y in common out of three tokens each.
    assert scores.answer_f1(["x y y"], "x x y", version=version) == pytest.approx(2 / 3)
    assert scores.answer_f1(["Warsaw"], "Paris", version=version) == 0.0
    assert scores.answer_f1(["Warsaw"], "warsaw.", version=version) == 1.0


@pytest.mark.parametrize("version", VERSIONS)
def test_max_over_gold_answers(version):
    # "Curie" against "Pierre Curie": precision 1, recall 1/2, F1 2/3; against "Pierre": 0.
    assert scores.answer_f1(["Pierre Curie", "Pierre"], "Curie", version=version) == (
        pytest.approx(2 / 3)
    )
    assert scores.answer_exact_match(["Pierre Curie", "Pierre"], "pierre", version=version) == 1.0
    assert scores.answer_exact_match(["Pierre Curie"], "Curie", version=version) == 0.0
    # "marie curie" against "pierre curie": 1 in common, P = R = 1/2, F1 1/2;
    # against "marie and pierre curie": 2 in common, P 1, R 1/2, F1 2/3;
    # against "curie": 1 in common, P 1/2, R 1, F1 2/3. The max is 2/3, EM 0.
    gold = ["Pierre Curie", "Marie and Pierre Curie", "Curie"]
    assert scores.answer_f1(gold, "Marie Curie", version=version) == pytest.approx(2 / 3)
    assert scores.answer_exact_match(gold, "Marie Curie", version=version) == 0.0
    # EM and F1 take their max separately: EM 1 from "curie", F1 1 from it too,
    # though "pierre curie" alone would give F1 2/3.
    assert scores.answer_exact_match(gold, "The Curie", version=version) == 1.0
    assert scores.answer_f1(gold, "The Curie", version=version) == 1.0


def test_gold_the_predicted_the():
    # Gold ["the"], prediction "the": both normalize to "".
    # v1.1: EM ("" == "") 1; F1 0 tokens in common -> 0.
    assert scores.answer_exact_match(["the"], "the", version="v1.1") == 1.0
    assert scores.answer_f1(["the"], "the", version="v1.1") == 0.0
    assert scores.squad_scores({"q": ["the"]}, {"q": "the"}, version="v1.1") == {
        "exact_match": 1.0,
        "f1": 0.0,
    }
    # v2.0: the gold falls back to [""]; EM ("" == "") 1; F1: both token lists
    # empty and equal -> 1. The raw list ["the"] is non-empty, so HasAns.
    assert scores.answer_exact_match(["the"], "the", version="v2.0") == 1.0
    assert scores.answer_f1(["the"], "the", version="v2.0") == 1.0
    assert scores.squad_scores({"q": ["the"]}, {"q": "the"}, version="v2.0") == {
        "exact_match": 1.0,
        "f1": 1.0,
        "has_answer_exact_match": 1.0,
        "has_answer_f1": 1.0,
    }


def test_gold_that_normalizes_to_nothing_beside_a_real_answer():
    gold = ["The", "Paris"]
    # v1.1 keeps "The": "" equals normalize("The") -> EM 1; F1 0 against both
    # ("" vs "": nothing in common; "" vs "paris": nothing in common).
    assert scores.answer_exact_match(gold, "", version="v1.1") == 1.0
    assert scores.answer_f1(gold, "", version="v1.1") == 0.0
    # v2.0 keeps only "Paris": EM 0; F1: the prediction is empty, the gold is
    # not -> 0.
    assert scores.answer_exact_match(gold, "", version="v2.0") == 0.0
    assert scores.answer_f1(gold, "", version="v2.0") == 0.0
    # The real answer scores alike in both.
    for version in VERSIONS:
        assert scores.answer_exact_match(gold, "the Paris", version=version) == 1.0
        assert scores.answer_f1(gold, "Paris!", version=version) == 1.0
    # v1.1: "the" beside "Marie and Pierre Curie" changes nothing for a real
    # prediction ("marie curie": F1 0 against "", 2/3 against the other).
    assert scores.answer_f1(
        ["the", "Marie and Pierre Curie"], "Marie Curie", version="v1.1"
    ) == pytest.approx(2 / 3)


@pytest.mark.parametrize("answer", [".", "--", "?!", "(a)."])
def test_punctuation_only_answers(answer):
    # Each normalizes to "". v1.1: the prediction "--" (also "") is EM 1, F1 0.
    assert scores.answer_exact_match([answer], "--", version="v1.1") == 1.0
    assert scores.answer_f1([answer], "--", version="v1.1") == 0.0
    # v2.0: the gold falls back to [""], and "--" is empty too: EM 1, F1 1.
    assert scores.answer_exact_match([answer], "--", version="v2.0") == 1.0
    assert scores.answer_f1([answer], "--", version="v2.0") == 1.0
    # A real prediction: v1.1 "1911" vs "": no match, nothing in common;
    # v2.0 "1911" vs [""]: no match, one side empty -> 0.
    for version in VERSIONS:
        assert scores.answer_exact_match([answer], "1911", version=version) == 0.0
        assert scores.answer_f1([answer], "1911", version=version) == 0.0
        # Beside a real answer, the real one is matched in both.
        assert scores.answer_exact_match([answer, "1911"], "(1911).", version=version) == 1.0
        assert scores.answer_f1([answer, "1911"], "(1911).", version=version) == 1.0


def test_no_answer_questions_v2():
    # [] -> gold [""]: only a prediction that normalizes to "" matches, with F1 1.
    assert scores.answer_exact_match([], "", version="v2.0") == 1.0
    assert scores.answer_f1([], "", version="v2.0") == 1.0
    assert scores.answer_exact_match([], "The.", version="v2.0") == 1.0
    assert scores.answer_f1([], "The.", version="v2.0") == 1.0
    assert scores.answer_exact_match([], "oxygen", version="v2.0") == 0.0
    assert scores.answer_f1([], "oxygen", version="v2.0") == 0.0
    assert scores.answer_f1(["oxygen"], "", version="v2.0") == 0.0
    # A gold answer that normalizes to nothing does not count as one.
    assert scores.answer_exact_match(["the"], "", version="v2.0") == 1.0
    assert scores.answer_exact_match(["the", "Ming"], "", version="v2.0") == 0.0
    result = scores.squad_scores({"q": []}, {"q": ""}, version="v2.0")
    assert result == {
        "exact_match": 1.0,
        "f1": 1.0,
        "no_answer_exact_match": 1.0,
        "no_answer_f1": 1.0,
    }


def test_v1_has_no_unanswerable_questions():
    with pytest.raises(ValueError, match="no gold answers.*version='v2.0'"):
        scores.answer_exact_match([], "", version="v1.1")
    with pytest.raises(ValueError, match="no gold answers"):
        scores.answer_f1([], "", version="v1.1")
    with pytest.raises(ValueError, match="question 'q2': no gold answers"):
        scores.squad_scores({"q1": ["Warsaw"], "q2": []}, {"q1": "Warsaw"}, version="v1.1")
    with pytest.raises(ValueError, match="question 1: no gold answers"):
        scores.exact_match([["Warsaw"], []], ["Warsaw", ""], version="v1.1")


def test_has_answer_follows_the_raw_answer_list_v2():
    # q1's raw answers ["a"] are non-empty: HasAns, though "a" normalizes to ""
    # and the gold falls back to [""]: "x" vs [""] is EM 0, F1 0.
    # q2 [] is NoAns: "" vs [""] is EM 1, F1 1. q3 "Paris": EM 1, F1 1.
    gold = {"q1": ["a"], "q2": [], "q3": ["Paris"]}
    predictions = {"q1": "x", "q2": "", "q3": "paris"}
    assert scores.squad_scores(gold, predictions, version="v2.0") == pytest.approx(
        {
            "exact_match": 2 / 3,
            "f1": 2 / 3,
            "has_answer_exact_match": 1 / 2,  # q1 0, q3 1
            "has_answer_f1": 1 / 2,
            "no_answer_exact_match": 1.0,  # q2
            "no_answer_f1": 1.0,
        }
    )
    # The empty prediction matches q1's fallback gold [""] and still counts as HasAns.
    result = scores.squad_scores({"q1": ["a"]}, {"q1": ""}, version="v2.0")
    assert result == {
        "exact_match": 1.0,
        "f1": 1.0,
        "has_answer_exact_match": 1.0,
        "has_answer_f1": 1.0,
    }


def test_squad_scores_v2():
    gold = {"q1": ["Warsaw"], "q2": [], "q3": ["Pierre Curie"], "q4": ["1911"]}
    predictions = {"q1": "warsaw.", "q2": "", "q3": "Curie"}  # q4 unanswered: scores 0
    result = scores.squad_scores(gold, predictions, version="v2.0")
    assert result["exact_match"] == pytest.approx(2 / 4)
    assert result["f1"] == pytest.approx((1 + 1 + 2 / 3 + 0) / 4)
    assert result["has_answer_exact_match"] == pytest.approx(1 / 3)
    assert result["has_answer_f1"] == pytest.approx((1 + 2 / 3) / 3)
    assert result["no_answer_exact_match"] == 1.0
    assert result["no_answer_f1"] == 1.0


def test_squad_scores_v1():
    gold = {"q1": ["Warsaw"], "q2": ["The", "Paris"], "q3": ["Pierre Curie"], "q4": ["1911"]}
    # q1 EM 1 F1 1; q2 "" matches "The": EM 1, F1 0; q3 EM 0, F1 2/3; q4 missing: 0.
    predictions = {"q1": "warsaw.", "q2": "", "q3": "Curie"}
    result = scores.squad_scores(gold, predictions, version="v1.1")
    assert result == pytest.approx({"exact_match": 2 / 4, "f1": (1 + 0 + 2 / 3 + 0) / 4})
    # v1.1 never splits, even with gold that normalizes to nothing.
    assert set(scores.squad_scores({"q1": ["Warsaw"]}, {"q1": "Paris"}, version="v1.1")) == {
        "exact_match",
        "f1",
    }


def test_split_scores_appear_per_group_v2():
    answerable = scores.squad_scores({"q1": ["Warsaw"]}, {"q1": "Paris"}, version="v2.0")
    assert answerable == {
        "exact_match": 0.0,
        "f1": 0.0,
        "has_answer_exact_match": 0.0,
        "has_answer_f1": 0.0,
    }
    unanswerable = scores.squad_scores({"q1": [], "q2": []}, {"q1": "", "q2": "x"}, version="v2.0")
    assert unanswerable == {
        "exact_match": 0.5,
        "f1": 0.5,
        "no_answer_exact_match": 0.5,
        "no_answer_f1": 0.5,
    }


@pytest.mark.parametrize("version", VERSIONS)
def test_missing_predictions_score_zero_and_extra_ones_are_ignored(version):
    gold = {"q1": ["Warsaw"], "q2": ["1911"]}
    predictions = {"q1": "Warsaw", "q3": "1911"}  # q2 missing, q3 not a question
    result = scores.squad_scores(gold, predictions, version=version)
    assert result["exact_match"] == result["f1"] == 0.5
    with pytest.raises(ValueError, match="no questions"):
        scores.squad_scores({}, {"q1": "x"}, version=version)


def test_a_missing_prediction_for_an_unanswerable_question_scores_zero_v2():
    # Predicting "" would score 1; predicting nothing scores 0.
    result = scores.squad_scores({"q1": ["Warsaw"], "q2": []}, {"q1": "Warsaw"}, version="v2.0")
    assert result == {
        "exact_match": 0.5,
        "f1": 0.5,
        "has_answer_exact_match": 1.0,
        "has_answer_f1": 1.0,
        "no_answer_exact_match": 0.0,
        "no_answer_f1": 0.0,
    }


def test_version_is_checked():
    for bad in ("2.0", "v2", "V1.1", None):
        with pytest.raises(ValueError, match=f"version {bad!r}: must be one of v1.1, v2.0"):
            scores.squad_scores({"q": ["x"]}, {"q": "x"}, version=bad)
        with pytest.raises(ValueError, match="version"):
            scores.answer_f1(["x"], "x", version=bad)
        with pytest.raises(ValueError, match="version"):
            scores.exact_match([["x"]], ["x"], version=bad)
    with pytest.raises(TypeError, match="version"):
        scores.squad_scores({"q": ["x"]}, {"q": "x"})  # no default: the caller must say
    with pytest.raises(TypeError, match="version"):
        scores.squad_f1([["x"]], ["x"])


def test_gold_answers_must_be_lists():
    with pytest.raises(TypeError, match="question 'q': gold answers must be a list"):
        scores.squad_scores({"q": "Paris"}, {"q": "Paris"}, version="v2.0")
    with pytest.raises(TypeError, match="not the string 'Paris'"):
        scores.answer_exact_match("Paris", "Paris", version="v1.1")


@pytest.mark.parametrize("version", VERSIONS)
def test_squad_list_form_matches_dict_form(version):
    gold = [["Warsaw"], ["the", "Ming"], ["Pierre Curie"]]
    predictions = ["warsaw.", "", "Curie"]
    # "" vs ["the", "Ming"]: v1.1 EM 1 (matches "the"), F1 0; v2.0 EM 0, F1 0.
    expected_em = {"v1.1": 2 / 3, "v2.0": 1 / 3}[version]
    assert scores.exact_match(gold, predictions, version=version) == pytest.approx(expected_em)
    assert scores.squad_f1(gold, predictions, version=version) == pytest.approx((1 + 0 + 2 / 3) / 3)
    as_dict = scores.squad_scores(
        {str(i): g for i, g in enumerate(gold)},
        {str(i): p for i, p in enumerate(predictions)},
        version=version,
    )
    assert as_dict["exact_match"] == pytest.approx(expected_em)
    assert as_dict["f1"] == pytest.approx((1 + 0 + 2 / 3) / 3)
    with pytest.raises(ValueError, match="3 gold answer lists but 2 predictions"):
        scores.exact_match(gold, predictions[:2], version=version)


def _reference_question(version, answers, prediction):
    """One question's (EM, F1), written out plainly from the official rules."""

    def tokens(text):
        return scores.normalize_answer(text).split()

    def token_f1(gold, predicted):
        g, p = tokens(gold), tokens(predicted)
        if version == "v2.0" and (not g or not p):
            return float(g == p)
        common = sum(min(g.count(t), p.count(t)) for t in set(g))
        if common == 0:
            return 0.0
        precision, recall = common / len(p), common / len(g)
        return 2 * precision * recall / (precision + recall)

    if version == "v1.1":
        kept = list(answers)
    else:
        kept = [a for a in answers if scores.normalize_answer(a) != ""] or [""]
    em = max(float(scores.normalize_answer(a) == scores.normalize_answer(prediction)) for a in kept)
    return em, max(token_f1(a, prediction) for a in kept)


@pytest.mark.parametrize("version", VERSIONS)
def test_against_the_rules_on_random_questions(version):
    rng = np.random.default_rng(1)
    words = ["the", "a", "An", ".", "--", "Paris", "paris,", "x", "y", "x-y", ""]

    def text():
        return " ".join(rng.choice(words, size=rng.integers(0, 4)))

    gold, predictions = {}, {}
    for n in range(400):
        answers = [text() for _ in range(rng.integers(0 if version == "v2.0" else 1, 4))]
        gold[f"q{n}"] = answers
        if rng.random() < 0.9:
            predictions[f"q{n}"] = text()
    rows = {
        qid: _reference_question(version, answers, predictions[qid])
        if qid in predictions
        else (0.0, 0.0)
        for qid, answers in gold.items()
    }
    expected = {
        "exact_match": np.mean([em for em, _ in rows.values()]),
        "f1": np.mean([f1 for _, f1 in rows.values()]),
    }
    if version == "v2.0":
        for prefix, has in (("has_answer", True), ("no_answer", False)):
            group = [rows[qid] for qid, answers in gold.items() if bool(answers) == has]
            expected[f"{prefix}_exact_match"] = np.mean([em for em, _ in group])
            expected[f"{prefix}_f1"] = np.mean([f1 for _, f1 in group])
    assert scores.squad_scores(gold, predictions, version=version) == pytest.approx(expected)
    for qid, answers in gold.items():
        if qid in predictions:
            em, f1 = rows[qid]
            assert scores.answer_exact_match(answers, predictions[qid], version=version) == em
            assert scores.answer_f1(answers, predictions[qid], version=version) == (
                pytest.approx(f1)
            )


# ----------------------------------------------------------------------------- tagging


@pytest.mark.parametrize(
    "scheme, tags, expected",
    [
        ("iob2", ["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 2), ("LOC", 3, 4)]),
        # A stray I- starts an entity, as in conlleval.
        ("iob2", ["O", "I-PER", "I-PER", "O"], [("PER", 1, 3)]),
        ("iob2", ["I-PER"], [("PER", 0, 1)]),
        # I- of another type ends the entity and starts its own.
        ("iob2", ["B-PER", "I-LOC", "I-LOC"], [("PER", 0, 1), ("LOC", 1, 3)]),
        ("iob2", ["B-PER", "B-PER"], [("PER", 0, 1), ("PER", 1, 2)]),
        ("iob2", ["O", "B-ORG", "I-ORG"], [("ORG", 1, 3)]),
        ("iob2", ["O", "O"], []),
        ("iob2", [], []),
        ("iob2", ["B", "I", "O"], [("", 0, 2)]),  # conlleval allows a tag without a type
        # IOB1: I- is the rule, B- only splits two adjacent entities of one type.
        (
            "iob1",
            ["I-PER", "I-PER", "B-PER", "I-PER", "O", "I-LOC"],
            [("PER", 0, 2), ("PER", 2, 4), ("LOC", 5, 6)],
        ),
        ("iob1", ["I-PER", "I-LOC"], [("PER", 0, 1), ("LOC", 1, 2)]),
        (
            "iobes",
            [
                "B-PER",
                "I-PER",
                "E-PER",
                "S-LOC",
                "O",
                "E-ORG",
                "I-MISC",
                "E-MISC",
                "B-PER",
                "S-PER",
            ],
            [
                ("PER", 0, 3),
                ("LOC", 3, 4),
                ("ORG", 5, 6),  # a stray E- is a one-token entity
                ("MISC", 6, 8),  # a stray I- starts one
                ("PER", 8, 9),  # S- does not continue the open B-
                ("PER", 9, 10),
            ],
        ),
        # E- closes: the I- after it starts a new entity.
        ("iobes", ["B-PER", "E-PER", "I-PER"], [("PER", 0, 2), ("PER", 2, 3)]),
        ("iobes", ["B-PER", "E-LOC"], [("PER", 0, 1), ("LOC", 1, 2)]),
        ("bilou", ["U-PER", "B-LOC", "I-LOC", "L-LOC", "O"], [("PER", 0, 1), ("LOC", 1, 4)]),
    ],
)
def test_entities(scheme, tags, expected):
    assert scores.entities(tags, scheme) == expected


def test_entities_reject_tags_outside_the_scheme():
    with pytest.raises(ValueError, match=r"'E-PER' at position 1 .*scheme 'iob2'"):
        scores.entities(["B-PER", "E-PER"], "iob2")
    with pytest.raises(ValueError, match="'X-PER'"):
        scores.entities(["X-PER"], "iobes")
    with pytest.raises(ValueError, match="tagging scheme 'bio'"):
        scores.entities(["O"], "bio")


def test_entity_scores():
    truth = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    predicted = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "O"]]
    # 3 true, 3 predicted, 2 exact matches (the LOC/ORG type differs).
    result = scores.entity_scores(truth, predicted)
    assert result == pytest.approx({"precision": 2 / 3, "recall": 2 / 3, "f1": 2 / 3})
    # A wrong boundary is a miss, and nothing predicted is precision 0, not NaN.
    result = scores.entity_scores([["B-PER", "I-PER"]], [["B-PER", "O"]])
    assert result == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    assert scores.entity_scores([["O"]], [["O"]]) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    # P = 1/2, R = 1: F1 = 2/3.
    assert scores.entity_f1([["B-X", "O"]], [["B-X", "B-Y"]]) == pytest.approx(2 / 3)
    assert scores.entity_precision([["S-X", "O"]], [["S-X", "S-Y"]], scheme="iobes") == 0.5
    assert scores.entity_recall([["S-X", "O"]], [["S-X", "S-Y"]], scheme="iobes") == 1.0
    with pytest.raises(ValueError, match="sequence 0: 2 true tags but 1 predicted"):
        scores.entity_scores([["O", "O"]], [["O"]])


# ----------------------------------------------------------------------------- the table


def test_every_metric_is_in_the_table_and_callable():
    assert scores.get_metric("accuracy").fn([1, 0], [1, 1]) == 0.5
    assert scores.get_metric("exact_match").fn([["a b"]], ["B"], version="v1.1") == 1.0
    # The SQuAD metrics take the version as their option, and have no default.
    assert scores.get_metric("squad_f1").fn([["the"]], ["the"], version="v1.1") == 0.0
    assert scores.get_metric("squad_f1").fn([["the"]], ["the"], version="v2.0") == 1.0
    with pytest.raises(TypeError, match="version"):
        scores.get_metric("exact_match").fn([["a b"]], ["B"])
    assert scores.get_metric("entity_f1").fn([["S-X"]], [["S-X"]], scheme="iobes") == 1.0
    assert set(scores.METRICS) == {
        "accuracy",
        "f1",
        "matthews_corrcoef",
        "pearson",
        "spearman",
        "exact_match",
        "squad_f1",
        "entity_precision",
        "entity_recall",
        "entity_f1",
    }
    with pytest.raises(ValueError, match="unknown metric 'acc'.*accuracy"):
        scores.get_metric("acc")


def test_is_better():
    metric = scores.get_metric("matthews_corrcoef")
    assert metric.is_better(0.2, None)
    assert metric.is_better(0.2, 0.1)
    assert not metric.is_better(0.1, 0.1)
    assert not metric.is_better(math.nan, 0.1)
    assert metric.is_better(-0.5, math.nan)
    lower = scores.Metric("loss", lambda a, b: 0.0, higher_is_better=False)
    assert lower.is_better(0.1, 0.2) and not lower.is_better(0.3, 0.2)


def test_the_best_null_threshold_is_searched_as_the_official_script_does():
    gold = {"a": ["Paris"], "b": [], "c": ["in 1990"], "d": []}
    spans = {"a": "Paris", "b": "London", "c": "1990", "d": "the city"}
    # Rising null odds: a, c, b, d. Answering a: +1; then c: +1 (exact) or +2/3 (F1);
    # then b and d: -1 each. The best total is after c: threshold c's odds.
    odds = {"a": -3.0, "c": -1.5, "b": 0.5, "d": 2.0}
    threshold, f1 = scores.best_null_threshold(gold, spans, odds, metric="f1")
    assert threshold == -1.5 and f1 == pytest.approx((1 + 1 + 1 + 2 * 0.5 * 1 / 1.5) / 4)
    threshold, exact = scores.best_null_threshold(gold, spans, odds, metric="exact_match")
    assert threshold == -3.0 and exact == pytest.approx(3 / 4)  # c's "1990" is not exact
    answered = scores.null_thresholded(spans, odds, -1.5)
    assert answered == {"a": "Paris", "b": "", "c": "1990", "d": ""}
    assert scores.squad_scores(gold, answered, version="v2.0")["f1"] == pytest.approx(f1)
    # Answering none is best when every span is wrong: below every question's odds.
    wrong = {"a": "Rome", "b": "x", "c": "y", "d": "z"}
    assert scores.best_null_threshold(gold, wrong, odds) == (-4.0, 0.5)
    assert set(scores.null_thresholded(wrong, odds, -4.0).values()) == {""}


def test_the_best_null_threshold_is_at_least_every_other_threshold():
    rng = np.random.default_rng(0)
    words = ["red", "blue", "green", "the cat", "a dog"]
    gold = {f"q{i}": [] if rng.random() < 0.4 else [str(rng.choice(words))] for i in range(60)}
    spans = {qid: str(rng.choice(words)) for qid in gold}
    odds = {qid: float(rng.normal()) for qid in gold}
    for metric, key in (("f1", "f1"), ("exact_match", "exact_match")):
        threshold, best = scores.best_null_threshold(gold, spans, odds, metric=metric)
        at = scores.squad_scores(
            gold, scores.null_thresholded(spans, odds, threshold), version="v2.0"
        )
        assert at[key] == pytest.approx(best)
        for other in [-np.inf, *odds.values(), np.inf]:
            answers = scores.null_thresholded(spans, odds, other)
            assert scores.squad_scores(gold, answers, version="v2.0")[key] <= best + 1e-12


def test_the_best_null_threshold_needs_every_questions_span():
    with pytest.raises(ValueError, match="1 question"):
        scores.best_null_threshold({"a": [], "b": ["x"]}, {"a": ""}, {"a": 0.0, "b": 1.0})
