"""SQuAD as a task: answer spans from start and end logits on the sequence output
(paper section 4.2).

The input is data_pipeline/finetune/squad_input.py (official JSON files or TFDS), which reads,
checks and windows the questions. This module turns the model's logits back
into answers: `predict_answers` picks each question's n-best spans over all of
its windows and maps them to the context's own text (`final_text`), and
`write_predictions` writes predictions.json, nbest_predictions.json and, for
SQuAD 2.0, null_odds.json, as run_squad.py does.
"""

import dataclasses
import functools
import json
import math
import os
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from bertjax import losses
from bertjax.model import BertForQuestionAnswering
from bertjax.tasks import finetune, scores, squad_serving
from bertjax.tasks.contract import HFClass, Setup, Task, dataset_batch_shapes
from data_pipeline import files
from data_pipeline.finetune import squad_config, squad_input
from data_pipeline.finetune.records import TEXTS_PER_TOKENIZER_CALL
from data_pipeline.finetune.squad_input import SquadDocument, SquadError, SquadFeatures
from data_pipeline.progress import Progress
from data_pipeline.tokenizer import bpe_text
from data_pipeline.vocab import SENTENCEPIECE_WORD_START, WORDPIECE_PREFIX

# ----------------------------------------------------------------------------- answers from logits


@dataclasses.dataclass(frozen=True)
class SquadPredictions:
    answers: dict[str, str]  # question id -> answer text ("" for no answer): predictions.json
    nbest: dict[str, list[dict]]  # text, probability, start_logit, end_logit, best first
    # SQuAD 2.0: question id -> null score minus the best span's score; above
    # null_score_diff_threshold, the answer is "". None for SQuAD 1.1.
    null_odds: dict[str, float] | None
    # SQuAD 2.0: question id -> its best non-null span ("" if it has none), the answer
    # at any threshold its null odds do not exceed. None for SQuAD 1.1.
    spans: dict[str, str] | None = None


@dataclasses.dataclass(frozen=True)
class _Candidate:
    feature: int
    start: int  # positions in the row; 0 and 0 for the null answer
    end: int
    start_logit: float
    end_logit: float


def predict_answers(
    features: SquadFeatures,
    feature_index,
    start_logits,
    end_logits,
    tokenizer,
) -> SquadPredictions:
    """Each question's answer from the logits of its windows.

    Rows of `start_logits`/`end_logits` (float [N, L]) belong to the features
    named by `feature_index` (int [N], as in the batches; rows with -1 are
    padding), and together they must cover every feature once.
    """
    config = features.config
    start_logits, end_logits = _scatter(features, feature_index, start_logits, end_logits)
    # Padding is never a candidate: the loss leaves its logits untrained (losses.span_sums),
    # and a packed row has none of the unpacked row's, so it must not take an n-best place.
    padding = features.input_mask == 0
    start_logits[padding] = end_logits[padding] = -np.inf
    spans = _SpanText(
        features=features,
        basic=_basic_words(features.documents, tokenizer),
        vocab_tokens=tokenizer.vocab.tokens,
        detokenize=_DETOKENIZERS[tokenizer.vocab.kind],
    )
    positions = np.arange(config.max_seq_length)
    in_document = (positions >= features.doc_offset[:, None]) & (
        positions < (features.doc_offset + features.doc_length)[:, None]
    )
    bounds = np.searchsorted(features.example_index, np.arange(features.num_examples + 1))

    answers, nbest_all, null_odds, best_spans = {}, {}, {}, {}
    for index, example in enumerate(features.data.examples):
        windows = range(bounds[index], bounds[index + 1])
        candidates, null = _question_candidates(
            windows, start_logits, end_logits, in_document, features
        )
        nbest = _nbest(candidates, null, features.documents[index], spans, config)
        nbest_all[example.qid] = _nbest_entries(nbest)
        if not config.version_2_with_negative:
            answers[example.qid] = nbest[0][0]
            continue
        answers[example.qid], null_odds[example.qid] = _answer_or_null(nbest, null, config)
        best_spans[example.qid] = next((entry[0] for entry in nbest if entry[0]), "")
    version_2 = config.version_2_with_negative
    return SquadPredictions(
        answers=answers,
        nbest=nbest_all,
        null_odds=null_odds if version_2 else None,
        spans=best_spans if version_2 else None,
    )


@dataclasses.dataclass(frozen=True)
class _SpanText:
    """What turns a candidate span back into its context's text."""

    features: SquadFeatures
    basic: dict[int, list[str]]  # _basic_words
    vocab_tokens: Sequence[str]
    detokenize: Callable[[Sequence[str]], str]

    def text(self, candidate: _Candidate, document: SquadDocument) -> str:
        """The text of the (non-null) `candidate` in `document`, the context of its feature."""
        features, f = self.features, candidate.feature
        ids = features.input_ids[f, candidate.start : candidate.end + 1]
        first, last = (
            document.token_to_word[features.doc_start[f] + position - features.doc_offset[f]]
            for position in (candidate.start, candidate.end)
        )
        return final_text(
            self.detokenize([self.vocab_tokens[i] for i in ids]),
            " ".join(document.words[first : last + 1]),
            " ".join(w for w in self.basic[id(document)][first : last + 1] if w),
        )


def _question_candidates(
    windows: range, start_logits, end_logits, in_document, features: SquadFeatures
) -> tuple[list[_Candidate], _Candidate]:
    """A question's candidate spans over its `windows` (feature indices), best first,
    and its null answer, from the window of the lowest null score; for SQuAD 2.0 the
    null answer is among the candidates."""
    config = features.config
    candidates, null = [], None
    for f in windows:
        candidates += _span_candidates(
            f, start_logits[f], end_logits[f], in_document[f], features, config
        )
        null_score = start_logits[f, 0] + end_logits[f, 0]
        if null is None or null_score < null.start_logit + null.end_logit:
            null = _Candidate(f, 0, 0, float(start_logits[f, 0]), float(end_logits[f, 0]))
    if config.version_2_with_negative:
        candidates.append(null)
    candidates.sort(key=lambda c: c.start_logit + c.end_logit, reverse=True)
    return candidates, null


def _nbest(
    candidates: list[_Candidate],
    null: _Candidate,
    document: SquadDocument,
    spans: _SpanText,
    config: squad_config.SquadConfig,
) -> list[tuple[str, float, float]]:
    """The n best distinct texts of the sorted `candidates` as (text, start_logit,
    end_logit); SQuAD 2.0 adds the null answer when it is not among them. Never empty."""
    nbest, seen = [], set()
    for candidate in candidates:
        if len(nbest) >= config.n_best_size:
            break
        text = ""
        if candidate.start > 0:
            text = spans.text(candidate, document)
            if text in seen:
                continue
        seen.add(text)
        nbest.append((text, candidate.start_logit, candidate.end_logit))
    if config.version_2_with_negative and "" not in seen:
        nbest.append(("", null.start_logit, null.end_logit))
    if not nbest:  # no span fits anywhere (every window too short for one)
        nbest.append(("", 0.0, 0.0))
    return nbest


def _nbest_entries(nbest: list[tuple[str, float, float]]) -> list[dict]:
    """The n best as nbest_predictions.json lists them, each with its probability."""
    totals = np.array([s + e for _, s, e in nbest])
    probabilities = np.exp(totals - totals.max())
    probabilities /= probabilities.sum()
    return [
        {"text": t, "probability": float(p), "start_logit": s, "end_logit": e}
        for (t, s, e), p in zip(nbest, probabilities, strict=True)
    ]


def _answer_or_null(
    nbest: list[tuple[str, float, float]], null: _Candidate, config: squad_config.SquadConfig
) -> tuple[str, float]:
    """SQuAD 2.0: the answer ("" when the null answer beats the best span by more than
    null_score_diff_threshold) and the null odds."""
    best = next((entry for entry in nbest if entry[0]), None)
    if best is None:
        return "", math.inf
    diff = null.start_logit + null.end_logit - best[1] - best[2]
    return ("" if diff > config.null_score_diff_threshold else best[0]), diff


def _scatter(features: SquadFeatures, feature_index, start_logits, end_logits):
    feature_index = np.asarray(feature_index).reshape(-1)
    start_logits = np.asarray(start_logits, np.float64)
    end_logits = np.asarray(end_logits, np.float64)
    shape = (feature_index.size, features.config.max_seq_length)
    if start_logits.shape != shape or end_logits.shape != shape:
        raise ValueError(
            f"start_logits {start_logits.shape} and end_logits {end_logits.shape}: expected "
            f"{shape}, one row of max_seq_length logits per feature_index"
        )
    real = feature_index >= 0
    index = feature_index[real]
    if index.size and index.max() >= features.num_features:
        raise ValueError(
            f"feature_index {index.max()} is out of range: {features.num_features} features"
        )
    counts = np.bincount(index, minlength=features.num_features)
    if (counts != 1).any():
        f = int(np.flatnonzero(counts != 1)[0])
        qid = features.data.examples[features.example_index[f]].qid
        raise SquadError(
            f"{features.data.source}: feature {f} (question {qid!r}) has {counts[f]} rows of "
            f"logits; every feature needs exactly one ({np.sum(counts == 0)} have none, "
            f"{np.sum(counts > 1)} have several)"
        )
    start = np.empty((features.num_features, shape[1]))
    end = np.empty((features.num_features, shape[1]))
    start[index] = start_logits[real]
    end[index] = end_logits[real]
    return start, end


def _span_candidates(f, start_logits, end_logits, in_document, features, config):
    """Spans from the n best starts and ends: inside the window, start <= end, not too
    long, and starting where this window gives the start its maximum context."""
    n = config.n_best_size
    starts = np.argsort(-start_logits, kind="stable")[:n]
    ends = np.argsort(-end_logits, kind="stable")[:n]
    s, e = starts[:, None], ends[None, :]
    ok = (
        in_document[s]
        & in_document[e]
        & features.max_context[f, s]
        & (e >= s)
        & (e - s + 1 <= config.max_answer_length)
    )
    return [
        _Candidate(
            f,
            int(starts[i]),
            int(ends[j]),
            float(start_logits[starts[i]]),
            float(end_logits[ends[j]]),
        )
        for i, j in zip(*np.nonzero(ok), strict=True)
    ]


def _basic_words(documents: Sequence[SquadDocument], tokenizer) -> dict[int, list[str]]:
    """id(document) -> for each word, the tokenizer's words of it joined by spaces."""
    unique = list({id(d): d for d in documents}.values())
    all_words = [w for d in unique for w in d.words]
    found = {}
    for begin in range(0, len(all_words), TEXTS_PER_TOKENIZER_CALL):
        chunk = tokenizer.words(tf.constant(all_words[begin : begin + TEXTS_PER_TOKENIZER_CALL]))
        for n, pieces in enumerate(chunk.to_list()):
            found[begin + n] = " ".join(p.decode("utf-8", "replace") for p in pieces)
    result, first = {}, 0
    for document in unique:
        result[id(document)] = [found[i] for i in range(first, first + len(document.words))]
        first += len(document.words)
    return result


def _wordpiece_text(tokens: Sequence[str]) -> str:
    text = " ".join(tokens).replace(" " + WORDPIECE_PREFIX, "").replace(WORDPIECE_PREFIX, "")
    return " ".join(text.split())


def _sentencepiece_text(tokens: Sequence[str]) -> str:
    return " ".join("".join(tokens).replace(SENTENCEPIECE_WORD_START, " ").split())


def _bpe_text(tokens: Sequence[str]) -> str:
    # Whitespace as the words the tokenizer reads.
    return " ".join(bpe_text(tokens).split())


_DETOKENIZERS = {
    "wordpiece": _wordpiece_text,
    "sentencepiece": _sentencepiece_text,
    "bpe": _bpe_text,
}


def final_text(predicted: str, original: str, tokenized: str) -> str:
    """The part of `original` that the predicted (normalized) text covers.

    `predicted` is the answer rebuilt from word pieces, lowercased and without
    accents if the tokenizer made it so; `original` is the context's words it
    spans, joined by single spaces; `tokenized` is the tokenizer's words of
    `original`, joined by spaces. The prediction is found in `tokenized`, and
    its ends are carried to `original` through the characters that are not
    spaces, which must be as many on both sides. When they are not (the
    tokenizer changed the length of a character) or the prediction is not
    found, the whole of `original` is the answer.
    """
    start = tokenized.find(predicted)
    if not predicted or start < 0:
        return original
    end = start + len(predicted) - 1
    original_chars = [i for i, c in enumerate(original) if c != " "]
    tokenized_chars = [i for i, c in enumerate(tokenized) if c != " "]
    if len(original_chars) != len(tokenized_chars):
        return original
    # The prediction starts and ends on non-space characters, so both ends map.
    rank = {position: n for n, position in enumerate(tokenized_chars)}
    return original[original_chars[rank[start]] : original_chars[rank[end]] + 1]


def write_predictions(predictions: SquadPredictions, output_dir: str) -> list[str]:
    """Writes predictions.json, nbest_predictions.json and (SQuAD 2.0) null_odds.json."""
    contents = {
        "predictions.json": predictions.answers,
        "nbest_predictions.json": predictions.nbest,
    }
    if predictions.null_odds is not None:
        contents["null_odds.json"] = predictions.null_odds
    paths = []
    for name, content in contents.items():
        path = os.path.join(output_dir, name)
        files.atomic_write(path, json.dumps(content, indent=2, ensure_ascii=False) + "\n")
        paths.append(path)
    return paths


# ------------------------------------------------------------------------------------ the task

METRIC_NAMES = ("f1", "exact_match")


def tuned_scores(gold, predictions: SquadPredictions) -> dict[str, float]:
    """SQuAD 2.0: F1 and exact match at the null-score threshold best for each on these
    questions, and those thresholds (evaluate-v2.0.py's best_f1, best_f1_thresh, ...):
    what config.data.null_score_diff_threshold=THRESHOLD then scores on them."""
    values = {}
    for metric in METRIC_NAMES:
        threshold, value = scores.best_null_threshold(
            gold, predictions.spans, predictions.null_odds, metric=metric
        )
        values[f"tuned_{metric}"] = value
        values[f"tuned_{metric}_threshold"] = threshold
    return values


def setup(config, workdir: str) -> Setup:
    pretrained = finetune.load_pretrained(config, workdir)
    data = squad_input.load_squad_task(config.data.to_dict(), pretrained.tokenizer)
    version = "v2.0" if data.config.version_2_with_negative else "v1.1"
    packed_shape = finetune.PackedShapes(
        functools.partial(squad_input.packed_shape, data), config.optimizer.num_microbatches
    )

    def make_dataset(split, position=None, **kwargs):
        packed = packed_shape.for_dataset(split, kwargs) if data.config.pack_examples else None
        return squad_input.make_task_dataset(
            data, split=split, position=position, packed=packed, **kwargs
        )

    def score(outputs, passed):
        start_logits, end_logits = outputs
        predictions = predict_answers(
            data.eval, passed["feature_index"], start_logits, end_logits, pretrained.tokenizer
        )
        gold = data.eval.data.gold_answers()
        values = scores.squad_scores(gold, predictions.answers, version=version)
        if version == "v2.0":
            values.update(tuned_scores(gold, predictions))
        return values, predictions

    head = finetune.Head(
        model=BertForQuestionAnswering(pretrained.model_config),
        num_labels=2,  # a start and an end logit per token
        label_names=(),
        metric_names=METRIC_NAMES,
        label_features=("start_positions", "end_positions"),
        sums=losses.span_sums,
        weight=finetune.example_weight,
        score=score,
        write_predictions=write_predictions,
    )
    return finetune.make_setup(config, pretrained, head, make_dataset)


def answers_for(
    restored, data: squad_input.SquadData, batch_size: int = 32, progress: Progress | None = None
) -> SquadPredictions:
    """The predictions of a restored SQuAD workdir for every question of `data`; `progress`
    counts the batches (its total set here, once the features are made)."""
    restored.require("squad", "answers_for")
    config = squad_config.from_config(restored.task.data)
    features = squad_input.make_features(data, restored.tokenizer, config)
    starts, ends = [], []
    if progress is not None:
        progress.total = -(-features.num_features // batch_size)
    for begin in range(0, features.num_features, batch_size):
        rows = slice(begin, begin + batch_size)
        start, end = restored.apply(
            {name: getattr(features, name)[rows] for name in finetune.MODEL_INPUTS}
        )
        starts.append(np.asarray(start))
        ends.append(np.asarray(end))
        if progress is not None:
            progress.advance()
    return predict_answers(
        features,
        np.arange(features.num_features, dtype=np.int32),
        np.concatenate(starts),
        np.concatenate(ends),
        restored.tokenizer,
    )


def answer(restored, question: str, context: str) -> dict:
    """The answer span in `context`: {'text', 'probability', 'nbest'}; text '' for no answer."""
    restored.require("squad", "answer")
    examples = squad_input.SquadData(
        "answer()",
        (squad_input.SquadExample("q", question, context, answers=(), is_impossible=False),),
    )
    predictions = answers_for(restored, examples)
    best = predictions.nbest["q"]
    return {
        "text": predictions.answers["q"],
        "probability": best[0]["probability"] if best else 0.0,
        "nbest": best,
    }


def predict_file(restored, input_path: str, output: str, batch_size: int) -> str:
    """A SQuAD JSON file (answers not needed) -> a directory with predictions.json,
    nbest_predictions.json (and null_odds.json for 2.0)."""
    output = output or input_path + ".predictions"
    data = squad_input.read_squad_json(input_path, labelled=False)
    predicting = Progress(f"predicting {input_path}", unit="batches")
    predictions = answers_for(restored, data, batch_size, predicting)
    predicting.finish()
    write_predictions(predictions, output)
    return output


TASK = Task(
    name="squad",
    setup=setup,
    make_model=lambda model_config, description: BertForQuestionAnswering(model_config),
    best_metric=lambda config: scores.get_metric(METRIC_NAMES[0]),
    forward_flops=finetune.forward_flops_per_token,
    batch_shapes=dataset_batch_shapes,
    check_config=finetune.config_checker(squad_config.from_config),
    without_data=finetune.without_checkpoint,
    predict_file=predict_file,
    report=finetune.report,
    serving=squad_serving.serving,
    hf_class=finetune.hf_classes(
        {
            # transformers' span class has no pooler (add_pooling_layer=False)
            "bert": HFClass("BertForQuestionAnswering", {"qa_outputs": "qa_outputs"}, False),
            "modernbert": HFClass("ModernBertForQuestionAnswering", {"qa_outputs": "classifier"}),
        }
    ),
)
