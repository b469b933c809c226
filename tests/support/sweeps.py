"""Sweeps made in the test's own process: a SweepDefinition and its SQLite queue, with no
config file read and no trial run (the sweep tests in tests/bertjax/sweep/)."""

from bertjax.sweep import hyper, trial_queue
from bertjax.sweep.definition import SweepDefinition


def make_definition(sweep_dir, trials=({"seed": 0}, {"seed": 1}), **fields) -> SweepDefinition:
    values = dict(
        config="experiment.py",
        config_arg=None,
        overrides={},
        trials=tuple(trials),
        space={"seed": hyper.Choice((0, 1))},
        search="",
        num_trials=len(trials),
        metric="",
        mode="min",
        prune=False,
        max_retries=1,
        sweep_dir=str(sweep_dir),
        config_values={},
    )
    return SweepDefinition(**{**values, **fields})


def make_study(tmp_path, trials=({"seed": 0}, {"seed": 1}), max_retries=1):
    definition = make_definition(tmp_path, trials, max_retries=max_retries)
    storage = trial_queue.open_storage(trial_queue.storage_url(str(tmp_path), ""), heartbeat_s=30)
    study = trial_queue.open_study(storage, "sweep", direction="minimize", create=True)
    trial_queue.record_sweep(study, definition)
    for index, overrides in enumerate(trials):
        trial_queue.enqueue(study, index, overrides, attempt=1)
    return study, definition
