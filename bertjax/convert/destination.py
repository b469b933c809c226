"""Where an import or export writes: a new or empty folder, filled through a staging
folder renamed onto it at the end, so a failed conversion leaves nothing behind, and a
killed one nothing that outlives the next conversion to the same folder."""

import contextlib
import os
import re
import socket
import uuid
from collections.abc import Iterator

import tensorflow as tf

from bertjax.convert.errors import ConversionError

# A staging folder's name holds the process that writes it,
# `.OUT.<random>.<pid>@<host>.partial`, so that the next import or export to OUT can remove what a killed one left (SIGKILL
# runs no cleanup): the folders of this host whose process is no longer running. It
# leaves the others, which may be conversions still under way: another host's (whose
# processes it cannot see), and one whose process id is in use, even by another program
# since (a leftover kept, never a live folder removed). The owner is in the name from the
# folder's first moment, with no lock to take or file to write, in Cloud Storage as on a
# disk.
_ABANDONED = r"\.{name}\.[0-9a-f]{{8}}\.(\d+)@(.+)\.partial"


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
    remove_abandoned(final)
    # Not tempfile.mkdtemp: its folder is private (0700), and it becomes the result.
    owner = f"{os.getpid()}@{socket.gethostname()}"
    staging = os.path.join(
        parent, f".{os.path.basename(final)}.{uuid.uuid4().hex[:8]}.{owner}.partial"
    )
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


def remove_abandoned(final: str) -> list[str]:
    """Removes the staging folders of `final` that a process of this host left when it
    ended without finishing; returns them."""
    parent, name = os.path.split(final)
    if not tf.io.gfile.isdir(parent):
        return []
    pattern = re.compile(_ABANDONED.format(name=re.escape(name)))
    removed = []
    for entry in tf.io.gfile.listdir(parent):
        match = pattern.fullmatch(entry.rstrip("/"))
        if match is None or match[2] != socket.gethostname() or _running(int(match[1])):
            continue
        folder = os.path.join(parent, entry.rstrip("/"))
        with contextlib.suppress(tf.errors.NotFoundError):  # another run removed it first
            tf.io.gfile.rmtree(folder)
        removed.append(folder)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # no signal: whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's
    return True
