"""The tasks: the contract (contract.py), one module per task, and their table.

Adding a task is one module in bertjax/tasks/ that builds a `Task`, one line in
`table()`, its input code in data_pipeline/ if it needs new input, and an
experiment config whose `task` names it. A task defined in your own module
needs none of that: `config.task = "package.module:ATTRIBUTE"` names the `Task`
by its import path (the module must be importable, on PYTHONPATH), and that
path is the task's name in the workdir, so that restore, predict and sweeps find
it again. A notebook can also hand a `Task` to `train.train_and_evaluate(...,
task=...)` directly.
"""

import dataclasses

from bertjax import import_path
from bertjax.tasks import classification, pretraining, reranking, retrieval, squad, tagging
from bertjax.tasks.contract import Task
from data_pipeline.errors import ConfigError

# What a config without `task` trains.
DEFAULT = "pretraining"


def table() -> dict:
    """name -> Task, for every task bertjax ships."""
    return {
        task.name: task
        for task in (
            pretraining.TASK,
            classification.TASK,
            tagging.TASK,
            squad.TASK,
            retrieval.TASK,
            reranking.TASK,
        )
    }


def get(name: str, *, where: str = "config.task"):
    """The Task called `name`, or at the import path `module:ATTRIBUTE`; an unknown name
    is an error naming `where`."""
    if ":" in name:
        return _imported(name, where)
    tasks = table()
    if name not in tasks:
        raise ConfigError(f"{where}={name!r}: must be one of {', '.join(tasks)}")
    return tasks[name]


def for_config(config):
    """The task `config.task` names (pretraining when the config has no `task`)."""
    return get(config.task if "task" in config else DEFAULT)


def _imported(path: str, where: str):
    task = import_path.load(path, where=where, what="Task", accepts=lambda x: isinstance(x, Task))
    return dataclasses.replace(task, name=path)
