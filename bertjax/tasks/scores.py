"""Task metrics as the official scripts define them, in NumPy (no jax).

Every metric takes the truth first and the predictions second, and returns a
fraction in [0, 1] (a correlation in [-1, 1]); the official SQuAD scripts print
their exact match and F1 multiplied by 100.

  accuracy, f1, matthews_corrcoef   class ids (f1: binary, positive class 1)
  pearson, spearman                 real values; spearman ranks ties by their average
  exact_match, squad_f1             gold answer lists and predicted strings (SQuAD),
                                    by the rules of the official script of `version`
  entity_precision/recall/f1        tag sequences, entities as conlleval counts them

`METRICS` maps the name a task config uses to the function and to which way is
better, so a trainer can keep the best checkpoint without knowing the metric.
"""

import collections
import dataclasses
import math
import re
import string
from collections.abc import Callable, Mapping, Sequence

import numpy as np

# ----------------------------------------------------------------------------- classification


def accuracy(labels, predictions) -> float:
    labels, predictions = _paired(labels, predictions)
    return float(np.mean(labels == predictions))


def f1(labels, predictions) -> float:
    """Binary F1 of class 1; 0.0 when there are no true and no predicted positives."""
    labels, predictions = _paired(labels, predictions)
    true_positives = np.sum((labels == 1) & (predictions == 1))
    predicted = np.sum(predictions == 1)
    actual = np.sum(labels == 1)
    if true_positives == 0:
        return 0.0
    return float(2 * true_positives / (predicted + actual))


def matthews_corrcoef(labels, predictions) -> float:
    """Matthews correlation (the multiclass R_K form); 0.0 when undefined (a constant side)."""
    labels, predictions = _paired(labels, predictions)
    classes, encoded = np.unique(np.concatenate([labels, predictions]), return_inverse=True)
    true, pred = encoded[: labels.size], encoded[labels.size :]
    confusion = np.zeros((classes.size, classes.size), dtype=np.float64)
    np.add.at(confusion, (true, pred), 1.0)
    total = confusion.sum()
    correct = np.trace(confusion)
    true_counts = confusion.sum(axis=1)
    pred_counts = confusion.sum(axis=0)
    covariance = correct * total - pred_counts @ true_counts
    variance = (total**2 - pred_counts @ pred_counts) * (total**2 - true_counts @ true_counts)
    if variance == 0:
        return 0.0
    return float(covariance / math.sqrt(variance))


# ----------------------------------------------------------------------------- regression


def pearson(labels, predictions) -> float:
    """Pearson's r; NaN when either side is constant."""
    labels, predictions = _paired(labels, predictions, dtype=np.float64)
    x = labels - labels.mean()
    y = predictions - predictions.mean()
    denominator = math.sqrt(float(x @ x) * float(y @ y))
    if denominator == 0:
        return math.nan
    return float(np.clip(x @ y / denominator, -1.0, 1.0))


def spearman(labels, predictions) -> float:
    """Spearman's rho: Pearson's r of the ranks, tied values sharing their average rank."""
    labels, predictions = _paired(labels, predictions, dtype=np.float64)
    return pearson(_average_ranks(labels), _average_ranks(predictions))


def _average_ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    # Each run of equal values gets the mean of the 1-based ranks it spans.
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    ends = np.r_[starts[1:], values.size]
    run_ranks = (starts + 1 + ends) / 2.0
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = np.repeat(run_ranks, ends - starts)
    return ranks


def _paired(labels, predictions, dtype=None) -> tuple[np.ndarray, np.ndarray]:
    labels = np.asarray(labels, dtype=dtype).reshape(-1)
    predictions = np.asarray(predictions, dtype=dtype).reshape(-1)
    if labels.shape != predictions.shape:
        raise ValueError(f"{labels.size} labels but {predictions.size} predictions")
    if labels.size == 0:
        raise ValueError("no examples to score")
    return labels, predictions


# ----------------------------------------------------------------------------- SQuAD
#
# The two official scripts, evaluate-v1.1.py and evaluate-v2.0.py, share the
# normalization but not the rest, so every SQuAD score names its `version`:
#
#                           "v1.1"                        "v2.0"
#   gold answers kept       all, even "the" or "."        those that normalize to something,
#                                                         or [""] when none does
#   token F1, an empty      0 (no token in common)        1 if both are empty, else 0
#     side
#   gold answers []         an error (1.1 has none)       unanswerable: only "" matches
#   split scores            none                          has_answer_* when some question has
#                                                         raw answers, no_answer_* when some has []
#
# So gold ["the"] against the prediction "the" is EM 1, F1 0 in v1.1 (both
# normalize to "", equal but with no token in common), and EM 1, F1 1 in v2.0
# (the gold falls back to [""]; the question still counts as answerable there,
# since v2.0 decides that on the raw answer list).

SQUAD_VERSIONS = ("v1.1", "v2.0")

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """The official SQuAD normalization (both versions): lowercase, drop ASCII
    punctuation, drop the articles a/an/the, and collapse whitespace, in that order."""
    text = text.lower()
    text = "".join(c for c in text if c not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _check_version(version: str) -> None:
    if version not in SQUAD_VERSIONS:
        raise ValueError(f"version {version!r}: must be one of {', '.join(SQUAD_VERSIONS)}")


def _gold_texts(gold_answers: Sequence[str], version: str) -> list[str]:
    _check_version(version)
    if isinstance(gold_answers, str):
        raise TypeError(f"gold answers must be a list of texts, not the string {gold_answers!r}")
    if version == "v1.1":
        if not gold_answers:
            raise ValueError(
                "no gold answers, but SQuAD v1.1 has no unanswerable "
                "questions (score SQuAD 2.0 data with version='v2.0')"
            )
        return list(gold_answers)
    return [a for a in gold_answers if normalize_answer(a)] or [""]


def _token_f1(prediction: str, gold: str, version: str) -> float:
    predicted = normalize_answer(prediction).split()
    truth = normalize_answer(gold).split()
    if version == "v2.0" and (not predicted or not truth):
        return float(predicted == truth)
    same = sum((collections.Counter(predicted) & collections.Counter(truth)).values())
    if same == 0:  # v1.1: also when both sides are empty
        return 0.0
    precision = same / len(predicted)
    recall = same / len(truth)
    return 2 * precision * recall / (precision + recall)


def answer_exact_match(gold_answers: Sequence[str], prediction: str, *, version: str) -> float:
    """1.0 if the normalized prediction equals any kept, normalized gold answer.

    v2.0: an empty `gold_answers` (or one whose answers all normalize to
    nothing) is matched only by a prediction that normalizes to "".
    v1.1: every gold answer is kept; an empty `gold_answers` is an error.
    """
    return _best_exact_match(_gold_texts(gold_answers, version), prediction)


def answer_f1(gold_answers: Sequence[str], prediction: str, *, version: str) -> float:
    """The best token-bag F1 of the prediction against any kept gold answer."""
    return _best_f1(_gold_texts(gold_answers, version), prediction, version)


def _best_exact_match(kept: list[str], prediction: str) -> float:
    predicted = normalize_answer(prediction)
    return float(any(predicted == normalize_answer(g) for g in kept))


def _best_f1(kept: list[str], prediction: str, version: str) -> float:
    return max(_token_f1(prediction, g, version) for g in kept)


def exact_match(
    gold_answers: Sequence[Sequence[str]], predictions: Sequence[str], *, version: str
) -> float:
    """Mean answer_exact_match over questions (gold answer lists and predicted strings)."""
    return _mean_over_questions(answer_exact_match, gold_answers, predictions, version)


def squad_f1(
    gold_answers: Sequence[Sequence[str]], predictions: Sequence[str], *, version: str
) -> float:
    """Mean answer_f1 over questions (gold answer lists and predicted strings)."""
    return _mean_over_questions(answer_f1, gold_answers, predictions, version)


def _mean_over_questions(score, gold_answers, predictions, version) -> float:
    _check_version(version)
    if isinstance(predictions, str) or len(gold_answers) != len(predictions):
        raise ValueError(
            f"{len(gold_answers)} gold answer lists but "
            f"{1 if isinstance(predictions, str) else len(predictions)} predictions"
        )
    if not gold_answers:
        raise ValueError("no questions to score")
    values = []
    for index, (gold, prediction) in enumerate(zip(gold_answers, predictions, strict=True)):
        try:
            values.append(score(gold, prediction, version=version))
        except (TypeError, ValueError) as error:
            raise type(error)(f"question {index}: {error}") from None
    return float(np.mean(values))


def squad_scores(
    gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str], *, version: str
) -> dict[str, float]:
    """exact_match and f1 over every question of `gold`, by the official script of `version`.

    `gold` maps each question id to its raw gold answer texts ([] when the
    question is unanswerable, which only "v2.0" allows); `predictions` maps
    question ids to predicted texts. A question without a prediction scores 0
    and still counts, in both versions (evaluate-v1.1.py does the same;
    evaluate-v2.0.py leaves it out and then fails on its HasAns/NoAns split);
    predictions for questions not in `gold` are ignored, as both scripts do.
    Scores are fractions in [0, 1], not the scripts' percentages.

    "v2.0" adds the split scores the script prints, each group only when it has
    questions: has_answer_exact_match and has_answer_f1 over the questions whose
    raw answer list is non-empty (even if every answer normalizes to nothing),
    no_answer_exact_match and no_answer_f1 over those with []. "v1.1" has none.
    """
    _check_version(version)
    if not gold:
        raise ValueError("no questions to score")
    exact, token_f1, has_answer = [], [], []
    for qid, answers in gold.items():
        try:
            kept = _gold_texts(answers, version)
        except (TypeError, ValueError) as error:
            raise type(error)(f"question {qid!r}: {error}") from None
        prediction = predictions.get(qid)
        has_answer.append(bool(answers))  # the raw list, as evaluate-v2.0.py decides
        exact.append(0.0 if prediction is None else _best_exact_match(kept, prediction))
        token_f1.append(0.0 if prediction is None else _best_f1(kept, prediction, version))
    exact, token_f1, has_answer = np.array(exact), np.array(token_f1), np.array(has_answer)
    result = {"exact_match": float(exact.mean()), "f1": float(token_f1.mean())}
    if version == "v2.0":
        for prefix, rows in (("has_answer", has_answer), ("no_answer", ~has_answer)):
            if rows.any():
                result[f"{prefix}_exact_match"] = float(exact[rows].mean())
                result[f"{prefix}_f1"] = float(token_f1[rows].mean())
    return result


def null_thresholded(
    spans: Mapping[str, str], null_odds: Mapping[str, float], threshold: float
) -> dict[str, str]:
    """SQuAD 2.0 answers at a null-score threshold: "" where the null odds (null score
    minus best span score) exceed it, else the best non-null span (run_squad.py's
    null_score_diff_threshold)."""
    return {qid: "" if null_odds[qid] > threshold else text for qid, text in spans.items()}


def best_null_threshold(
    gold: Mapping[str, Sequence[str]],
    spans: Mapping[str, str],
    null_odds: Mapping[str, float],
    *,
    metric: str = "f1",
) -> tuple[float, float]:
    """(threshold, score): the null-score threshold that maximizes `metric` ("f1" or
    "exact_match") over the questions of `gold`, searched as evaluate-v2.0.py's
    find_best_thresh searches: every question starts unanswered; in order of rising
    null odds each takes its best non-null span (`spans`), and the threshold is the
    null odds of the question whose switch gives the best total (the first of equal
    totals). If answering none is best, it is 1 below the lowest null odds (the script
    says 0.0, which with its probabilities in [0, 1] means the same). The score is a fraction, as
    squad_scores gives it at that threshold with null_thresholded's answers.

    The script is fed predictions already thresholded at the run's value; given each
    question's best span, this searches above that value as well as below."""
    if metric not in ("f1", "exact_match"):
        raise ValueError(f"metric={metric!r}: f1 or exact_match")
    if not gold:
        raise ValueError("no questions to score")
    missing = [qid for qid in gold if qid not in spans or qid not in null_odds]
    if missing:
        raise ValueError(f"{len(missing)} question(s) without a span or null odds: {missing[:3]}")
    score = _best_f1 if metric == "f1" else lambda kept, text, _: _best_exact_match(kept, text)
    total = float(sum(not answers for answers in gold.values()))  # all unanswered
    best, threshold = total, min(float(null_odds[qid]) for qid in gold) - 1.0
    for qid in sorted(gold, key=lambda q: null_odds[q]):
        kept = _gold_texts(gold[qid], "v2.0")
        text = spans[qid]
        # The switch from "" to the span: what the question scores then, less what it did.
        total += score(kept, text, "v2.0") - score(kept, "", "v2.0")
        if total > best:
            best, threshold = total, float(null_odds[qid])
    return threshold, best / len(gold)


# ----------------------------------------------------------------------------- tagging

# Each scheme's prefixes, mapped onto B (begin), I (inside), E (end), S (single).
SCHEMES = {
    "iob1": {"B": "B", "I": "I"},
    "iob2": {"B": "B", "I": "I"},
    "iobes": {"B": "B", "I": "I", "E": "E", "S": "S"},
    "bilou": {"B": "B", "I": "I", "L": "E", "U": "S"},
}


def entities(tags: Sequence[str], scheme: str = "iob2") -> list[tuple[str, int, int]]:
    """The entities of one tag sequence as (type, start, end), end exclusive.

    Tags are "O" or "<prefix>-<type>". The rules are conlleval's, which read IOB1
    and IOB2 alike: B- (and S-/U-) always starts an entity; I- (and E-/L-)
    continues an open entity of its type, and otherwise starts one, so a stray
    I-PER after O or after I-LOC opens a PER entity. E-/L- and S-/U- close the
    entity they are part of.
    """
    prefixes = _scheme(scheme)
    found = []
    open_type, open_start = None, 0  # the entity that the next tag may continue
    for position, tag in enumerate(tags):
        if tag == "O":
            role, kind = None, None
        else:
            prefix, _, kind = tag.partition("-")
            role = prefixes.get(prefix)
            if role is None:
                raise ValueError(
                    f"tag {tag!r} at position {position} is not 'O' or one of "
                    f"{', '.join(p + '-TYPE' for p in prefixes)} (scheme {scheme!r})"
                )
        continues = open_type is not None and role in ("I", "E") and kind == open_type
        if open_type is not None and not continues:
            found.append((open_type, open_start, position))
            open_type = None
        if role is not None and not continues:
            open_type, open_start = kind, position
        if role in ("E", "S"):
            found.append((open_type, open_start, position + 1))
            open_type = None
    if open_type is not None:
        found.append((open_type, open_start, len(tags)))
    return found


def entity_scores(
    true_tags: Sequence[Sequence[str]],
    predicted_tags: Sequence[Sequence[str]],
    scheme: str = "iob2",
) -> dict[str, float]:
    """Micro precision, recall and F1 of exact entity matches (type, start and end).

    Each is 0.0 when its denominator is 0.
    """
    _scheme(scheme)
    if len(true_tags) != len(predicted_tags):
        raise ValueError(f"{len(true_tags)} true tag sequences but {len(predicted_tags)} predicted")
    if not true_tags:
        raise ValueError("no tag sequences to score")
    correct = num_true = num_predicted = 0
    for index, (truth, predicted) in enumerate(zip(true_tags, predicted_tags, strict=True)):
        if len(truth) != len(predicted):
            raise ValueError(
                f"sequence {index}: {len(truth)} true tags but {len(predicted)} predicted"
            )
        true_entities = set(entities(truth, scheme))
        predicted_entities = set(entities(predicted, scheme))
        correct += len(true_entities & predicted_entities)
        num_true += len(true_entities)
        num_predicted += len(predicted_entities)
    precision = correct / num_predicted if num_predicted else 0.0
    recall = correct / num_true if num_true else 0.0
    both = precision + recall
    return {
        "precision": precision,
        "recall": recall,
        "f1": 2 * precision * recall / both if both else 0.0,
    }


def entity_precision(true_tags, predicted_tags, scheme: str = "iob2") -> float:
    return entity_scores(true_tags, predicted_tags, scheme)["precision"]


def entity_recall(true_tags, predicted_tags, scheme: str = "iob2") -> float:
    return entity_scores(true_tags, predicted_tags, scheme)["recall"]


def entity_f1(true_tags, predicted_tags, scheme: str = "iob2") -> float:
    return entity_scores(true_tags, predicted_tags, scheme)["f1"]


def _scheme(scheme: str) -> dict[str, str]:
    if scheme not in SCHEMES:
        raise ValueError(f"tagging scheme {scheme!r}: must be one of {', '.join(SCHEMES)}")
    return SCHEMES[scheme]


# ----------------------------------------------------------------------------- the table


@dataclasses.dataclass(frozen=True)
class Metric:
    name: str
    # fn(truth, predictions, **options) -> float; the options are the tagging
    # scheme (entity_*, optional) and the SQuAD version (exact_match, squad_f1,
    # required: version="v1.1" or "v2.0"). None for a metric a task computes
    # from its own sums (pretraining's held-out loss).
    fn: Callable[..., float] | None
    higher_is_better: bool = True

    def is_better(self, new: float, old: float | None) -> bool:
        """Whether `new` beats `old`; anything beats None or NaN, NaN beats nothing."""
        if math.isnan(new):
            return False
        if old is None or math.isnan(old):
            return True
        return new > old if self.higher_is_better else new < old


METRICS = {
    metric.name: metric
    for metric in (
        Metric("accuracy", accuracy),
        Metric("f1", f1),
        Metric("matthews_corrcoef", matthews_corrcoef),
        Metric("pearson", pearson),
        Metric("spearman", spearman),
        Metric("exact_match", exact_match),
        Metric("squad_f1", squad_f1),
        Metric("entity_precision", entity_precision),
        Metric("entity_recall", entity_recall),
        Metric("entity_f1", entity_f1),
    )
}


def get_metric(name: str) -> Metric:
    try:
        return METRICS[name]
    except KeyError:
        raise ValueError(f"unknown metric {name!r}: must be one of {', '.join(METRICS)}") from None
