"""A small BEIR-layout collection for tests: corpus.jsonl, queries.jsonl, qrels/*.tsv.

Passage i is about one made-up word, and query i asks about it, so that a trained
embedder can find it; queries 0-29 are judged in train, 30-39 in dev and test.
"""

import json
import pathlib

WORDS = [f"{a}{b}" for a in ("zor", "mip", "tal", "quen") for b in ("ax", "el", "ov", "un", "ir")]


def write_beir(directory, count: int = 40) -> pathlib.Path:
    directory = pathlib.Path(directory)
    (directory / "qrels").mkdir(parents=True, exist_ok=True)
    with open(directory / "corpus.jsonl", "w", encoding="utf-8") as f:
        for i in range(count):
            word = WORDS[i % len(WORDS)]
            text = f"the {word} number {i} is kept in the {'north' if i % 2 else 'south'} hall"
            f.write(json.dumps({"_id": f"d{i}", "title": f"Item {i}", "text": text}) + "\n")
    with open(directory / "queries.jsonl", "w", encoding="utf-8") as f:
        for i in range(count):
            f.write(json.dumps({"_id": f"q{i}", "text": f"where is {WORDS[i % len(WORDS)]} {i}"}))
            f.write("\n")
    splits = {"train": range(0, 30), "dev": range(30, count), "test": range(30, count)}
    for split, queries in splits.items():
        lines = ["query-id\tcorpus-id\tscore"] + [f"q{i}\td{i}\t1" for i in queries]
        (directory / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return directory
