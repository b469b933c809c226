"""The tasks: the contract (contract.py), one module per task, and their table.

Adding a task is one module in bertjax/tasks/ that builds a `Task`, one line in
`table()`, its input code in data_pipeline/ if it needs new input, and an
experiment config whose `task` names it. A task defined elsewhere (a notebook,
a test) is handed to `train.train_and_evaluate(..., task=...)` directly.
"""

from data_pipeline.config import ConfigError

# What a config without `task` trains.
DEFAULT = "pretraining"


def table() -> dict:
    """name -> Task, for every task bertjax ships (imported here, on first use: the task
    modules import the contract, which is this package's)."""
    from bertjax.tasks import classification, pretraining, squad, tagging

    return {
        task.name: task
        for task in (pretraining.TASK, classification.TASK, tagging.TASK, squad.TASK)
    }


def get(name: str, *, where: str = "config.task"):
    """The Task called `name`; an unknown name is an error naming `where`."""
    tasks = table()
    if name not in tasks:
        raise ConfigError(f"{where}={name!r}: must be one of {', '.join(tasks)}")
    return tasks[name]


def for_config(config):
    """The task `config.task` names (pretraining when the config has no `task`)."""
    return get(config.task if "task" in config else DEFAULT)
