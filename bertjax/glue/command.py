r"""The paper's GLUE evaluation of a pretrained checkpoint, as one resumable sweep.

    python -m bertjax.glue run --init_checkpoint W --data_dir D|tfds --out OUT \
        [--tasks cola,sst2,mrpc,stsb,qqp,mnli,qnli,rte,wnli] \
        [--learning_rates 5e-5,4e-5,3e-5,2e-5] [--seeds N] [--parallel N] \
        [--storage URL] [--dry_run] [--config.KEY=VALUE ...]
    python -m bertjax.glue report OUT
    python -m bertjax.glue submit OUT
    python -m bertjax.glue sample DIR [--rows N]

run: every task x learning rate x seed (config.seed 0..N-1) is a trial of one
    bertjax.sweep sweep in OUT, on experiments/finetune/glue.py (batch 32, 3
    epochs: paper section 4.1); --config.KEY=VALUE overrides apply to every
    trial. Each trial fine-tunes W, scores the task's dev set (and MNLI's
    mismatched one) and predicts its test sets (bertjax.glue.trial). The data
    directory is checked first: a missing task folder or file is one line. The
    same command again resumes: finished trials are kept, stopped ones resume
    from their checkpoints. --parallel, --storage and `bertjax.sweep worker`
    (or `bertjax.launch sweep`) spread the trials as for any sweep. When every
    trial is done, it writes the report and the submission.
report: per task, the learning rate chosen on dev (the best median over seeds),
    the median and spread over seeds, the best run on dev, the GLUE score and
    the paper's average, beside the published numbers of a model of the same
    shape; OUT/report/ holds glue.md, glue.csv and a plot per task.
submit: the test predictions of each task's chosen run (its chosen learning
    rate, the seed best on dev) in OUT/submission/, checked against the test
    files as the GLUE server would, and zipped into OUT/submission.zip.

sample: writes a small folder in the layout of GLUE's download (every task,
    made-up labels: real in form only) to try the suite without the download.

--data_dir: GLUE's download as it unpacks (CoLA/train.tsv, MNLI/dev_matched.tsv,
    diagnostic/diagnostic.tsv, ...), local or gs://; or `tfds` for TFDS glue/*
    already prepared in TFDS_DATA_DIR (or --config.data.tfds_data_dir).
"""

import json
import os

from absl import flags
from ml_collections import config_flags

from bertjax.sweep import command as sweep_command
from bertjax.sweep import hyper
from bertjax.sweep.definition import SweepDefinition
from data_pipeline import files
from data_pipeline.errors import UserError

FLAGS = flags.FLAGS
SUBCOMMANDS = ("run", "report", "submit", "sample")
TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")
LEARNING_RATES = "5e-5,4e-5,3e-5,2e-5"  # paper section 4.1
CONFIG = os.path.join("experiments", "finetune", "glue.py")
PROGRAM = "bertjax.glue.trial"


class GlueError(UserError):
    """A GLUE suite that cannot run as asked."""


def define_flags() -> None:
    config_flags.DEFINE_config_file(
        "config",
        None,
        f"The fine-tuning config of every trial (default {CONFIG}).",
        lock_config=True,
    )
    flags.DEFINE_string("init_checkpoint", None, "The pretrained workdir to fine-tune.")
    flags.DEFINE_string("data_dir", None, "GLUE's download folder, or `tfds`.")
    flags.DEFINE_string("out", None, "Where the trials, report and submission go.")
    flags.DEFINE_list("tasks", list(TASKS), "GLUE tasks to run.")
    flags.DEFINE_list("learning_rates", LEARNING_RATES.split(","), "Chosen among on dev.")
    flags.DEFINE_integer("seeds", 1, "Runs of each task and learning rate (config.seed 0..N-1).")
    flags.DEFINE_integer("parallel", 1, "Trials at once on this machine.")
    flags.DEFINE_string("storage", "", "Database URL of the queue (default: OUT/sweep.db).")
    flags.DEFINE_string("study_name", "sweep", "The sweep's name in the database.")
    flags.DEFINE_integer("max_retries", 2, "Attempts after a trial's first failure.")
    flags.DEFINE_integer("heartbeat_s", 30, "Seconds between a worker's heartbeats.")
    flags.DEFINE_bool("dry_run", False, "Print the trials' commands; run nothing.")
    flags.DEFINE_integer("rows", 16, "sample: examples in each file.")


def with_default_config(argv: list[str], config: str = CONFIG) -> list[str]:
    """`argv` with --config=CONFIG (glue.py) added to a `run` that names no config. Added here
    rather than as the flag's default, which would load the config (and TensorFlow) for
    --help too; as a path from the working directory when it is in the checkout."""
    named = any(a.split("=", 1)[0] in ("--config", "-config") for a in argv[1:])
    positional = [a for a in argv[1:] if not a.startswith("-")]
    if positional[:1] != ["run"] or named:
        return argv
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), config)
    relative = os.path.relpath(path)
    # First: ml_collections takes --config.KEY=VALUE only after --config.
    return [argv[0], f"--config={relative if not relative.startswith('..') else path}", *argv[1:]]


def parse_tasks(names) -> tuple[str, ...]:
    tasks = tuple(name.strip().lower() for name in names if name.strip())
    for name in tasks:
        if name not in TASKS:
            raise GlueError(f"--tasks: unknown task {name!r}; the tasks: {','.join(TASKS)}")
    if not tasks:
        raise GlueError("--tasks: name one or more tasks")
    if len(set(tasks)) != len(tasks):
        raise GlueError(f"--tasks: a task is named twice: {','.join(tasks)}")
    return tasks


def parse_learning_rates(values) -> tuple[float, ...]:
    rates = []
    for value in values:
        try:
            rate = float(value)
        except ValueError:
            raise GlueError(f"--learning_rates: {value!r} is not a number") from None
        if not 0 < rate < float("inf"):
            raise GlueError(f"--learning_rates: {value} is not a positive learning rate")
        rates.append(rate)
    if not rates:
        raise GlueError("--learning_rates: name one or more")
    return tuple(rates)


def suite_sweep(tasks, learning_rates, seeds: int) -> hyper.Sweep:
    """The trials: task, then learning rate, then seed, the last varying fastest."""
    if seeds < 1:
        raise GlueError(f"--seeds={seeds}: must be at least 1")
    return hyper.product(
        [
            hyper.sweep("config.data.glue_task", tasks),
            hyper.sweep("config.optimizer.learning_rate", learning_rates),
            hyper.sweep("config.seed", list(range(seeds))),
        ]
    )


def check_data(data_config: dict, tasks) -> None:
    """Fails in one line on the first split the trials would read that is not there."""
    from bertjax.glue import predictions
    from data_pipeline.finetune import glue_files

    needed = [key for task in tasks for key in predictions.data_splits(task)]
    if data_config["glue_dir"]:
        by_task = {}
        for task, split in needed:
            by_task.setdefault(task, []).append(split)
        glue_files.check_data_dir(data_config["glue_dir"], by_task, splits_of=by_task.get)
        return
    from data_pipeline.finetune.records import TaskDataError, tfds_builder

    for task, split in needed:
        name = f"glue/{task}"
        tfds_split = "test" if task == "ax" else split.replace("dev", "validation")
        builder = tfds_builder(name, data_config["tfds_data_dir"])
        if tfds_split not in builder.info.splits:
            raise TaskDataError(
                f"TFDS dataset {name!r} (data_dir={str(builder.data_dir)!r}) has no split "
                f"{tfds_split!r}: prepare it with `tfds build {name}`"
            )


def suite_overrides() -> dict:
    """What every trial sets beyond its own task, rate and seed: the user's overrides,
    the init checkpoint and the data source."""
    overrides = dict(config_flags.get_override_values(FLAGS["config"]))
    # Absolute: the trials, a report from a notebook and `submit` may run elsewhere.
    overrides["init_checkpoint"] = absolute(FLAGS.init_checkpoint)
    overrides["data.glue_dir"] = "" if FLAGS.data_dir == "tfds" else absolute(FLAGS.data_dir)
    return overrides


def absolute(path: str) -> str:
    """A local path made absolute; a URL as it is."""
    return path if "://" in path else os.path.abspath(path)


def definition_from_flags() -> SweepDefinition:
    if FLAGS["config"].value is None:
        raise GlueError("run: --config is required")
    for name in ("init_checkpoint", "data_dir", "out"):
        if not FLAGS[name].value:
            raise GlueError(f"run: --{name} is required")
    tasks = parse_tasks(FLAGS.tasks)
    sweep = suite_sweep(tasks, parse_learning_rates(FLAGS.learning_rates), FLAGS.seeds)
    if FLAGS.parallel < 1:
        raise GlueError(f"--parallel={FLAGS.parallel}: must be at least 1")
    if FLAGS.max_retries < 0:
        raise GlueError(f"--max_retries={FLAGS.max_retries}: must be at least 0")
    overrides = suite_overrides()
    config = sweep_command.apply_overrides(FLAGS.config, overrides, "--config")
    if config.get("task") != "classification" or config.data.get("source") != "glue":
        raise GlueError(f"--config={FLAGS['config'].config_filename}: not a GLUE config")
    # Imported here: the GLUE readers load TensorFlow, which --help and a bad flag need not.
    from data_pipeline.finetune import glue_files

    if FLAGS.data_dir != "tfds" and not files.isdir(FLAGS.data_dir):
        raise GlueError(f"--data_dir={FLAGS.data_dir}: no such directory; {glue_files.HOW_TO_GET}")
    check_data(config.data.to_dict(), tasks)
    return suite_definition(config, overrides, sweep, metric="", program=PROGRAM)


def suite_definition(config, overrides: dict, sweep: hyper.Sweep, *, metric: str, program: str):
    """A suite's sweep (the GLUE suite's, the SQuAD suite's) from the flags they share,
    after checking the init checkpoint and every trial's config."""
    from bertjax import workdir as workdir_lib

    workdir_lib.require_model_config(FLAGS.init_checkpoint, what="--init_checkpoint")
    sweep_command.check_trials(config, sweep)
    return SweepDefinition(
        config=FLAGS["config"].config_filename,
        config_arg=None,
        overrides=overrides,
        trials=tuple(dict(t) for t in sweep.trials),
        space=dict(sweep.space),
        search="",
        num_trials=len(sweep.trials),
        metric=metric,
        mode="max",
        prune=False,
        max_retries=FLAGS.max_retries,
        sweep_dir=FLAGS.out,
        config_values=json.loads(config.to_json_best_effort()),
        program=program,
    )


def run_command() -> int | None:
    definition = definition_from_flags()
    status = sweep_command.run_command(definition, show_table=False, flag="--out")
    if FLAGS.dry_run:
        return status
    from bertjax.glue import report

    suite = report.load(definition.sweep_dir, FLAGS.storage, FLAGS.study_name)
    print(report.write(suite))
    unfinished = [t for t in suite.trials if t.status != "done"]
    if status or unfinished:
        print(f"{len(unfinished)} trial(s) not done: no submission until they are")
        return status
    return submit(suite)


def submit(suite) -> int | None:
    from bertjax.glue import report

    made = report.write_submission(suite)
    print(made.summary)
    return 1 if made.problems else None


def sample(folder: str) -> None:
    from data_pipeline.finetune import glue_sample

    if FLAGS.rows < 1:
        raise GlueError(f"--rows={FLAGS.rows}: must be at least 1")
    if os.path.exists(folder) and os.listdir(folder):
        raise GlueError(f"{folder}: not empty; name a new folder for the sample")
    glue_sample.write(folder, rows=FLAGS.rows)
    print(
        f"{folder}: GLUE's layout, {FLAGS.rows} made-up examples a file (real in form only: "
        "scores on it mean nothing)"
    )


def main(argv):
    if len(argv) < 2 or argv[1] not in SUBCOMMANDS:
        raise GlueError(f"name a subcommand: {', '.join(SUBCOMMANDS)}")
    subcommand, rest = argv[1], argv[2:]
    if subcommand == "run":
        if rest:
            raise GlueError(f"run: unexpected arguments: {' '.join(rest)}")
        return run_command()
    if len(rest) != 1:
        what = "a folder to write" if subcommand == "sample" else "the suite's folder (run's --out)"
        raise GlueError(f"{subcommand}: name {what}, once")
    out = rest[0]
    if subcommand == "sample":
        return sample(out)
    url = sweep_command.trial_queue.storage_url(out, FLAGS.storage)
    if not FLAGS.storage and not os.path.isfile(url[len("sqlite:///") :]):
        raise GlueError(f"{out}: not a GLUE suite folder (no sweep.db)")
    from bertjax.glue import report

    suite = report.load(out, FLAGS.storage, FLAGS.study_name)
    if subcommand == "report":
        print(report.write(suite))
        return None
    return submit(suite)
