"""Reading any file, and writing files so that a reader, or a run killed midway,
never sees half of one.

The same call reads or writes a local file or a Cloud Storage object: a URL
(`gs://...`) goes through `tf.io.gfile`, a local path through the os module, so
that a program working on local files (a report, a refusal) never waits seconds for
TensorFlow. A failure is an OSError: a write that fails (a full disk, no
permission) names the file, `cannot write PATH: No space left on device`.
"""

import contextlib
import errno
import glob as glob_lib
import json
import os
import shutil
import sys
import uuid


def _tf():
    # Imported when a function needs it: TensorFlow takes seconds and logs to stderr,
    # which a tool that fails on a bad local file (a missing vocabulary) should not.
    import tensorflow as tf

    return tf


def exists(path: str) -> bool:
    """Whether a local file or Cloud Storage object is there (TensorFlow only for a URL)."""
    if "://" not in path:
        return os.path.exists(path)
    return _tf().io.gfile.exists(path)


def isdir(path: str) -> bool:
    """Whether a local directory or Cloud Storage prefix is there."""
    if "://" not in path:
        return os.path.isdir(path)
    return _tf().io.gfile.isdir(path)


def listdir(path: str) -> list[str]:
    """The names in a local directory or under a Cloud Storage prefix (no trailing `/`)."""
    if "://" not in path:
        return os.listdir(path)
    return [name.rstrip("/") for name in _remote(path, lambda gfile: gfile.listdir(path))]


def glob(pattern: str) -> list[str]:
    """The local files or Cloud Storage objects that `pattern` matches, sorted."""
    if "://" not in pattern:
        return sorted(glob_lib.glob(pattern))
    return sorted(_remote(pattern, lambda gfile: gfile.glob(pattern)))


def read_bytes(path: str) -> bytes:
    """A local or Cloud Storage file's bytes; an OSError with a one-line reason if unreadable."""
    if "://" not in path:  # without waking TensorFlow's runtime, and its log lines
        with open(path, "rb") as f:
            return f.read()

    def read(gfile):
        with gfile.GFile(path, "rb") as f:
            return f.read()

    return _remote(path, read)


def makedirs(path: str) -> None:
    """Makes a folder and the folders above it that are missing."""
    if "://" not in path:
        os.makedirs(path, exist_ok=True)
    else:
        _remote(path, lambda gfile: gfile.makedirs(path))


def remove(path: str) -> None:
    """Removes a file, or a folder and everything in it; FileNotFoundError if neither is there."""
    if "://" in path:
        _remote(path, lambda gfile: gfile.rmtree(path) if gfile.isdir(path) else gfile.remove(path))
    elif os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.remove(path)


def _remote(path: str, call):
    """`call(tf.io.gfile)` with TensorFlow's errors as OSErrors of one line: they are not
    OSErrors, and may carry an HTTP body over many lines."""
    tf = _tf()
    try:
        return call(tf.io.gfile)
    except tf.errors.NotFoundError:
        raise FileNotFoundError(errno.ENOENT, "no such file", path) from None
    except tf.errors.OpError as e:
        raise OSError(e.message.splitlines()[0] if e.message else type(e).__name__) from None


def temporary_name(path: str) -> str:
    """A hidden, unique sibling of `path` (`.NAME.tmp-...`): where a write goes first."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.tmp-{uuid.uuid4().hex}")


@contextlib.contextmanager
def writing(path: str, *, temporary: str = ""):
    """Turns a failure to write `path` (through `temporary`, its stand-in until renamed)
    into an OSError that names `path`: Python's write errors name no file (`[Errno 28]
    No space left on device`), and TensorFlow's name the temporary one, or a folder above
    `path` that cannot be made (a file is there). TensorFlow's errors about another file
    (the source of a copy) pass unchanged."""
    tf = sys.modules.get("tensorflow")
    try:
        yield
    except OSError as error:
        raise OSError(f"cannot write {path}: {error.strerror or error}") from error
    except Exception as error:
        if tf is None or not isinstance(error, tf.errors.OpError):
            raise
        above = [path]
        while os.path.dirname(above[-1]) not in ("", above[-1]):
            above.append(os.path.dirname(above[-1]))
        named = [
            name
            for name in (temporary, *above)
            if name and error.message.startswith(name) and error.message[len(name) :][:1] in ";: "
        ]
        if not named:
            raise
        reason = error.message[len(named[0]) :].lstrip(";: ").splitlines()[0].strip()
        raise OSError(f"cannot write {path}: {reason}") from error


def atomic_write(path: str, data: str | bytes) -> None:
    """Writes `data` (text as UTF-8) to a temporary sibling, then renames it onto `path`."""
    data = data.encode("utf-8") if isinstance(data, str) else data
    directory = os.path.dirname(path)
    temporary = temporary_name(path)
    if "://" not in path:
        _write_locally(path, temporary, lambda f: f.write(data))
        return
    gfile = _tf().io.gfile
    try:
        with writing(path, temporary=temporary):
            if directory:
                gfile.makedirs(directory)
            with gfile.GFile(temporary, "wb") as f:
                f.write(data)
            gfile.rename(temporary, path, overwrite=True)
    finally:
        if gfile.exists(temporary):
            gfile.remove(temporary)


def atomic_write_json(path: str, value) -> None:
    """`value` as indented JSON with sorted keys, written atomically."""
    atomic_write(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def atomic_copy(source: str, destination: str) -> None:
    """Copies `source` to a temporary sibling of `destination`, then renames it."""
    temporary = temporary_name(destination)
    if "://" not in source + destination:
        with open(source, "rb") as f:  # a missing source names itself, not the destination
            _write_locally(destination, temporary, lambda out: shutil.copyfileobj(f, out))
        return
    gfile = _tf().io.gfile
    try:
        with writing(destination, temporary=temporary):
            gfile.copy(source, temporary, overwrite=True)
            gfile.rename(temporary, destination, overwrite=True)
    finally:
        if gfile.exists(temporary):
            gfile.remove(temporary)


def _write_locally(path: str, temporary: str, fill) -> None:
    """`fill(file)` writes the temporary sibling of a local `path`, then it is renamed onto
    `path` (its folders made first); a failure removes the temporary."""
    try:
        with writing(path, temporary=temporary):
            if os.path.dirname(path):
                _local_folder(os.path.dirname(path))
            with open(temporary, "wb") as f:
                fill(f)
            os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            os.remove(temporary)


def _local_folder(path: str) -> None:
    """os.makedirs, failing with the file that stands where a folder should be."""
    try:
        os.makedirs(path, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        above = path
        while not os.path.exists(above) and os.path.dirname(above) != above:
            above = os.path.dirname(above)
        raise NotADirectoryError(errno.ENOTDIR, f"{above} is a file, not a directory") from None
