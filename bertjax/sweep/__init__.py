"""Hyperparameter sweeps: `get_hyper(hyper)` (hyper.py), the command (command.py, run as
`python -m bertjax.sweep`), the sweep it records (definition.py), the trial queue on
Optuna (trial_queue.py), running trials (worker.py) and the report (report.py)."""
