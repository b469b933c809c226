"""What the SQuAD tests share: the test files and configs, and the helpers that find a
question and its rows (tests/data_pipeline/finetune/squad_input_test.py reads, windows
and batches them; tests/bertjax/tasks/squad_test.py decodes answers from them).

The files (tests/testdata/finetune/squad_*.json) are small files in the official
formats: 1.1 with several gold answers per question, 2.0 with unanswerable questions
and their plausible answers.

A plugin of conftest.py, it gives both files the same
module fixtures: the two files read and their features.
"""

import numpy as np
import pytest

from data_pipeline.finetune import squad_config, squad_input
from support import TESTDATA

V1 = TESTDATA / "finetune" / "squad_v1.1.json"
V2 = TESTDATA / "finetune" / "squad_v2.0.json"
V1_CONFIG = squad_config.SquadConfig()
V2_CONFIG = squad_config.SquadConfig(version_2_with_negative=True)
# Windows of 28 - 12 - 3 = 13 pieces or more, 10 apart: several per context.
SMALL = squad_config.SquadConfig(max_seq_length=28, max_query_length=12, doc_stride=10)


def example(data, question_start):
    (found,) = [e for e in data.examples if e.question.startswith(question_start)]
    return found


def rows_of(features, qid):
    index = [e.qid for e in features.data.examples].index(qid)
    return np.flatnonzero(features.example_index == index)


@pytest.fixture(scope="module")
def v1_data():
    return squad_input.read_squad_json(V1)


@pytest.fixture(scope="module")
def v2_data():
    return squad_input.read_squad_json(V2)


@pytest.fixture(scope="module")
def v1_features(v1_data, tokenizer):
    return squad_input.make_features(v1_data, tokenizer, V1_CONFIG)


@pytest.fixture(scope="module")
def v2_features(v2_data, tokenizer):
    return squad_input.make_features(v2_data, tokenizer, V2_CONFIG)


@pytest.fixture(scope="module")
def small_features(v1_data, tokenizer):
    return squad_input.make_features(v1_data, tokenizer, SMALL)
