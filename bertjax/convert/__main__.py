"""`python -m bertjax.convert import|export ...`: see command.py."""

from bertjax import program
from bertjax.convert import command

__doc__ = command.__doc__  # what --help prints: absl shows the __main__ module's docstring

program.run(command.main, command.define_flags, positional_args=True)
