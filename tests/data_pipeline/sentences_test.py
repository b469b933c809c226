"""Tests for data_pipeline/sentences.py."""

import pytest

from data_pipeline.sentences import split_sentences


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("One. Two! Three? Four", ["One.", "Two!", "Three?", "Four"]),
        (
            "Dr. Smith met Mr. Jones vs. the board. They agreed.",
            ["Dr. Smith met Mr. Jones vs. the board.", "They agreed."],
        ),
        (
            "Use a list, e.g. Python's list, i.e. a mutable sequence, etc. Then stop.",
            ["Use a list, e.g. Python's list, i.e. a mutable sequence, etc. Then stop."],
        ),
        (
            "See Fig. 3 and No. 5 on p. 12. No. That was wrong.",
            ["See Fig. 3 and No. 5 on p. 12.", "No.", "That was wrong."],
        ),
        (
            "J. R. R. Tolkien was born in 1892. The U.S. Army used his maps. He died in 1973.",
            [
                "J. R. R. Tolkien was born in 1892.",
                "The U.S. Army used his maps.",
                "He died in 1973.",
            ],
        ),
        (
            "Python 3.11 is 1.25 times faster. Version 3.12.1 followed.",
            ["Python 3.11 is 1.25 times faster.", "Version 3.12.1 followed."],
        ),
        (
            "Read https://docs.python.org/3.11/library/re.html?highlight=split. It helps.",
            ["Read https://docs.python.org/3.11/library/re.html?highlight=split.", "It helps."],
        ),
        (
            'He said "Stop." Then he left. (It was late.) "Why?" she asked.',
            ['He said "Stop."', "Then he left.", "(It was late.)", '"Why?" she asked.'],
        ),
        ("It grew in 1990. 2001 was worse.", ["It grew in 1990.", "2001 was worse."]),
        ("Wait... What happened?", ["Wait...", "What happened?"]),
        ("no capital. so no split here.", ["no capital. so no split here."]),
        ("Der Ölpreis stieg. Über Nacht fiel er.", ["Der Ölpreis stieg.", "Über Nacht fiel er."]),
        ("东京是首都。大阪很大！", ["东京是首都。", "大阪很大！"]),
    ],
)
def test_sentence_ends(text, expected):
    assert split_sentences(text) == expected


def test_hard_wrapped_lines_are_rejoined():
    text = "This paragraph was wrapped\nat a narrow width, as docstrings\nare.  A second sentence\nfollows it.\n"
    assert split_sentences(text) == [
        "This paragraph was wrapped at a narrow width, as docstrings are.",
        "A second sentence follows it.",
    ]


def test_one_paragraph_per_line_keeps_headings_apart():
    # Wikipedia's layout: a heading line, then one long line per paragraph.
    body = "Anarchism is a political philosophy and movement. " * 4
    text = f"History\n{body.strip()}\nOrigins\n{body.strip()}"
    sentences = split_sentences(text)
    assert sentences[0] == "History"
    assert sentences[5] == "Origins"
    assert len(sentences) == 10


def test_paragraphs_lists_rules_and_windows_line_ends():
    text = (
        "Title\r\n=====\r\n\r\nIntro text here\r\n\r\n"
        "- first item\r\n- second item that\r\n  wraps\r\n1. numbered item\r\n(a) lettered item\r\n"
        "\r\n* * *\r\n\r\nEnd."
    )
    assert split_sentences(text) == [
        "Title",
        "Intro text here",
        "- first item",
        "- second item that wraps",
        "1. numbered item",
        "(a) lettered item",
        "End.",
    ]


def test_code_block_does_not_become_one_sentence_per_line():
    code = "\n".join(f"    value_{i} = compute(value_{i - 1}, step={i})" for i in range(300))
    text = f"The loop below runs for a while:\n\n{code}\n\nAfter it, the program ends."
    sentences = split_sentences(text)
    assert sentences[0] == "The loop below runs for a while:"
    assert sentences[-1] == "After it, the program ends."
    assert len(sentences) == 3
    assert sentences[1].startswith("value_0 = compute(value_-1, step=0) value_1 = ")


def test_output_is_stripped_single_lines_and_has_letters():
    text = "  \n\n  Lead.  \n\n---\n\n 12.\n\n(   )\n\nTail\twith tab.\n\n\n"
    sentences = split_sentences(text)
    assert sentences == ["Lead.", "Tail\twith tab."]
    assert split_sentences("") == []
    assert split_sentences("\n \n") == []


def test_megabyte_without_spaces_or_newlines():
    text = "a" * (1 << 20)
    assert split_sentences(text) == [text]
    dots = "a." * (1 << 19)
    assert split_sentences(dots) == [dots]


def test_many_paragraphs():
    paragraph = (
        "The committee met on Jan. 5 to review the proposal. Dr. Lee presented version 2.1 "
        "of the plan, e.g. the budget and timeline. Members asked questions! Was it enough? "
        "The vote was postponed until the next meeting.\n\n"
    )
    text = paragraph * 2000  # about 0.5 MB; data_pipeline.benchmark times the same text
    assert len(split_sentences(text)) == 5 * 2000
