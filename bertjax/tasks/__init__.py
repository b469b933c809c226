"""The table of tasks: `config.task` -> its Task (the contract is in contract.py).

Adding a task is one module in bertjax/ that builds a `Task`, one line here,
its input code in data_pipeline/ if it needs new input, and an experiment
config whose `task` names it.
"""

from bertjax.tasks import classification, pretraining, squad, tagging

TASKS = {
    task.name: task for task in (pretraining.TASK, classification.TASK, tagging.TASK, squad.TASK)
}
