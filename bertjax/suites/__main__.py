"""`python -m bertjax.suites glue|squad run|report|submit|sample ...`: see command.py."""

import sys

from bertjax import program
from bertjax.suites import command

__doc__ = command.__doc__  # what --help prints: absl shows the __main__ module's docstring

sys.argv = command.with_default_config(sys.argv)
program.run(command.main, command.define_flags, positional_args=True)
