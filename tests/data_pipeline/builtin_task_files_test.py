"""The built-in fine-tuning tasks' rules (data_pipeline/builtin_task_files.py)."""

from data_pipeline import builtin_task_files


def test_quoted_code_becomes_the_tagged_entity():
    documents = [
        (
            "doc",
            [
                'Call "len()" or "object.__setattr__(self, name)", then "x.name".',
                'An unpaired " quote says nothing.',
            ],
        )
    ]
    splits = builtin_task_files.code_sentences(documents)
    assert sorted(len(sentences) for sentences in splits.values()) == [0, 1]
    [sentence] = splits["train"] or splits["eval"]
    assert sentence == [
        ("Call", "O"),
        ("len()", "B-CODE"),
        ("or", "O"),
        ("object.__setattr__(self,", "B-CODE"),
        ("name)", "I-CODE"),
        (",", "O"),
        ("then", "O"),
        ("x.name", "B-CODE"),
        (".", "O"),
    ]
