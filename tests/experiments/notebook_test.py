"""The notebooks in experiments/notebooks run end to end on a tiny workdir."""

import os

import jax
import pytest
from support.notebooks import run_notebook

from bertjax import train
from data_pipeline import native_log

pytestmark = pytest.mark.integration


def test_restore_and_probe_runs_and_shows_its_results(pretrained_workdir, monkeypatch):
    # conftest.py's 4-step run, evaluated at steps 2 and 4: curves of two points a split.
    monkeypatch.setenv("BERTJAX_WORKDIR", pretrained_workdir)
    text, images = run_notebook("restore_and_probe.ipynb", monkeypatch)
    assert "step 4: 2 layers, hidden 64" in text
    assert text.count(" -> ") == 3
    assert "does not exist" not in text
    # Restoring starts TensorFlow, XLA and libtpu; none of their start-up lines shows.
    assert [line for line in text.splitlines() if native_log.is_noise(line)] == []
    assert images == 3  # similarity heatmap, attention map, training curves
    assert os.path.exists(os.path.join(pretrained_workdir, "metrics.jsonl"))


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory, make_small_config):
    """A sweep of two learning rates, its trials trained in this process through the queue.

    Trained here, not read from conftest.py's pretrained_workdir: the report needs a
    sweep's trials, two runs that differ in their learning rate.
    """
    from bertjax.sweep import command, hyper, trial_queue, worker
    from bertjax.sweep.definition import SweepDefinition

    sweep_dir = tmp_path_factory.mktemp("sweep")
    trials = ({"optimizer.learning_rate": 1e-3}, {"optimizer.learning_rate": 3e-3})
    definition = SweepDefinition(
        config="tiny.py",
        config_arg=None,
        overrides={},
        trials=trials,
        space={"optimizer.learning_rate": hyper.Choice((1e-3, 3e-3))},
        search="",
        num_trials=len(trials),
        metric="",
        mode="min",
        prune=False,
        max_retries=0,
        sweep_dir=str(sweep_dir),
        config_values={},
    )
    storage = trial_queue.open_storage(trial_queue.storage_url(str(sweep_dir), ""), heartbeat_s=30)
    study = trial_queue.open_study(storage, "sweep", direction="minimize", create=True)
    trial_queue.record_sweep(study, definition)
    for index, overrides in enumerate(trials):
        trial_queue.enqueue(study, index, overrides, attempt=1)
    while (trial := trial_queue.claim(study)) is not None:
        params = worker.suggest(trial, trial.user_attrs["keys"], definition.space)
        name = worker.trial_name(trial.user_attrs["index"], params)
        workdir = sweep_dir / "trials" / name
        trial.set_user_attr("workdir", str(workdir))
        config = command.apply_overrides(make_small_config(), params, name)
        results = train.train_and_evaluate(config, str(workdir), devices=jax.devices()[:1])
        study.tell(trial, results["eval"]["loss"])
    return sweep_dir


def test_sweep_report_runs_and_shows_the_trials(tiny_sweep, monkeypatch):
    monkeypatch.setenv("BERTJAX_SWEEP_DIR", str(tiny_sweep))
    text, images = run_notebook("sweep_report.ipynb", monkeypatch)
    assert "tiny.py: 2 trials" in text
    assert text.count(" done ") == 2
    assert "best: trial " in text and "final eval: {'loss'" in text
    assert [line for line in text.splitlines() if native_log.is_noise(line)] == []
    assert images == 2  # the metric against the learning rate, the training curves
