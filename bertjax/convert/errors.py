"""The error of every conversion (python -m bertjax.convert)."""

from data_pipeline.errors import UserError


class ConversionError(UserError):
    """A checkpoint, config or vocabulary that cannot be converted; the message names the file."""
