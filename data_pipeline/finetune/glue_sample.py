"""A small GLUE folder in the layout of the benchmark's download, for trying
`bertjax.suites glue` without the download (`python -m bertjax.suites glue sample DIR`) and for the
tests: every task's folder and files, each with its own columns (headers or none,
CoLA's four headerless columns, MNLI's parse columns, test files with an index and
no label), a few rows each.

The rows are eight short sentences about Python in rotation with made-up labels:
the files are real in form only, and scores on them mean nothing. For results, use
GLUE itself (gluebenchmark.com) or TFDS glue/*."""

import os

SENTENCES = (
    "The list is sorted in place.",
    "A tuple cannot be changed after it is made.",
    'The "with" statement closes the file.',
    "Generators produce their values lazily.",
    "A dictionary maps keys to values.",
    "Sets hold each element once.",
    "The loop ends when the iterator is exhausted.",
    "An exception unwinds the stack.",
)

_NLI = ("entailment", "neutral", "contradiction")


def write(root: str, rows: int = 8) -> str:
    """Writes the GLUE folders under `root`; returns `root`."""
    tasks = {
        "CoLA": _cola,
        "SST-2": _sst2,
        "MRPC": _mrpc,
        "STS-B": _stsb,
        "QQP": _qqp,
        "MNLI": _mnli,
        "QNLI": _pairs,
        "RTE": _pairs,
        "WNLI": _pairs,
        "diagnostic": _diagnostic,
    }
    for folder, write in tasks.items():
        os.makedirs(os.path.join(root, folder), exist_ok=True)
        write(os.path.join(root, folder), folder, rows)
    return root


def _text(i: int, shift: int = 0) -> str:
    return SENTENCES[(i + shift) % len(SENTENCES)]


def _tsv(path: str, header, rows) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        if header is not None:
            f.write("\t".join(header) + "\n")
        for row in rows:
            f.write("\t".join(row) + "\n")


def _cola(folder, _, rows):
    for split in ("train", "dev"):
        _tsv(
            f"{folder}/{split}.tsv",
            None,
            [["gj04", str(i % 2), "" if i % 2 else "*", _text(i)] for i in range(rows)],
        )
    _tsv(f"{folder}/test.tsv", ["index", "sentence"], [[str(i), _text(i)] for i in range(rows)])


def _sst2(folder, _, rows):
    for split in ("train", "dev"):
        _tsv(f"{folder}/{split}.tsv", ["sentence", "label"],
             [[_text(i), str(i % 2)] for i in range(rows)])  # fmt: skip
    _tsv(f"{folder}/test.tsv", ["index", "sentence"], [[str(i), _text(i)] for i in range(rows)])


def _mrpc(folder, _, rows):
    header = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
    for split in ("train", "dev"):
        _tsv(f"{folder}/{split}.tsv", header,
             [[str(i % 2), str(100 + i), str(200 + i), _text(i), _text(i, 1)]
              for i in range(rows)])  # fmt: skip
    _tsv(f"{folder}/test.tsv", ["index", *header[1:]],
         [[str(i), str(100 + i), str(200 + i), _text(i), _text(i, 1)]
          for i in range(rows)])  # fmt: skip


def _stsb(folder, _, rows):
    header = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
              "sentence1", "sentence2"]  # fmt: skip
    meta = ["main-captions", "MSRvid", "2012test", "0001", "none", "none"]
    for split in ("train", "dev"):
        _tsv(f"{folder}/{split}.tsv", [*header, "score"],
             [[str(i), *meta, _text(i), _text(i, 2), f"{i % 6}.{i % 10}00"]
              for i in range(rows)])  # fmt: skip
    _tsv(f"{folder}/test.tsv", header,
         [[str(i), *meta, _text(i), _text(i, 2)] for i in range(rows)])  # fmt: skip


def _qqp(folder, _, rows):
    header = ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]
    for split in ("train", "dev"):
        _tsv(f"{folder}/{split}.tsv", header,
             [[str(i), str(2 * i), str(2 * i + 1), _text(i), _text(i, 3), str(i % 2)]
              for i in range(rows)])  # fmt: skip
    _tsv(f"{folder}/test.tsv", ["id", "question1", "question2"],
         [[str(i), _text(i), _text(i, 3)] for i in range(rows)])  # fmt: skip


def _mnli(folder, _, rows):
    base = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
            "sentence2_binary_parse", "sentence1_parse", "sentence2_parse",
            "sentence1", "sentence2"]  # fmt: skip

    def fields(i):
        a, b = _text(i), _text(i, 4)
        return [str(i), str(i), f"{i}e", "fiction", f"( {a} )", f"( {b} )",
                f"(ROOT {a})", f"(ROOT {b})", a, b]  # fmt: skip

    _tsv(f"{folder}/train.tsv", [*base, "label1", "gold_label"],
         [[*fields(i), _NLI[i % 3], _NLI[i % 3]] for i in range(rows)])  # fmt: skip
    for split in ("dev_matched", "dev_mismatched"):
        _tsv(f"{folder}/{split}.tsv",
             [*base, "label1", "label2", "label3", "label4", "label5", "gold_label"],
             [[*fields(i), *[_NLI[i % 3]] * 5, _NLI[i % 3]] for i in range(rows)])  # fmt: skip
    for split in ("test_matched", "test_mismatched"):
        _tsv(f"{folder}/{split}.tsv", base, [fields(i) for i in range(rows)])


def _pairs(folder, name, rows):
    """QNLI, RTE and WNLI: an index, two texts and a label."""
    labels = ("0", "1") if name == "WNLI" else ("entailment", "not_entailment")
    texts, shift = (
        (["question", "sentence"], 5) if name == "QNLI" else (["sentence1", "sentence2"], 6)
    )
    for split in ("train", "dev"):
        _tsv(f"{folder}/{split}.tsv", ["index", *texts, "label"],
             [[str(i), _text(i), _text(i, shift), labels[i % 2]] for i in range(rows)])  # fmt: skip
    _tsv(f"{folder}/test.tsv", ["index", *texts],
         [[str(i), _text(i), _text(i, shift)] for i in range(rows)])  # fmt: skip


def _diagnostic(folder, _, rows):
    _tsv(f"{folder}/diagnostic.tsv", ["index", "sentence1", "sentence2"],
         [[str(i), _text(i), _text(i, 7)] for i in range(rows)])  # fmt: skip
