"""The workdir: every file a run writes, named, read and written here.

    WORKDIR/
      config.json               the resolved experiment config
      model_config.json         the BertConfig (bert_config.json field names plus ours)
      vocab.txt | .json | .model
                                the vocabulary the run was trained with
      task.json                 what restore() and predict need: the task, its labels,
                                the tokenizer settings, the sequence length
      results.json              {"eval": the latest evaluation, "best": the best one}
      eval_predictions.jsonl    the final evaluation's predictions (SQuAD: predictions.json ...)
      metrics.jsonl, tensorboard/
                                the logged steps; a resumed run cuts both back to its
                                checkpoint's step (metrics.cut_history)
      checkpoints/<step>/       the train state (orbax's state/) and its manifest.json, written
                                last: a step without one is incomplete (checkpoint.py)
      .lock | run.lease         held by the live run (`claim`)

Everything but the checkpoints is written by process 0 only, atomically
(data_pipeline.files), so a run killed at any moment leaves each file whole.
Nothing here imports the trainer: restore() and the converter read workdirs
through this module alone. Paths go through data_pipeline.files, so a workdir may be
in Cloud Storage (`gs://...`), and reading a local one never waits for TensorFlow.
"""

import contextlib
import fcntl
import json
import os
import socket
import time
import uuid

import jax
import numpy as np
from absl import logging
from jax.experimental import multihost_utils

from bertjax.model import PARAMETER_FIELDS, BertConfig
from data_pipeline import config as data_config_lib
from data_pipeline import files
from data_pipeline.errors import UserError

CONFIG_FILE = "config.json"
MODEL_CONFIG_FILE = "model_config.json"
TASK_FILE = "task.json"
RESULTS_FILE = "results.json"
EVAL_PREDICTIONS_FILE = "eval_predictions.jsonl"
METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
EVENTS_FILE = "events.jsonl"  # bertjax/events.py
PROFILE_DIR = "profile"  # bertjax/profiling.py
CHECKPOINT_DIR = "checkpoints"
CHECKPOINT_MANIFEST = "manifest.json"  # in each step's folder
VOCAB_NAMES = ("vocab.txt", "vocab.json", "vocab.model")


class CheckpointError(UserError):
    """A workdir or checkpoint that does not fit this run."""


def checkpoint_dir(workdir: str) -> str:
    """The absolute folder of the orbax checkpoints (orbax wants absolute paths)."""
    return os.path.join(absolute(workdir), CHECKPOINT_DIR)


def absolute(path: str) -> str:
    """A local path made absolute; a URL (`gs://bucket/dir`) as it is."""
    return path if "://" in path else os.path.abspath(path)


def read_json(file: str) -> dict | None:
    """A JSON file's object, or None if there is no such file; malformed JSON names the file."""
    if not files.exists(file):
        return None
    try:
        return json.loads(files.read_bytes(file))
    except ValueError as error:  # not JSON, or not UTF-8
        raise CheckpointError(f"{file}: not valid JSON ({error})") from None


def read_model_config(workdir: str) -> BertConfig | None:
    path = os.path.join(workdir, MODEL_CONFIG_FILE)
    values = read_json(path)
    if values is None:
        return None
    try:
        return BertConfig.from_dict(values)
    except (data_config_lib.ConfigError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: {e}") from None


def require_model_config(workdir: str, *, what: str) -> BertConfig:
    """The saved model config, or an error naming the option `what` and what its path is
    instead of a workdir: nothing, a file, or a folder without a model config."""
    config = read_model_config(workdir)
    if config is not None:
        return config
    if not files.exists(workdir):
        raise CheckpointError(f"{what}={workdir!r}: does not exist")
    if not files.isdir(workdir):
        raise CheckpointError(
            f"{what}={workdir!r}: a file, not a bertjax workdir (a folder with {MODEL_CONFIG_FILE})"
        )
    raise CheckpointError(
        f"{what}={workdir!r}: not a bertjax workdir (no {MODEL_CONFIG_FILE} there)"
    )


def check_same_shapes(saved: BertConfig, current: BertConfig, *, where: str) -> None:
    """Fails when a saved model's parameters (which there are, and their shapes) differ
    from this run's."""
    for name in PARAMETER_FIELDS:
        if getattr(saved, name) != getattr(current, name):
            raise CheckpointError(
                f"{where}: the saved model has {name}={getattr(saved, name)!r}, this run "
                f"config.model.{name}={getattr(current, name)!r}"
            )


def vocab_file(workdir: str) -> str | None:
    """The vocabulary a run copied into its workdir, if any."""
    candidates = (os.path.join(workdir, name) for name in VOCAB_NAMES)
    return next(filter(files.exists, candidates), None)


def require_vocab_file(workdir: str, *, what: str) -> str:
    found = vocab_file(workdir)
    if found is None:
        raise CheckpointError(f"{what}={workdir!r}: no vocabulary ({', '.join(VOCAB_NAMES)}) there")
    return found


def read_task(workdir: str) -> tuple[str, dict]:
    """task.json as (the task's name, the rest: {"max_seq_length", "tokenizer_data", ...});
    every run and `bertjax.convert import` write one."""
    task = read_json(os.path.join(workdir, TASK_FILE))
    if task is None:
        raise CheckpointError(f"{workdir}: no {TASK_FILE}; expected a bertjax workdir")
    if not isinstance(task.get("kind"), str):
        raise CheckpointError(f'{os.path.join(workdir, TASK_FILE)}: no task name ("kind")')
    return task.pop("kind"), task


def read_tokenizer_data(workdir: str) -> dict:
    """The pretraining data config whose tokenizer settings the workdir's vocabulary goes
    with, as its task.json records it."""
    _, task = read_task(workdir)
    return {**data_config_lib.default_config().to_dict(), **task["tokenizer_data"]}


def read_metrics(workdir: str) -> list[dict]:
    """The records of metrics.jsonl as far as they are written ([] before the first): a
    live run may be writing its last line."""
    try:
        text = files.read_bytes(os.path.join(workdir, METRICS_FILE)).decode("utf-8", "replace")
    except OSError:
        return []
    records = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):  # half written
            records.append(json.loads(line))
    return records


def cut_metrics(workdir: str, step: int) -> None:
    """Cuts metrics.jsonl back to the records of steps up to `step` (0: none) and drops a
    half-written last line, atomically. A run resuming from the checkpoint of `step` logs
    the later steps again, which a run killed after that checkpoint had logged already."""
    path = os.path.join(workdir, METRICS_FILE)
    if not files.exists(path):
        return
    *lines, partial = files.read_bytes(path).decode("utf-8", "replace").split("\n")
    kept = [line for line in lines if (logged := _logged_step(line)) is not None and logged <= step]
    if partial or len(kept) < len(lines):
        files.atomic_write(path, "".join(line + "\n" for line in kept))


def _logged_step(line: str) -> int | None:
    """The step of a metrics.jsonl line; None for a line that is not a whole record."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    logged = record.get("step") if isinstance(record, dict) else None
    return logged if isinstance(logged, int) else None


def read_results(workdir: str) -> dict:
    return read_json(os.path.join(workdir, RESULTS_FILE)) or {}


def write_results(workdir: str, results: dict) -> None:
    if jax.process_index() == 0:
        files.atomic_write_json(os.path.join(workdir, RESULTS_FILE), results)


def write_lines(file: str, records) -> None:
    """One JSON object per line, written atomically."""
    files.atomic_write(file, "".join(json.dumps(record) + "\n" for record in records))


def write_run_description(
    workdir: str, config, model_config: BertConfig, vocab: str, *, kind: str, description: dict
) -> str:
    """Writes config, model config, vocabulary and task.json (the task's name `kind` and
    its `description`); returns the workdir vocab path."""
    if jax.process_index() != 0:
        return vocab
    target = os.path.join(workdir, "vocab" + os.path.splitext(vocab)[1])
    files.makedirs(workdir)
    files.atomic_write_json(
        os.path.join(workdir, CONFIG_FILE), json.loads(config.to_json_best_effort())
    )
    files.atomic_write_json(os.path.join(workdir, MODEL_CONFIG_FILE), model_config.to_dict())
    files.atomic_write_json(os.path.join(workdir, TASK_FILE), {"kind": kind, **description})
    if absolute(vocab) != absolute(target):
        files.atomic_copy(vocab, target)
    return target


# ------------------------------------------------------------------------ one run per workdir

LOCK_FILE = ".lock"
LEASE_FILE = "run.lease"
# A remote workdir cannot be locked: its run renews a lease file every
# LEASE_RENEW_S, and a lease not renewed for LEASE_STALE_S is taken over.
LEASE_RENEW_S, LEASE_STALE_S = 60.0, 600.0


class WorkdirBusy(UserError):
    """Another live run holds the workdir."""


@contextlib.contextmanager
def claim(workdir: str):
    """Holds `workdir` for this run, or fails on every host if another live run holds it;
    yields a `Claim`.

    Local: an exclusive `flock` on WORKDIR/.lock, which the kernel drops when its
    process dies, so a killed run never blocks a restart. Remote: the lease
    file, written, read back after a second (the last writer wins) and renewed
    by `Claim.stepped`. Process 0 claims for the run.

    A workdir that held no run (no config.json) is left as the claim found it when
    the run ends before its first step (an error, a stop): what appeared in it is
    removed, and so are the folders the claim made, so that a run which failed before
    it started leaves no folder, lock or config.json behind. A path that is a file, or
    runs through one, is refused before anything is made.
    """
    made = _missing_folders(workdir)
    holder = _Lock(workdir) if "://" not in workdir else _Lease(workdir)
    error = None
    if jax.process_index() == 0:
        try:
            holder.acquire()
        except WorkdirBusy as busy:
            error = busy
    if jax.process_count() > 1:
        ok = multihost_utils.broadcast_one_to_all(np.int32(error is None))
        if not ok and error is None:
            error = WorkdirBusy(f"{workdir}: process 0 found it held by another run")
    if error is not None:
        raise error
    claimed = Claim(workdir, holder, made)
    leave = False
    try:
        yield claimed
    except BaseException:
        leave = jax.process_index() == 0 and claimed.found_no_run and not claimed.trained
        if leave:
            claimed.remove_what_appeared()
        raise
    finally:
        if jax.process_index() == 0:
            holder.release()
            if leave:
                claimed.remove_made_folders()


class Claim:
    """A workdir held by this run, and what it held when claimed (read on process 0,
    after the lock or lease is taken, so that no other run can add to it since)."""

    def __init__(self, workdir: str, holder, made: list[str]):
        self.workdir, self._holder, self._made = workdir, holder, made
        self._found = _names(workdir) - holder.made if jax.process_index() == 0 else set()
        self.found_no_run = CONFIG_FILE not in self._found
        self.trained = False

    def stepped(self) -> None:
        """After every step: the lease renewed, and the workdir kept, whatever the run
        ends with."""
        self._holder.renew()
        self.trained = True

    def remove_what_appeared(self) -> None:
        """Removes every file and folder the workdir did not hold when claimed (the lock
        file too, while still locked)."""
        for name in sorted(_names(self.workdir) - self._found):
            path = os.path.join(self.workdir, name)
            with contextlib.suppress(OSError):
                files.remove(path)

    def remove_made_folders(self) -> None:
        """Removes the folders the claim made, deepest first, while they are empty."""
        for folder in self._made:
            try:
                if "://" not in folder:
                    os.rmdir(folder)
                elif not files.listdir(folder):
                    files.remove(folder)  # a bucket's folder marker
            except OSError:
                return  # not empty: something else is there now


def _names(folder: str) -> set[str]:
    """The names in `folder` (a bucket's folders without their trailing slash); none if
    there is no such folder."""
    try:
        return set(files.listdir(folder))
    except FileNotFoundError:
        return set()


def _missing_folders(workdir: str) -> list[str]:
    """The folders of `workdir`'s path that do not exist yet, deepest first and absolute
    (a bucket's: the workdir alone); fails if a file stands where a folder should be."""
    missing, path = [], workdir if "://" in workdir else os.path.normpath(workdir)
    while path and not files.exists(path):
        missing.append(absolute(path))
        if "://" in path or os.path.dirname(path) == path:
            return missing
        path = os.path.dirname(path)
    if path and not files.isdir(path):
        where = "" if not missing else f"{path} "
        raise CheckpointError(f"workdir {workdir}: {where}is a file, not a directory")
    return missing


def wait_until_free(workdir: str, timeout_s: float) -> bool:
    """Waits up to `timeout_s` for the run holding a local `workdir` to end (a run told
    to stop takes a while to save); True once no run holds it. Remote workdirs: True."""
    lock = os.path.join(workdir, LOCK_FILE)
    if "://" in workdir:
        return True
    deadline = time.time() + timeout_s
    try:
        fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:  # never claimed, or left as found by a run that trained nothing
        return True
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True  # closing the file drops the lock again
            except BlockingIOError:
                if time.time() >= deadline:
                    return False
                time.sleep(0.5)
    finally:
        os.close(fd)


def _owner() -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}


def _busy(workdir: str, owner: dict | None, how: str) -> WorkdirBusy:
    who = "another run"
    if owner:
        who = f"the run of process {owner.get('pid')} on {owner.get('host')}"
    return WorkdirBusy(f"{workdir}: in use by {who} ({how}); wait for it to end or stop it")


class _Lock:
    def __init__(self, workdir: str):
        self.workdir, self.file = workdir, os.path.join(workdir, LOCK_FILE)
        self.made = set()  # {LOCK_FILE} when acquire created it
        self._fd = None

    def acquire(self) -> None:
        # A run that leaves the workdir as it found it may remove the lock file (and the
        # folder) between this run's opening it and locking it: then lock the new one.
        for _ in range(3):
            os.makedirs(self.workdir, exist_ok=True)
            opened = _open_lock_file(self.file)
            if opened is None:
                continue
            fd, created = opened
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise _busy(self.workdir, read_json(self.file), f"it holds {LOCK_FILE}") from None
            if _same_file(fd, self.file):
                break
            os.close(fd)
        else:
            raise _busy(self.workdir, None, f"its {LOCK_FILE} was removed while locking it")
        self.made = {LOCK_FILE} if created else set()
        os.ftruncate(fd, 0)
        with files.writing(self.file):  # a full disk: the line names the lock file
            os.write(fd, json.dumps(_owner()).encode())
        self._fd = fd

    def renew(self) -> None:
        pass  # the kernel holds the lock for as long as the process lives

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _open_lock_file(path: str) -> tuple[int, bool] | None:
    """The lock file open for writing and whether this call created it; None if it was
    removed meanwhile."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), True
    except FileExistsError:
        pass
    except FileNotFoundError:
        return None  # the folder
    try:
        return os.open(path, os.O_RDWR), False
    except FileNotFoundError:
        return None


def _same_file(fd: int, path: str) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


class _Lease:
    def __init__(self, workdir: str):
        self.workdir, self.file = workdir, os.path.join(workdir, LEASE_FILE)
        self.owner = {**_owner(), "id": uuid.uuid4().hex}
        self.made = {LEASE_FILE}  # release removes it
        self._renewed = 0.0

    def acquire(self) -> None:
        held = read_json(self.file)
        if held is not None and not self._stale(held):
            age = time.time() - held.get("renewed", 0)
            raise _busy(
                self.workdir,
                held,
                f"its {LEASE_FILE} was renewed {age:.0f} s ago; it is taken over "
                f"after {LEASE_STALE_S:.0f} s without renewal",
            )
        if held is not None:
            logging.warning("%s: taking over the stale lease of %s", self.workdir, held)
        self.renew(force=True)
        time.sleep(1.0)  # two runs starting together: the last writer keeps it
        if (read_json(self.file) or {}).get("id") != self.owner["id"]:
            raise _busy(self.workdir, read_json(self.file), "it claimed the lease at once")

    @staticmethod
    def _stale(held: dict) -> bool:
        if time.time() - held.get("renewed", 0) > LEASE_STALE_S:
            return True
        if held.get("host") == socket.gethostname():
            try:
                os.kill(held["pid"], 0)
            except ProcessLookupError:
                return True  # its process is gone
            except (KeyError, TypeError, PermissionError):
                pass
        return False

    def renew(self, force: bool = False) -> None:
        now = time.time()
        if force or now - self._renewed >= LEASE_RENEW_S:
            files.atomic_write_json(self.file, {**self.owner, "renewed": now})
            self._renewed = now

    def release(self) -> None:
        if (read_json(self.file) or {}).get("id") == self.owner["id"]:
            files.remove(self.file)


# Config keys a resumed run may change: how often it logs, evaluates and saves,
# how much it evaluates, its mesh, the save budget on a stop request, the input
# pipeline's worker processes (the same batches either way), what it profiles and
# warns of, its hooks, and (only upwards) its length.
RESUMABLE_CHANGES = (
    "num_train_steps",
    "num_train_epochs",
    "log_every_steps",
    "eval_every_steps",
    "num_eval_steps",
    "eval_batch_size",
    "checkpoint_every_steps",
    "checkpoints_to_keep",
    "preemption_save_seconds",
    "platform",
    "compilation_cache_dir",
    "mesh.",
    "data.num_workers",
    "model.trim_last_layer",
    "profile.",
    "input_wait_warning",
    "hooks",
)


def check_same_run(workdir: str, config, *, kind: str) -> None:
    """Fails, with a one-line diff, when the run `workdir` holds had another config in
    anything but RESUMABLE_CHANGES, or a longer run (num_train_steps or epochs). A run
    writes its config.json before its first step, so this holds from then on, whether or
    not it saved a checkpoint; a workdir with checkpoints and no config.json is refused.
    A run of another task than `kind` (the name of the task this config trains) is
    refused in one line naming both, and so is a config.json without a key this config
    has (an older bertjax's)."""
    path = os.path.join(workdir, CONFIG_FILE)
    saved = read_json(path)
    if saved is None:
        steps = files.glob(os.path.join(workdir, CHECKPOINT_DIR, "[0-9]*"))
        if steps:
            raise CheckpointError(
                f"{path}: missing, though {os.path.dirname(steps[0])} holds checkpoints; "
                f"put back the {CONFIG_FILE} of the run that wrote them, or use a new workdir"
            )
        return
    # Written with config.json: another task's configs differ in most keys, which are
    # neither an older bertjax's nor a diff worth showing.
    held = (read_json(os.path.join(workdir, TASK_FILE)) or {}).get("kind")
    if isinstance(held, str) and held != kind:
        raise CheckpointError(
            f"{workdir} holds a run of another task ({held}; this config trains {kind}); "
            f"resume it with a {held} config, or use a new workdir"
        )
    now = _flat(json.loads(config.to_json_best_effort()))
    before = _flat(saved)
    older = sorted(
        key
        for key in now.keys() - before.keys()
        if not any(key == k or (k.endswith(".") and key.startswith(k)) for k in RESUMABLE_CHANGES)
    )
    if older:
        raise CheckpointError(
            f"{path}: has no {', '.join(older[:3])}{' ...' if len(older) > 3 else ''} (written "
            "by an older bertjax); resume it with that version, or use a new workdir"
        )
    changed = [
        key
        for key in sorted(before.keys() | now.keys())
        if before.get(key) != now.get(key)
        and not any(key == k or (k.endswith(".") and key.startswith(k)) for k in RESUMABLE_CHANGES)
    ]
    for key in ("num_train_steps", "num_train_epochs"):
        if key in now and key in before and now[key] < before[key]:
            changed.insert(0, key)
    if changed:
        shown = ", ".join(
            f"{k} {before.get(k, '(none)')!r} -> {now.get(k, '(none)')!r}" for k in changed[:4]
        )
        more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
        raise CheckpointError(
            f"{workdir} holds a run with another config ({shown}{more}); resume it with its "
            f"{CONFIG_FILE} (a run may only get longer), or use a new workdir"
        )


def _flat(values: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = value
    return flat
