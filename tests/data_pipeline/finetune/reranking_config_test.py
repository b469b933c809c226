"""The reranking task's data options: what each source needs, refused in one line naming
the option, with no TensorFlow imported."""

import subprocess
import sys

import pytest
from support import REPO

from data_pipeline.errors import ConfigError
from data_pipeline.finetune import reranking_config
from data_pipeline.finetune.reranking_config import RerankingConfig

BEIR = {"beir_dir": "/data/scifact", "negatives_file": "/data/negatives.jsonl"}


def test_a_beir_directory_with_its_negatives_makes_groups_of_the_positive_and_n():
    config = reranking_config.from_config({**BEIR, "num_negatives": 3})
    assert config.group_size == 4 and not config.pairs
    # Evaluation alone needs no negatives file.
    assert RerankingConfig(beir_dir="/d", train_split="").group_size == 8


def test_rows_are_groups_of_their_columns_or_pairs_with_a_label():
    groups = RerankingConfig(train_file="t.tsv", negatives=("hard1", "hard2"))
    assert groups.group_size == 3 and not groups.pairs
    pairs = RerankingConfig(train_file="t.jsonl", passage="text", label="relevant")
    assert pairs.group_size == 1 and pairs.pairs


@pytest.mark.parametrize(
    "values, message",
    [
        ({}, r"^config.data.beir_dir='': give beir_dir, or train_file"),
        ({**BEIR, "train_file": "t.tsv"}, r"^config.data.beir_dir='/data/scifact': give"),
        ({"train_file": "t.txt"}, r"^config.data.train_file='t.txt': the extension"),
        ({"beir_dir": "/d"}, r"^config.data.negatives_file='': a group of train_split='train'"),
        ({**BEIR, "negatives_file": "n.tsv"}, r"^config.data.negatives_file='n.tsv': JSON lines"),
        (
            {"train_file": "t.tsv", "eval_negatives_file": "n.jsonl"},
            r"^config.data.eval_negatives_file='n.jsonl': negatives by passage id need beir_dir",
        ),
        ({**BEIR, "num_negatives": 0}, r"^config.data.num_negatives=0: must be at least 1"),
        (
            {"train_file": "t.tsv", "passage": "p", "negatives": ("n",)},
            r"^config.data.negatives=\('n',\): rows are pairs",
        ),
        ({"train_file": "t.tsv", "positive": ""}, r"^config.data.positive='': must name"),
        (
            {"train_file": "t.tsv", "negatives": ("query",)},
            r"^config.data.query='query': each column once: query, positive, query",
        ),
        (
            {**BEIR, "max_query_length": 64, "max_seq_length": 67},
            r"^config.data.max_seq_length=67: must hold \[CLS\] query \[SEP\] passage \[SEP\] "
            r"with max_query_length=64: at least 68",
        ),
        ({**BEIR, "length_buckets": 0}, r"^config.data.length_buckets=0: must be at least 1"),
        ({**BEIR, "negative_file": "x"}, r"config.data.negative_file"),
    ],
)
def test_each_wrong_option_is_one_line_naming_it(values, message):
    with pytest.raises(ConfigError, match=message) as caught:
        reranking_config.from_config(values)
    assert "\n" not in str(caught.value)


def test_the_options_load_without_tensorflow():
    script = (
        "import sys\n"
        "from data_pipeline.finetune import reranking_config\n"
        "reranking_config.default_config()\n"
        "assert 'tensorflow' not in sys.modules and 'jax' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", script], cwd=REPO, check=True, timeout=60)
