"""Hyperparameter sweeps: `get_hyper(hyper)` (hyper.py), the command (command.py, run as
`python -m bertjax.sweep`), the sweep it records (definition.py), the trial queue on
Optuna (trial_queue.py), running trials (worker.py) and the report (report.py)."""

from bertjax import program

# Before the modules below start TensorFlow and jax: a notebook that reads a report (this
# package's, or bertjax.suites', which imports it) sees none of their start-up lines, as
# the bertjax API's first use sees none.
program.notebook()
