"""Where an import or export writes: a new or empty folder, filled through a staging
folder renamed onto it at the end, so a failed conversion leaves nothing behind."""

import contextlib
import os
import uuid
from collections.abc import Iterator

import tensorflow as tf

from bertjax.convert.errors import ConversionError


def check_empty(path: str) -> None:
    """Fails unless `path` is absent or an empty folder: an export or import never writes
    over anything. A local `path` must also be below folders only (in Cloud Storage a
    folder is only a prefix of object names, which an object's name may be too)."""
    gfile = tf.io.gfile
    if gfile.exists(path) and (not gfile.isdir(path) or gfile.listdir(path)):
        raise ConversionError(f"{path}: already exists and is not empty; choose a new folder")
    if "://" in path:
        return
    above = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(above):
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        raise ConversionError(f"{path}: {above} is not a folder; choose another path")


@contextlib.contextmanager
def staging(final: str) -> Iterator[str]:
    """A temporary folder next to `final`, renamed to it on success and removed on failure.

    In Cloud Storage the rename copies and deletes each object: a reader may see
    part of `final` while it runs, and a run killed then leaves both halves.
    """
    gfile = tf.io.gfile
    check_empty(final)
    parent = os.path.dirname(final)
    # The outermost local folder this creates, removed again on failure (in Cloud
    # Storage a folder is only a prefix of object names).
    created = None
    while "://" not in parent and not os.path.exists(parent):
        created, parent = parent, os.path.dirname(parent)
    parent = os.path.dirname(final)
    gfile.makedirs(parent)
    # Not tempfile.mkdtemp: its folder is private (0700), and it becomes the result.
    staging = os.path.join(parent, f".{os.path.basename(final)}.{uuid.uuid4().hex[:8]}.partial")
    gfile.mkdir(staging)
    try:
        yield staging
        # overwrite: `final` may be an empty folder, which rename(2) replaces.
        gfile.rename(staging, final, overwrite=True)
    except BaseException:
        for folder in (staging, created):
            if folder is not None:
                with contextlib.suppress(tf.errors.OpError):
                    gfile.rmtree(folder)
        raise
