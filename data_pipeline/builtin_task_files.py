"""The built-in fine-tuning tasks' files: python -m data_pipeline.builtin_tasks's work (its usage
says what each file holds).
"""

import json
import os
import random
import re
from collections.abc import Sequence

from data_pipeline import builtin_corpus, files
from data_pipeline.corpus import is_eval_document

TOPICS = ("builtin:topic:debugger", "builtin:topic:string-methods")
TOPIC_LABELS = ("debugger", "string-methods")
EVAL_FRACTION = 0.25
SENTENCES_PER_CONTEXT = 3
# A blanked word: letters only, long enough to carry meaning.
_ANSWER_WORD = re.compile(r"\b[A-Za-z]{5,}\b")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _split_of(sentences: Sequence[str]) -> str:
    """'eval' for a held-out text (corpus.is_eval_document), else 'train'."""
    return "eval" if is_eval_document(sentences, EVAL_FRACTION) else "train"


def topic_examples(
    documents: Sequence[tuple[str, Sequence[str]]],
) -> dict[str, list[tuple[str, str]]]:
    """{'train', 'eval'} -> [(sentence, label)] for the two TOPICS documents."""
    by_name = dict(documents)
    splits = {"train": [], "eval": []}
    for name, label in zip(TOPICS, TOPIC_LABELS, strict=True):
        for sentence in by_name[name]:
            text = _one_line(sentence)
            if len(text.split()) < 4:
                continue
            splits[_split_of([text])].append((text, label))
    for rows in splits.values():
        rows.sort()  # interleave the labels by text rather than by source order
    return splits


def cloze_questions(
    documents: Sequence[tuple[str, Sequence[str]]], *, seed: int = 0
) -> dict[str, list[dict]]:
    """{'train', 'eval'} -> SQuAD 1.1 articles: one per document with questions."""
    rng = random.Random(seed)
    splits = {"train": [], "eval": []}
    for name, sentences in documents:
        split = _split_of(sentences)
        paragraphs = []
        for start in range(0, len(sentences) - SENTENCES_PER_CONTEXT + 1, SENTENCES_PER_CONTEXT):
            window = [_one_line(s) for s in sentences[start : start + SENTENCES_PER_CONTEXT]]
            qa = _question(window, rng, qid=f"{name}:{start}")
            if qa is not None:
                paragraphs.append({"context": " ".join(window), "qas": [qa]})
        if paragraphs:
            splits[split].append({"title": name, "paragraphs": paragraphs})
    return splits


def _question(window: list[str], rng: random.Random, *, qid: str) -> dict | None:
    """One question about a sentence of `window`, or None when no sentence suits."""
    candidates = [i for i, s in enumerate(window) if 6 <= len(s.split()) <= 30]
    if not candidates:
        return None
    index = rng.choice(candidates)
    sentence = window[index]
    # Not the first word: "what" opening a sentence reads as a different question.
    words = [m for m in _ANSWER_WORD.finditer(sentence) if m.start() > 0]
    if not words:
        return None
    word = rng.choice(words)
    question = sentence[: word.start()] + "what" + sentence[word.end() :]
    question = question.rstrip(".!:;") + "?"
    offset = sum(len(s) + 1 for s in window[:index])
    return {
        "id": qid,
        "question": question,
        "answers": [{"text": word.group(), "answer_start": offset + word.start()}],
    }


def code_sentences(
    documents: Sequence[tuple[str, Sequence[str]]],
) -> dict[str, list[list[tuple[str, str]]]]:
    """{'train', 'eval'} -> sentences as [(word, tag)], for every sentence whose quotes pair up."""
    splits = {"train": [], "eval": []}
    for _, sentences in documents:
        split = _split_of(sentences)
        for sentence in sentences:
            parts = _one_line(sentence).split('"')
            if len(parts) % 2 == 0:  # an unpaired quote: no telling what is code
                continue
            tagged = []
            for n, part in enumerate(parts):
                words = part.split()
                if n % 2:  # inside quotes
                    tagged += [(w, "I-CODE" if i else "B-CODE") for i, w in enumerate(words)]
                else:
                    tagged += [(w, "O") for w in words]
            if tagged:
                splits[split].append(tagged)
    return splits


def retrieval_collection(documents: Sequence[tuple[str, Sequence[str]]], *, seed: int = 0):
    """(corpus {id: passage}, queries {id: text}, qrels {split: [(query id, passage id)]}):
    each window of SENTENCES_PER_CONTEXT sentences is a passage; one of its sentences (6 to
    30 words) is taken out of it to be its query. Train queries come from the training
    documents; dev and test (alternately) from the held-out ones."""
    rng = random.Random(seed)
    corpus, queries = {}, {}
    qrels = {"train": [], "dev": [], "test": []}
    held_out = 0
    for name, sentences in documents:
        held_out_document = _split_of(sentences) == "eval"
        for start in range(0, len(sentences) - SENTENCES_PER_CONTEXT + 1, SENTENCES_PER_CONTEXT):
            window = [_one_line(s) for s in sentences[start : start + SENTENCES_PER_CONTEXT]]
            key = f"{name.removeprefix('builtin:')}:{start}"
            candidates = [i for i, s in enumerate(window) if 6 <= len(s.split()) <= 30]
            if not candidates:
                corpus[key] = " ".join(window)
                continue
            index = rng.choice(candidates)
            corpus[key] = " ".join(window[:index] + window[index + 1 :])
            queries[key] = window[index]
            split = ("dev", "test")[held_out % 2] if held_out_document else "train"
            held_out += held_out_document
            qrels[split].append((key, key))
    return corpus, queries, qrels


def _write_beir(out_dir: str, corpus: dict, queries: dict, qrels: dict) -> dict[str, int]:
    """The collection in BEIR's layout under `out_dir`; the number of entries per file."""
    counts = {}
    for name, texts in (("corpus.jsonl", corpus), ("queries.jsonl", queries)):
        lines = (json.dumps({"_id": key, "text": text}) + "\n" for key, text in texts.items())
        files.atomic_write(os.path.join(out_dir, name), "".join(lines))
        counts[name] = len(texts)
    for split, pairs in qrels.items():
        name = os.path.join("qrels", f"{split}.tsv")
        rows = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t1" for q, d in pairs]
        files.atomic_write(os.path.join(out_dir, name), "\n".join(rows) + "\n")
        counts[name] = len(pairs)
    return counts


def write_tasks(out_dir: str) -> dict[str, int]:
    """Writes the three tasks into `out_dir`; returns the number of examples per file."""
    documents = builtin_corpus.documents()
    counts = {}
    for split, rows in topic_examples(documents).items():
        path = os.path.join(out_dir, f"topics_{split}.tsv")
        # GLUE-style TSV: no quoting; _one_line leaves no tab or newline in a text.
        files.atomic_write(
            path, "".join(f"{text}\t{label}\n" for text, label in [("text", "label"), *rows])
        )
        counts[os.path.basename(path)] = len(rows)
    for split, articles in cloze_questions(documents).items():
        path = os.path.join(out_dir, f"cloze_{split}.json")
        files.atomic_write(path, json.dumps({"version": "1.1", "data": articles}, indent=1))
        counts[os.path.basename(path)] = sum(len(a["paragraphs"]) for a in articles)
    for split, sentences in code_sentences(documents).items():
        path = os.path.join(out_dir, f"code_{split}.txt")
        lines = ("".join(f"{word} {tag}\n" for word, tag in tagged) for tagged in sentences)
        files.atomic_write(path, "\n".join(lines))
        counts[os.path.basename(path)] = len(sentences)
    retrieval = _write_beir(os.path.join(out_dir, "retrieval"), *retrieval_collection(documents))
    counts.update({os.path.join("retrieval", name): n for name, n in retrieval.items()})
    return counts


def main(args):
    out_dir = args.out_dir
    for name, count in write_tasks(out_dir).items():
        print(f"{os.path.join(out_dir, name)}: {count} examples")
