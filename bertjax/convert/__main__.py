"""`python -m bertjax.convert import|export ...`: see command.py."""

from bertjax.convert import command
from data_pipeline import cli

__doc__ = command.__doc__  # what --help prints: absl shows the __main__ module's docstring

cli.run(command.main, command.define_flags, positional_args=True)
