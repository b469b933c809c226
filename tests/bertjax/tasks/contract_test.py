"""bertjax.tasks: the table, and task.json's Description both ways."""

import subprocess
import sys

import pytest

from bertjax import tasks
from bertjax.tasks.contract import Description
from bertjax.workdir import CheckpointError
from data_pipeline.errors import ConfigError


def test_the_table_names_every_task_once():
    table = tasks.table()
    assert list(table) == [
        "pretraining",
        "classification",
        "tagging",
        "squad",
        "retrieval",
        "reranking",
    ]
    assert all(task.name == name for name, task in table.items())


def test_an_unknown_task_names_the_option_and_the_tasks():
    with pytest.raises(ConfigError, match=r"config.task='summarize': must be one of pretraining, "):
        tasks.get("summarize")


def test_a_config_without_task_is_pretraining():
    import ml_collections

    assert tasks.for_config(ml_collections.ConfigDict({"seed": 0})).name == "pretraining"
    config = ml_collections.ConfigDict({"task": "squad"})
    assert tasks.for_config(config) is tasks.get("squad")


def test_description_round_trip():
    description = Description(
        max_seq_length=128,
        tokenizer_data={"do_lower_case": True},
        num_labels=2,
        label_names=("no", "yes"),
        metrics=("accuracy", "f1"),
        data={"train_file": "t.tsv"},
        init_checkpoint="runs/base",
    )
    values = description.to_json()
    assert values["label_names"] == ["no", "yes"] and values["metrics"] == ["accuracy", "f1"]
    assert Description.from_json(values, where="task.json") == description


@pytest.mark.parametrize(
    "values, message",
    [
        ({"max_seq_length": 8, "tokenizer_data": {}, "labels": []}, "unknown field 'labels'"),
        ({"tokenizer_data": {}}, "missing field 'max_seq_length'"),
    ],
)
def test_description_refuses_what_it_does_not_know(values, message):
    with pytest.raises(CheckpointError, match=f"w/task.json: {message}"):
        Description.from_json(values, where="w/task.json")


@pytest.mark.integration
def test_importing_bertjax_starts_nothing():
    script = (
        "import os, sys; before = dict(os.environ); import bertjax; "
        "assert 'jax' not in sys.modules and 'tensorflow' not in sys.modules, sorted(sys.modules); "
        "assert dict(os.environ) == before; print('ok')"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.stdout.strip() == "ok", result.stderr
