"""A sweep's queue and record of trials: an Optuna study in a relational database.

The database is a SQLite file in the sweep directory unless a server URL
(`postgresql://...`) is given, as it must be when workers on several machines
share one sweep. Optuna's storage makes taking a trial atomic, so any number
of workers can draw from one queue.

The study's user attribute "sweep" holds the definition (a SweepDefinition,
bertjax.sweep.definition, as JSON: record_sweep, recorded_sweep). Each
Optuna trial is one attempt at one trial of the sweep, with user attributes:
    index      the sweep trial it runs (its workdir's number)
    keys       the config keys it sets (its parameters)
    attempt    1 for the first attempt, 2 after one failure, ...
    worker     {"host", "pid", "started"} of the worker that took it
    workdir    the trial's workdir, once its worker names it
    error      why an attempt failed; interrupted: stopped before the end, to go on
    duplicate  a second copy of a queued attempt, dropped when taken (see claim)
States: WAITING (queued), RUNNING (a worker has it and records heartbeats),
then COMPLETE (its value is the metric), FAIL or PRUNED. A failed attempt is
queued again while attempts are left; an interrupted one (stopped on request,
or its worker gone) is queued again with the same attempt number, and its run
resumes from its checkpoint. A worker is gone when its process on this host
has ended, or, anywhere, when its heartbeats (from a thread of their own,
`heartbeats`, whatever its trial is doing) stop for the grace period of 4
heartbeats, unless a live run holds the trial's workdir: a worker too starved
or stopped to record them is not gone while its run goes on. On one machine
the workdir's lock has the last word; across machines, the heartbeats.

This is the one module that reaches into Optuna's private attributes (a trial's
id in its storage, a study's storage: Optuna has no public handle on either),
each in one small function here.
"""

import contextlib
import dataclasses
import datetime
import fcntl
import os
import socket
import threading
import warnings

import optuna
import psutil
import sqlalchemy.exc

from bertjax.sweep import hyper
from bertjax.sweep.definition import SweepDefinition
from data_pipeline.errors import UserError

SWEEP_ATTR = "sweep"
WAITING, RUNNING = optuna.trial.TrialState.WAITING, optuna.trial.TrialState.RUNNING
COMPLETE, FAIL = optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL
PRUNED = optuna.trial.TrialState.PRUNED
DUPLICATE_ATTR = "duplicate"  # a second copy of a queued attempt, dropped unrun
# What a database busy or out of reach raises: Optuna wraps SQLAlchemy's errors in a session.
_STORAGE_ERRORS = (optuna.exceptions.StorageInternalError, sqlalchemy.exc.SQLAlchemyError)


class QueueError(UserError):
    """A sweep's storage that cannot be used as asked."""


def storage_url(sweep_dir: str, storage: str) -> str:
    """`storage`, or the SQLite file SWEEP_DIR/sweep.db."""
    if storage:
        return storage
    if "://" in sweep_dir:
        raise QueueError(
            f"--sweep_dir={sweep_dir}: a sweep directory in a bucket needs --storage, a "
            "database every worker reaches (postgresql://USER:PASSWORD@HOST/DB)"
        )
    return "sqlite:///" + os.path.join(os.path.abspath(sweep_dir), "sweep.db")


def open_storage(url: str, *, heartbeat_s: int) -> optuna.storages.RDBStorage:
    engine_kwargs = {}
    if url.startswith("sqlite"):
        # Several workers and their threads write one file: wait for its lock.
        engine_kwargs = {"connect_args": {"timeout": 60}}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with warnings.catch_warnings():
            # Heartbeats are marked experimental; they are what finds a worker gone.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(
                url,
                engine_kwargs=engine_kwargs,
                heartbeat_interval=heartbeat_s,
                grace_period=4 * heartbeat_s,
            )
    except Exception as error:  # sqlalchemy's errors: a bad URL, a server not answering
        raise QueueError(f"--storage={_redacted(url)}: {str(error).splitlines()[0]}") from None


def open_study(storage, name: str, *, direction: str, create: bool, sampler=None, pruner=None):
    if not create:
        names = [s.study_name for s in optuna.study.get_all_study_summaries(storage)]
        if name not in names:
            raise QueueError(
                f"{_redacted(storage.url)} holds no sweep named {name!r} "
                f"(it holds {', '.join(names) or 'none'}); start it with `bertjax.sweep run`"
            )
    return optuna.create_study(
        storage=storage,
        study_name=name,
        direction=direction,
        sampler=sampler,
        pruner=pruner,
        load_if_exists=True,
    )


def load(url: str, name: str, *, heartbeat_s: int) -> tuple[optuna.Study, SweepDefinition]:
    """(study, definition) of the sweep `name` that `bertjax.sweep run` started at `url`."""
    study = open_study(
        open_storage(url, heartbeat_s=heartbeat_s), name, direction="maximize", create=False
    )  # the direction is the recorded one: Optuna reads it from the storage
    definition = recorded_sweep(study)
    if definition is None:
        raise QueueError(f"sweep {name!r} in {_redacted(url)}: never started by `run`")
    return study, definition


def record_sweep(study, definition: SweepDefinition) -> None:
    """Stores `definition` in `study`, in place of the one recorded before."""
    study.set_user_attr(SWEEP_ATTR, definition.to_json())


def recorded_sweep(study) -> SweepDefinition | None:
    """The definition that `record_sweep` stored in `study`; None if there is none."""
    value = study.user_attrs.get(SWEEP_ATTR)
    if value is None:
        return None
    try:
        return SweepDefinition.from_json(value)
    except hyper.SweepError as error:
        raise QueueError(
            f"sweep {study.study_name!r}: {error} (not recorded by this code's `bertjax.sweep run`)"
        ) from None


def trial_id(trial: optuna.Trial | optuna.trial.FrozenTrial) -> int:
    """The trial's id in its storage, which Optuna keeps private on both kinds of trial."""
    return trial._trial_id


def frozen_trial(study, trial: optuna.Trial) -> optuna.trial.FrozenTrial:
    """The trial as its storage has it now."""
    return _storage(study).get_trial(trial_id(trial))


def heartbeat(study, trial: optuna.Trial) -> None:
    """Records that the worker running `trial` is alive."""
    _storage(study).record_heartbeat(trial_id(trial))


@contextlib.contextmanager
def heartbeats(study, trial: optuna.Trial, interval_s: float):
    """Records `trial`'s heartbeats every `interval_s` from a thread of their own while the
    block runs, however long its worker takes to start, wait for or watch the run."""
    stop = threading.Event()

    def beat():
        while not stop.wait(interval_s):
            # A database busy or out of reach for a moment: the next beat may get through.
            with contextlib.suppress(_STORAGE_ERRORS):
                heartbeat(study, trial)

    thread = threading.Thread(target=beat, name=f"heartbeats of trial {trial.number}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _storage(study) -> optuna.storages.BaseStorage:
    return study._storage  # the study's own storage: Optuna gives no other handle


def enqueue(study, index: int, params: dict, *, attempt: int) -> None:
    study.enqueue_trial(
        params, user_attrs={"index": index, "keys": list(params), "attempt": attempt}
    )


def claim(study) -> optuna.Trial | None:
    """The queued trial of the lowest index (an interrupted one goes on before the trials
    after it start), now RUNNING and this worker's; None when none is queued.

    Two processes can queue one trial twice: `run` queues each trial it finds neither
    queued nor running while another process is between failing a gone worker's attempt
    and queueing it again. The copy taken second is dropped here, so a trial runs once."""
    storage = _storage(study)
    waiting = study.get_trials(deepcopy=False, states=(WAITING,))
    for frozen in sorted(waiting, key=lambda t: (t.user_attrs.get("index", 0), t.number)):
        if not _take_waiting(storage, trial_id(frozen)):
            continue  # another worker (or slot) took it first
        if _superseded(study, frozen):
            storage.set_trial_user_attr(trial_id(frozen), DUPLICATE_ATTR, True)
            storage.set_trial_state_values(trial_id(frozen), state=FAIL)
            continue
        return take(study, frozen)
    return None


def _take_waiting(storage, storage_id: int) -> bool:
    """Moves a WAITING trial to RUNNING in one conditional UPDATE; whether this call did.

    Optuna's set_trial_state_values reads the state, then writes it: on SQLite, whose
    transactions start at their first write, several workers (or slots of one) claiming
    one trial at once all read WAITING and all win, and the trial runs twice.
    `UPDATE ... WHERE state = WAITING` lets exactly one of them change the row."""
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    backend = getattr(storage, "_backend", storage)  # Optuna's cache passes writes through
    with _create_scoped_session(backend.scoped_session) as session:
        changed = (
            session.query(models.TrialModel)
            .filter(models.TrialModel.trial_id == storage_id)
            .filter(models.TrialModel.state == WAITING)
            .update(
                {"state": RUNNING, "datetime_start": datetime.datetime.now()},
                synchronize_session=False,
            )
        )
    return changed == 1


def _superseded(study, frozen) -> bool:
    """Whether another attempt of `frozen`'s trial has ended it (done or pruned), or is
    queued or running and came first."""
    index = frozen.user_attrs.get("index")
    for other in study.get_trials(deepcopy=False):
        if other.number == frozen.number or other.user_attrs.get("index") != index:
            continue
        if other.user_attrs.get(DUPLICATE_ATTR):
            continue
        if other.state in (COMPLETE, PRUNED):
            return True
        if other.state in (WAITING, RUNNING) and other.number < frozen.number:
            return True
    return False


def take(study, running: optuna.Trial | optuna.trial.FrozenTrial) -> optuna.Trial:
    """The RUNNING trial `running`, marked as this worker's, with a first heartbeat."""
    trial = optuna.Trial(study, trial_id(running))
    me = psutil.Process()
    trial.set_user_attr(
        "worker", {"host": socket.gethostname(), "pid": me.pid, "started": me.create_time()}
    )
    heartbeat(study, trial)
    return trial


def requeue(study, frozen, *, failed: bool) -> bool:
    """Queues `frozen`'s sweep trial again after a failure (`failed`: while attempts are
    left) or an interruption (the same attempt); False when none is left."""
    attrs = frozen.user_attrs
    attempt = attrs.get("attempt", 1) + int(failed)
    if failed and attempt > max_attempts(study):
        return False
    enqueue(study, attrs["index"], params_of(frozen), attempt=attempt)
    return True


def params_of(frozen) -> dict:
    """An attempt's config overrides: its parameters, or the queued values not yet taken."""
    values = {**frozen.system_attrs.get("fixed_params", {}), **frozen.params}
    return {k: values[k] for k in frozen.user_attrs.get("keys", values) if k in values}


def max_attempts(study) -> int:
    return 1 + recorded_sweep(study).max_retries


def end_interrupted(study, trial: optuna.Trial, why: str) -> None:
    """Ends an attempt stopped before its end and queues its trial again, to resume."""
    trial.set_user_attr("error", why)
    trial.set_user_attr("interrupted", True)
    study.tell(trial, state=FAIL)
    requeue(study, frozen_trial(study, trial), failed=False)


def fail_gone_workers(study) -> None:
    """Fails and queues again, to resume, the RUNNING attempts whose worker is gone: on
    this host, a process that has ended; anywhere, heartbeats older than the grace period,
    unless a live run on this machine holds the trial's workdir."""
    here = socket.gethostname()
    for frozen in study.get_trials(deepcopy=False, states=(RUNNING,)):
        worker = frozen.user_attrs.get("worker") or {}
        if worker.get("host") == here and not _alive(worker):
            _end_gone(study, trial_id(frozen), f"its worker (process {worker.get('pid')}) ended")
    for storage_id in _silent_trial_ids(study):
        if not _run_holds(_storage(study).get_trial(storage_id).user_attrs.get("workdir")):
            _end_gone(study, storage_id, "its worker's heartbeats stopped")


def _end_gone(study, storage_id: int, why: str) -> None:
    storage = _storage(study)
    try:
        storage.set_trial_user_attr(storage_id, "error", why)
        storage.set_trial_user_attr(storage_id, "interrupted", True)
        if not storage.set_trial_state_values(storage_id, state=FAIL):
            return
    except optuna.exceptions.UpdateFinishedTrialError:
        return  # another worker did it first
    requeue(study, storage.get_trial(storage_id), failed=False)


def _silent_trial_ids(study) -> list[int]:
    """The RUNNING attempts whose heartbeats are older than the grace period (Optuna's own
    check, which it keeps private; its public one fails them without a way to say why)."""
    return _storage(study)._get_stale_trial_ids(study._study_id)


def _run_holds(workdir: str | None) -> bool:
    """Whether a live run holds the lock of `workdir` (bertjax.workdir.claim), a local one.

    Probed with a shared lock, which no run takes: it fails while a run holds the
    exclusive one, and two workers probing at once do not fail each other. A run
    that tried to start in the instant of the probe would be turned away, but only
    a run of the silent attempt itself, which the probe then finds gone."""
    if not workdir or "://" in workdir:
        return False  # a workdir in a bucket has a lease, not a lock: heartbeats tell
    # Imported here, not at the top: only a silent trial needs it, and it loads JAX.
    from bertjax import workdir as workdir_lib

    try:
        fd = os.open(os.path.join(workdir, workdir_lib.LOCK_FILE), os.O_RDONLY)
    except OSError:
        return False  # no run has held it here
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False  # closing the file drops the shared lock again
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _alive(worker: dict) -> bool:
    try:
        process = psutil.Process(worker["pid"])
        return abs(process.create_time() - worker.get("started", 0)) < 1.0
    except (psutil.NoSuchProcess, KeyError, TypeError):
        return False


@dataclasses.dataclass
class TrialRecord:
    """A sweep trial as its attempts leave it."""

    index: int
    params: dict
    status: str  # done, pruned, running, queued, failed
    attempts: list  # FrozenTrials, oldest first

    @property
    def last(self):
        return self.attempts[-1]

    @property
    def seconds(self) -> float:
        total = 0.0
        for t in self.attempts:
            if t.datetime_start is not None:
                end = t.datetime_complete or t.datetime_start
                total += (end - t.datetime_start).total_seconds()
        return total


def records(study) -> list[TrialRecord]:
    by_index: dict[int, list] = {}
    for frozen in study.get_trials(deepcopy=False):
        if "index" in frozen.user_attrs and not frozen.user_attrs.get(DUPLICATE_ATTR):
            by_index.setdefault(frozen.user_attrs["index"], []).append(frozen)
    out = []
    for index, attempts in sorted(by_index.items()):
        attempts.sort(key=lambda t: t.number)
        states = {t.state for t in attempts}
        status = (
            "done"
            if COMPLETE in states
            else "pruned"
            if PRUNED in states
            else "running"
            if RUNNING in states
            else "queued"
            if WAITING in states
            else "failed"
        )
        out.append(TrialRecord(index, params_of(attempts[-1]), status, attempts))
    return out


def _redacted(url: str) -> str:
    """A database URL without its password."""
    head, at, tail = url.rpartition("@")
    if not at or ":" not in head.split("//", 1)[-1]:
        return url
    scheme, _, credentials = head.partition("//")
    return f"{scheme}//{credentials.split(':', 1)[0]}:***@{tail}"
