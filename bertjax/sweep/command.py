r"""Hyperparameter sweeps: the trials an experiment config's `get_hyper(hyper)` defines, run
and reported.

    python -m bertjax.sweep run --config FILE[:ARG] --sweep_dir DIR [--parallel N] \
        [--search tpe|random --num_trials K] [--prune] [--metric NAME --mode max|min] \
        [--max_retries R] [--storage URL] [--dry_run] [--config.KEY=VALUE ...]
    python -m bertjax.sweep worker --storage URL --study_name NAME [--parallel N]
    python -m bertjax.sweep report DIR [DIR ...] [--metric NAME --mode max|min]

run: checks every trial's overrides against the config (an unknown key, a
    wrong type or a bad value is one line naming the trial and the key) before
    any trial starts, records the sweep in its queue (Optuna, bertjax.sweep.trial_queue:
    DIR/sweep.db, or --storage), queues the trials not yet done and works
    through them, --parallel at a time (bertjax.sweep.worker). Each trial is a
    `bertjax.main` run in DIR/trials/NNN-NAME. Running the same command again
    skips the trials that are done, resumes interrupted ones from their
    checkpoints and gives failed ones --max_retries more attempts; a different
    sweep (another config, overrides, trials or metric) in the same DIR is
    refused. Ctrl-C or SIGTERM stops every trial in progress with a checkpoint
    (exit status 75). --search tpe|random draws --num_trials trials from the
    sweep's space (hyper.py) instead of running its list; --prune stops trials
    whose evaluations fall below the median of the others' at the same step.
    --dry_run prints the trials' commands and runs nothing.
worker: takes trials from a sweep that `run` started, until none is left:
    more machines for one sweep, sharing a database server (--storage) and, for
    the trials' workdirs, a bucket (`run --sweep_dir gs://...`).
report: the table of every trial (bertjax.sweep.report), written with plots to
    DIR/report/.

The metric is each run's eval value of --metric (default: the metric its task
ranks checkpoints by, such as accuracy for classification and loss for
pretraining) at the end of the run.
"""

import copy
import importlib.util
import inspect
import json
import os
import sys

import ml_collections
from absl import flags
from ml_collections import config_flags

from bertjax.sweep import hyper, trial_queue
from bertjax.sweep import worker as worker_lib
from bertjax.sweep.definition import SweepDefinition
from data_pipeline import config as config_lib
from data_pipeline.errors import UserError

FLAGS = flags.FLAGS
SUBCOMMANDS = ("run", "worker", "report")
# What may differ when the same sweep is run again.
MAY_CHANGE = ("max_retries", "prune", "sweep_dir")


class SweepError(UserError):
    """A sweep that cannot run as asked."""


def define_flags() -> None:
    config_flags.DEFINE_config_file("config", None, "Experiment config file.", lock_config=True)
    flags.DEFINE_string("sweep_dir", None, "Directory of the sweep: its trials' workdirs.")
    flags.DEFINE_integer("parallel", 1, "Trials at once on this machine.")
    flags.DEFINE_string("storage", "", "Database URL of the queue (default: DIR/sweep.db).")
    flags.DEFINE_string("study_name", "sweep", "The sweep's name in the database.")
    flags.DEFINE_enum("search", "", ["", "tpe", "random"], "Search the space instead.")
    flags.DEFINE_integer("num_trials", 0, "Trials of a --search.")
    flags.DEFINE_bool("prune", False, "Stop trials whose evaluations trail the median.")
    flags.DEFINE_string("metric", "", "Eval metric (default: the task's own).")
    flags.DEFINE_enum("mode", "", ["", "max", "min"], "Whether higher metric is better.")
    flags.DEFINE_integer("max_retries", 2, "Attempts after a trial's first failure.")
    flags.DEFINE_integer("heartbeat_s", 30, "Seconds between a worker's heartbeats.")
    flags.DEFINE_bool("dry_run", False, "Print the trials' commands; run nothing.")


def load_sweep(config_file: str, config_arg: str | None) -> hyper.Sweep:
    """The Sweep that `get_hyper(hyper[, arg])` in `config_file` returns."""
    spec = importlib.util.spec_from_file_location("bertjax_sweep_config", config_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    get_hyper = getattr(module, "get_hyper", None)
    if get_hyper is None and hasattr(module, "get_sweep"):
        raise SweepError(
            f"{config_file}: get_sweep(h) is now get_hyper(hyper), as in big_vision: rename it "
            "and write hyper.product([...]), hyper.zipit([...]), hyper.chainit([...]) with keys "
            '"config.KEY"'
        )
    if get_hyper is None:
        raise SweepError(f"{config_file}: defines no get_hyper(hyper) beside get_config()")
    takes_arg = len(inspect.signature(get_hyper).parameters) > 1
    try:
        if config_arg is not None and takes_arg:
            return hyper.as_sweep(get_hyper(hyper, config_arg))
        return hyper.as_sweep(get_hyper(hyper))
    except hyper.SweepError as error:
        raise SweepError(f"{config_file}: get_hyper: {error}") from None


def apply_overrides(config: ml_collections.ConfigDict, overrides: dict, where: str):
    """A copy of `config` with each dotted key set; SweepError names `where` and the key."""
    config = copy.deepcopy(config)
    for key, value in overrides.items():
        node, path = config, key.split(".")
        for depth, part in enumerate(path):
            prefix = ".".join(["config", *path[:depth]])
            if not isinstance(node, ml_collections.ConfigDict):
                raise SweepError(f"{where}: config.{key}: {prefix} is a value, not a group")
            try:
                config_lib.check_known_keys([part], node.keys(), prefix)
            except config_lib.ConfigError as error:
                raise SweepError(f"{where}: {error}") from None
            if depth < len(path) - 1:
                node = node[part]
        try:
            node[path[-1]] = value
        except (TypeError, ValueError) as error:
            raise SweepError(f"{where}: config.{key}={value!r}: {error}") from None
    return config


def check_trials(config, sweep: hyper.Sweep) -> None:
    """Every trial's config, checked as a run would check it before reading data."""
    trial_configs = []
    for index, overrides in enumerate(sweep.trials):
        where = f"trial {index} ({worker_lib.trial_name(index, overrides)})"
        trial_configs.append((where, apply_overrides(config, overrides, where)))
    # Imported after every trial's keys are checked: a misspelt key answers in a fraction
    # of a second, before TensorFlow and JAX load.
    from bertjax import train

    for where, trial_config in trial_configs:
        try:
            train.check_config(trial_config.copy_and_resolve_references())
        except UserError as error:
            raise SweepError(f"{where}: {error}") from None


def definition_from_flags() -> SweepDefinition:
    """The sweep as `run` is asked for it, every trial checked."""
    config_flag = FLAGS["config"]
    config_file, _, arg = config_flag.config_filename.partition(":")
    config_arg = arg if _ else None
    sweep = load_sweep(config_file, config_arg)
    if not sweep.trials:
        raise SweepError(f"{config_file}: get_hyper returned no trials")
    if FLAGS.search and FLAGS.num_trials < 1:
        raise SweepError(f"--search={FLAGS.search} needs --num_trials of 1 or more")
    if FLAGS.parallel < 1:
        raise SweepError(f"--parallel={FLAGS.parallel}: must be at least 1")
    if FLAGS.max_retries < 0:
        raise SweepError(f"--max_retries={FLAGS.max_retries}: must be at least 0")
    if FLAGS.metric and not FLAGS.mode:
        raise SweepError(f"--metric={FLAGS.metric} needs --mode=max or --mode=min")
    config = FLAGS.config
    check_trials(config, sweep)
    overrides = dict(config_flags.get_override_values(config_flag))
    return SweepDefinition(
        config=config_file,
        config_arg=config_arg,
        overrides=overrides,
        trials=tuple(dict(t) for t in sweep.trials),
        space=dict(sweep.space),
        search=FLAGS.search,
        num_trials=FLAGS.num_trials if FLAGS.search else len(sweep.trials),
        metric=FLAGS.metric,
        mode=FLAGS.mode or default_mode(config),
        prune=FLAGS.prune,
        max_retries=FLAGS.max_retries,
        sweep_dir=FLAGS.sweep_dir,
        config_values=json.loads(config.to_json_best_effort()),
    )


def default_mode(config) -> str:
    """Without --metric: the direction of the metric the config's task ranks runs by
    (pretraining: the lowest loss; fine-tuning: the highest score)."""
    from bertjax import tasks

    return "max" if tasks.for_config(config).best_metric(config).higher_is_better else "min"


def check_same_sweep(
    recorded: SweepDefinition, asked: SweepDefinition, sweep_dir: str, flag: str = "--sweep_dir"
) -> None:
    """SweepError unless `asked` is the `recorded` sweep, but for what MAY_CHANGE; `flag`
    is the option that names the directory."""
    recorded_json, asked_json = recorded.to_json(), asked.to_json()
    for key, value in asked_json.items():
        if key in MAY_CHANGE or recorded_json[key] == value:
            continue
        differences = _differences(recorded_json[key], value, key)
        shown = ", ".join(
            f"its {name} was {_short(before)}, now {_short(now)}"
            for name, before, now in differences[:3]
        )
        more = f" and {len(differences) - 3} more" if len(differences) > 3 else ""
        raise SweepError(
            f"{sweep_dir}: holds another sweep: {shown}{more}; "
            f"use another {flag} (or the same command as before)"
        )


_ABSENT = object()


def _differences(before, now, name: str) -> list[tuple[str, object, object]]:
    """(dotted name, before, now) of each value that differs, mappings (the overrides, the
    config's values) compared key by key: each shown whole, it would be cut short where
    both read alike, before the key that differs."""
    if not (isinstance(before, dict) and isinstance(now, dict)):
        return [(name, before, now)]
    return [
        difference
        for key in sorted(before.keys() | now.keys())
        if before.get(key, _ABSENT) != now.get(key, _ABSENT)
        for difference in _differences(
            before.get(key, _ABSENT), now.get(key, _ABSENT), f"{name}.{key}"
        )
    ]


def _short(value) -> str:
    if value is _ABSENT:
        return "(none)"
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 200 else text[:200] + "..."


def open_sweep(definition: SweepDefinition, storage_url: str):
    """The sweep's study, created if new, with its sampler and pruner."""
    storage = trial_queue.open_storage(storage_url, heartbeat_s=FLAGS.heartbeat_s)
    return trial_queue.open_study(
        storage,
        FLAGS.study_name,
        direction="maximize" if definition.mode == "max" else "minimize",
        create=True,
        sampler=make_sampler(definition.search),
        pruner=make_pruner(definition.prune),
    )


def make_sampler(search: str):
    import optuna

    if search == "tpe":
        return optuna.samplers.TPESampler(seed=0)
    return optuna.samplers.RandomSampler(seed=0)  # a grid: every value is queued


def make_pruner(prune: bool):
    import optuna

    if not prune:
        return optuna.pruners.NopPruner()
    # The median of the other trials' evaluations at the same step, once two have some.
    return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)


def queue_unfinished(study, definition: SweepDefinition) -> int:
    """Queues each grid trial that is not done, queued or running; how many it queued."""
    trial_queue.fail_gone_workers(study)
    if definition.search:
        return 0
    busy = {
        r.index
        for r in trial_queue.records(study)
        if r.status in ("done", "pruned", "queued", "running")
    }
    queued = 0
    for index, overrides in enumerate(definition.trials):
        if index not in busy:
            trial_queue.enqueue(study, index, overrides, attempt=1)
            queued += 1
    return queued


def run_command(
    definition: SweepDefinition, *, show_table: bool = True, flag: str = "--sweep_dir"
) -> int | None:
    sweep_dir = definition.sweep_dir
    if FLAGS.dry_run:
        for index, overrides in enumerate(definition.trials):
            workdir = os.path.join(sweep_dir, "trials", worker_lib.trial_name(index, overrides))
            print(" ".join(worker_lib.trial_command(definition, workdir, overrides)))
        return None
    if "://" not in sweep_dir:
        os.makedirs(sweep_dir, exist_ok=True)
    study = open_sweep(definition, trial_queue.storage_url(sweep_dir, FLAGS.storage))
    recorded = trial_queue.recorded_sweep(study)
    if recorded is not None:
        check_same_sweep(recorded, definition, sweep_dir, flag)
    trial_queue.record_sweep(study, definition)
    queued = queue_unfinished(study, definition)
    print(f"sweep {sweep_dir}: {len(definition.trials)} trial(s), {queued} queued now")
    return work(study, definition, show_table=show_table)


def work(study, definition: SweepDefinition, *, show_table: bool = True) -> int | None:
    """Runs trials until none is left; prints the table of every trial (`show_table`:
    a caller with a report of its own prints that instead)."""
    from bertjax.sweep import report

    worker = worker_lib.Worker(
        study, definition, parallel=FLAGS.parallel, heartbeat_s=FLAGS.heartbeat_s
    )
    worker.run()
    rows = report.rows(study, definition)
    if show_table:
        print(report.table(rows, definition))
    failed = [r for r in rows if r["status"] == "failed"]
    if failed:
        print(
            f"error: {len(failed)} trial(s) failed after every attempt; see their logs in "
            f"{os.path.join(definition.sweep_dir, 'trials')} and run the same command "
            "to try them again",
            file=sys.stderr,
        )
        return 1
    return None


def worker_command() -> int | None:
    if not FLAGS.storage:
        raise SweepError("worker: --storage is required (the URL the sweep's `run` used)")
    study, definition = trial_queue.load(
        FLAGS.storage, FLAGS.study_name, heartbeat_s=FLAGS.heartbeat_s
    )
    if not os.path.isfile(definition.config):
        raise SweepError(
            f"{definition.config}: no such file here; start the worker in a checkout of "
            "the same code as the sweep's"
        )
    study.sampler = make_sampler(definition.search)
    study.pruner = make_pruner(definition.prune)
    return work(study, definition)


def report_command(sweep_dirs: list[str]) -> int | None:
    if not sweep_dirs:
        raise SweepError("report: name one or more sweep directories")
    for sweep_dir in sweep_dirs:
        url = trial_queue.storage_url(sweep_dir, FLAGS.storage)
        if not FLAGS.storage and not os.path.isfile(url[len("sqlite:///") :]):
            raise SweepError(f"{sweep_dir}: not a sweep directory (no sweep.db)")
    from bertjax.sweep import report

    print(report.report(sweep_dirs, FLAGS.storage, FLAGS.study_name, FLAGS.metric, FLAGS.mode))
    return None


def main(argv):
    if len(argv) < 2 or argv[1] not in SUBCOMMANDS:
        raise SweepError(f"name a subcommand: {', '.join(SUBCOMMANDS)}")
    subcommand, rest = argv[1], argv[2:]
    if subcommand == "report":
        return report_command(rest)
    if rest:
        raise SweepError(f"{subcommand}: unexpected arguments: {' '.join(rest)}")
    if subcommand == "worker":
        return worker_command()
    if FLAGS["config"].value is None or not FLAGS.sweep_dir:
        raise SweepError("run: --config and --sweep_dir are required")
    return run_command(definition_from_flags())
