"""`python -m bertjax.convert import|export ...`: see import_export.py."""

from bertjax.convert import import_export
from data_pipeline import cli

__doc__ = import_export.__doc__  # what --help prints: absl shows the __main__ module's docstring

cli.run(import_export.main, import_export.define_flags, positional_args=True)
