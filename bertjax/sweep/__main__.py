"""`python -m bertjax.sweep run|worker|report ...`: see command.py."""

from bertjax.sweep import command
from data_pipeline import cli

cli.run(command.main, command.define_flags, positional_args=True)
