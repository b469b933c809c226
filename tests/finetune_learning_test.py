"""Fine-tuning learns: the real pretrained all-MiniLM-L6-v2, imported, on built-in-corpus tasks.

These are the README's fine-tuning figures at a smaller size: the same configs
(experiments/finetune/builtin_topics.py, builtin_cloze.py) and task files
(data_pipeline/builtin_tasks.py).
"""

import json

import jax
import pytest

from bertjax import convert, train
from data_pipeline import builtin_tasks
from experiments.finetune import builtin_cloze, builtin_topics

# Learning is what is tested here, not sharding (sharding_test.py's concern): one device
# keeps these minutes-long runs clear of the 8 fake devices' collectives on 2 cores.
ONE_DEVICE = jax.devices()[:1]


@pytest.fixture(scope="module")
def minilm_workdir(minilm_dir, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("converted") / "minilm"
    convert.import_checkpoint("hf", str(minilm_dir), str(workdir))
    return str(workdir)


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("builtin_tasks")
    builtin_tasks.write_tasks(str(out))
    return out


def _topics_config(init_checkpoint, task_dir):
    config = builtin_topics.get_config()
    config.init_checkpoint = init_checkpoint
    config.data.train_file = str(task_dir / "topics_train.tsv")
    config.data.eval_file = str(task_dir / "topics_eval.tsv")
    config.train_batch_size = 16
    config.eval_batch_size = 16
    config.num_train_epochs = 2.0
    config.log_every_steps = 100
    return config


def test_pretrained_classifier_learns_and_beats_random_init(minilm_workdir, task_dir, tmp_path):
    config = _topics_config(minilm_workdir, task_dir)
    pretrained = train.train_and_evaluate(config, str(tmp_path / "pretrained"), devices=ONE_DEVICE)
    config.random_init = True
    scratch = train.train_and_evaluate(config, str(tmp_path / "scratch"), devices=ONE_DEVICE)
    print(
        f"\nheld-out topic accuracy: pretrained {pretrained['eval']['accuracy']:.3f}, "
        f"random init {scratch['eval']['accuracy']:.3f}"
    )
    assert pretrained["eval"]["accuracy"] >= 0.85
    assert pretrained["eval"]["accuracy"] - scratch["eval"]["accuracy"] >= 0.2


def test_pretrained_reader_finds_the_blanked_words(minilm_workdir, task_dir, tmp_path):
    # A third of the held-out questions and 45% of an epoch at twice the config's learning
    # rate (72 steps; exact match 0.72 when last run) keep this to about two minutes.
    eval_path = task_dir / "cloze_eval.json"
    data = json.loads(eval_path.read_text())
    small = tmp_path / "cloze_eval_small.json"
    small.write_text(json.dumps({**data, "data": data["data"][::3]}))
    config = builtin_cloze.get_config()
    config.init_checkpoint = minilm_workdir
    config.data.train_file = str(task_dir / "cloze_train.json")
    config.data.eval_file = str(small)
    config.num_train_epochs = 0.45
    config.optimizer.learning_rate = 2e-4
    config.log_every_steps = 1000
    results = train.train_and_evaluate(config, str(tmp_path / "cloze"), devices=ONE_DEVICE)
    print(f"\nheld-out cloze exact match {results['eval']['exact_match']:.3f}")
    assert results["eval"]["exact_match"] >= 0.4
    predictions = json.loads((tmp_path / "cloze" / "predictions.json").read_text())
    questions = sum(len(article["paragraphs"]) for article in data["data"][::3])
    assert len(predictions) == questions
