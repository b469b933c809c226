"""Task metrics against values worked out by hand, then against scipy/sklearn on random data."""

import math

import numpy as np
import pytest

from bertjax import scores

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


def test_against_scipy_and_sklearn():
    stats = pytest.importorskip("scipy.stats")
    metrics = pytest.importorskip("sklearn.metrics")
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
    ],
)
def test_normalize_answer(text, normalized):
    assert scores.normalize_answer(text) == normalized


def test_answer_f1_is_over_token_bags():
    # "cat sat on mat" against "cat on mat": precision 3/4, recall 1, F1 6/7.
    assert scores.answer_f1(["a cat on a mat"], "the cat sat on the mat") == pytest.approx(6 / 7)
    # Bags, not sets: one x and one y in common out of three tokens each.
    assert scores.answer_f1(["x y y"], "x x y") == pytest.approx(2 / 3)
    assert scores.answer_f1(["Warsaw"], "Paris") == 0.0


def test_max_over_gold_answers():
    # "Curie" against "Pierre Curie": precision 1, recall 1/2, F1 2/3; against "Pierre": 0.
    assert scores.answer_f1(["Pierre Curie", "Pierre"], "Curie") == pytest.approx(2 / 3)
    assert scores.answer_exact_match(["Pierre Curie", "Pierre"], "pierre") == 1.0
    assert scores.answer_exact_match(["Pierre Curie"], "Curie") == 0.0


def test_no_answer_questions():
    assert scores.answer_exact_match([], "") == 1.0
    assert scores.answer_f1([], "") == 1.0
    assert scores.answer_exact_match([], "oxygen") == 0.0
    assert scores.answer_f1([], "oxygen") == 0.0
    assert scores.answer_f1(["oxygen"], "") == 0.0
    # A gold answer that normalizes to nothing does not count as one.
    assert scores.answer_exact_match(["the"], "") == 1.0
    assert scores.answer_exact_match(["the", "Ming"], "") == 0.0


def test_squad_scores():
    gold = {"q1": ["Warsaw"], "q2": [], "q3": ["Pierre Curie"], "q4": ["1911"]}
    predictions = {"q1": "warsaw.", "q2": "", "q3": "Curie"}  # q4 unanswered: scores 0
    result = scores.squad_scores(gold, predictions)
    assert result["exact_match"] == pytest.approx(2 / 4)
    assert result["f1"] == pytest.approx((1 + 1 + 2 / 3 + 0) / 4)
    assert result["has_answer_exact_match"] == pytest.approx(1 / 3)
    assert result["has_answer_f1"] == pytest.approx((1 + 2 / 3) / 3)
    assert result["no_answer_exact_match"] == 1.0
    assert result["no_answer_f1"] == 1.0
    # SQuAD 1.1: no split scores.
    assert set(scores.squad_scores({"q1": ["Warsaw"]}, {"q1": "Paris"})) == {"exact_match", "f1"}


def test_squad_list_form_matches_dict_form():
    gold = [["Warsaw"], [], ["Pierre Curie"]]
    predictions = ["warsaw.", "", "Curie"]
    assert scores.exact_match(gold, predictions) == pytest.approx(2 / 3)
    assert scores.squad_f1(gold, predictions) == pytest.approx(8 / 9)
    with pytest.raises(ValueError, match="3 gold answer lists but 2 predictions"):
        scores.exact_match(gold, predictions[:2])


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
    assert scores.get_metric("exact_match").fn([["a b"]], ["B"]) == 1.0
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
