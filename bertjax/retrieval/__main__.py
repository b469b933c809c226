"""`python -m bertjax.retrieval evaluate|sts ...`: see command.py."""

from bertjax import program
from bertjax.retrieval import command

__doc__ = command.__doc__  # what --help prints: absl shows the __main__ module's docstring

program.run("bertjax.retrieval.evaluation:main", command.define_flags, positional_args=True)
