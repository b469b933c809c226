r"""A benchmark as the paper evaluates a pretrained checkpoint on it, as one resumable sweep:
GLUE's nine tasks or SQuAD 1.1 and 2.0.

    python -m bertjax.suites glue run --init_checkpoint W --data_dir D|tfds --out OUT \
        [--tasks cola,sst2,mrpc,stsb,qqp,mnli,qnli,rte,wnli] \
        [--learning_rates 5e-5,4e-5,3e-5,2e-5] [--seeds N] [--parallel N] \
        [--storage URL] [--dry_run] [--config.KEY=VALUE ...]
    python -m bertjax.suites squad run --init_checkpoint W --data_dir D|tfds --out OUT \
        [--versions v1.1,v2.0] [--learning_rates 3e-5] [...the same]
    python -m bertjax.suites glue|squad report OUT
    python -m bertjax.suites glue submit OUT
    python -m bertjax.suites glue sample DIR [--rows N]

run: every part (GLUE task, SQuAD version) x learning rate x seed (config.seed
    0..N-1) is a trial of one bertjax.sweep sweep in OUT; --config.KEY=VALUE
    overrides apply to every trial. GLUE's trials run experiments/finetune/glue.py
    (batch 32, 3 epochs: paper section 4.1): each fine-tunes W, scores the task's
    dev set (and MNLI's mismatched one) and predicts its test sets
    (bertjax.suites.glue.trial). SQuAD's are bertjax.main runs of
    experiments/finetune/squad.py (the original repository's recipe: length 384,
    stride 128, 2 epochs, lr 3e-5; batch 32), scored on dev by the official rules
    of their version; a SQuAD 2.0 run also at the null-score threshold best on
    dev, as the original README chooses it with evaluate-v2.0.py. The data is
    checked first: a missing folder or file is one line. The same command again
    resumes: finished trials are kept, stopped ones resume from their
    checkpoints. --parallel, --storage and `bertjax.sweep worker` (or
    `bertjax.launch sweep`) spread the trials as for any sweep. It ends with the
    report and, for GLUE once every trial is done, the submission.
report: per part, the learning rate chosen on dev (the best median over seeds:
    GLUE's task score, SQuAD 1.1's F1, SQuAD 2.0's tuned F1), the median and spread
    over seeds, the best run on dev (GLUE: the GLUE score and the paper's average;
    SQuAD 2.0: the tuned scores and threshold), beside the published numbers of a
    model of the checkpoint's shape; OUT/report/ holds NAME.md, NAME.csv and, for
    GLUE, a plot per task.
submit: GLUE's test predictions of each task's chosen run (its chosen learning
    rate, the seed best on dev) in OUT/submission/, checked against the test
    files as the GLUE server would, and zipped into OUT/submission.zip.
sample: writes a small folder in the layout of GLUE's download (every task,
    made-up labels: real in form only) to try the suite without the download.

--data_dir: GLUE's download as it unpacks (CoLA/train.tsv, MNLI/dev_matched.tsv,
    diagnostic/diagnostic.tsv, ...), or SQuAD's official files under their own
    names (train-v1.1.json, dev-v1.1.json, train-v2.0.json, dev-v2.0.json), local
    or gs://; or `tfds` for TFDS glue/* or squad/v1.1 and squad/v2.0 already
    prepared in TFDS_DATA_DIR (or --config.data.tfds_data_dir).
"""

import json
import os

from absl import flags
from ml_collections import config_flags

from bertjax.suites import report
from bertjax.suites.glue.suite import GLUE
from bertjax.suites.squad import SQUAD
from bertjax.sweep import command as sweep_command
from bertjax.sweep import hyper
from bertjax.sweep.definition import SweepDefinition
from data_pipeline.errors import UserError

FLAGS = flags.FLAGS
SUITES = {kind.name: kind for kind in (GLUE, SQUAD)}


class SuiteError(UserError):
    """A suite that cannot run as asked."""


def define_flags() -> None:
    defaults = "; ".join(f"{k.name} {k.config}" for k in SUITES.values())
    config_flags.DEFINE_config_file(
        "config", None, f"The fine-tuning config of every trial (default: {defaults}).",
        lock_config=True,
    )  # fmt: skip
    flags.DEFINE_string("init_checkpoint", None, "The pretrained workdir to fine-tune.")
    flags.DEFINE_string("data_dir", None, "The suite's data folder, or `tfds`.")
    flags.DEFINE_string("out", None, "Where the trials, the report and a submission go.")
    for kind in SUITES.values():
        flags.DEFINE_list(
            kind.parts_flag, None, f"{kind.name}: the {kind.parts_flag} to run (default: all)."
        )
    rates = "; ".join(f"{k.name} {','.join(k.learning_rates)}" for k in SUITES.values())
    flags.DEFINE_list("learning_rates", None, f"Chosen among on dev (default: {rates}).")
    flags.DEFINE_integer("seeds", 1, "Runs of each part and learning rate (config.seed 0..N-1).")
    flags.DEFINE_integer("parallel", 1, "Trials at once on this machine.")
    flags.DEFINE_string("storage", "", "Database URL of the queue (default: OUT/sweep.db).")
    flags.DEFINE_string("study_name", "sweep", "The sweep's name in the database.")
    flags.DEFINE_integer("max_retries", 2, "Attempts after a trial's first failure.")
    flags.DEFINE_integer("heartbeat_s", 30, "Seconds between a worker's heartbeats.")
    flags.DEFINE_bool("dry_run", False, "Print the trials' commands; run nothing.")
    flags.DEFINE_integer("rows", 16, "sample: examples in each file.")


def with_default_config(argv: list[str]) -> list[str]:
    """`argv` with --config=CONFIG (the suite's) added to a `run` that names no config. Added
    here rather than as the flag's default, which would load the config (and TensorFlow) for
    --help too; as a path from the working directory when it is in the checkout."""
    named = any(a.split("=", 1)[0] in ("--config", "-config") for a in argv[1:])
    positional = [a for a in argv[1:] if not a.startswith("-")]
    if positional[1:2] != ["run"] or positional[0] not in SUITES or named:
        return argv
    config = SUITES[positional[0]].config
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), config)
    relative = os.path.relpath(path)
    # First: ml_collections takes --config.KEY=VALUE only after --config.
    return [argv[0], f"--config={relative if not relative.startswith('..') else path}", *argv[1:]]


def parse_parts(kind, names) -> tuple[str, ...]:
    """--tasks or --versions: the suite's parts named, in order."""
    flag = kind.parts_flag
    parts = tuple(name.strip().lower() for name in names if name.strip())
    for name in parts:
        if name not in kind.parts:
            raise SuiteError(
                f"--{flag}: unknown {kind.part} {name!r}; the {flag}: {','.join(kind.parts)}"
            )
    if not parts:
        raise SuiteError(f"--{flag}: name one or more {flag}")
    if len(set(parts)) != len(parts):
        raise SuiteError(f"--{flag}: a {kind.part} is named twice: {','.join(parts)}")
    return parts


def parse_learning_rates(values) -> tuple[float, ...]:
    rates = []
    for value in values:
        try:
            rate = float(value)
        except ValueError:
            raise SuiteError(f"--learning_rates: {value!r} is not a number") from None
        if not 0 < rate < float("inf"):
            raise SuiteError(f"--learning_rates: {value} is not a positive learning rate")
        rates.append(rate)
    if not rates:
        raise SuiteError("--learning_rates: name one or more")
    return tuple(rates)


def suite_sweep(part_trials: hyper.Sweep, learning_rates, seeds: int) -> hyper.Sweep:
    """The trials: part, then learning rate, then seed, the last varying fastest."""
    if seeds < 1:
        raise SuiteError(f"--seeds={seeds}: must be at least 1")
    return hyper.product(
        [
            part_trials,
            hyper.sweep("config.optimizer.learning_rate", learning_rates),
            hyper.sweep("config.seed", list(range(seeds))),
        ]
    )


def absolute(path: str) -> str:
    """A local path made absolute; a URL as it is."""
    return path if "://" in path else os.path.abspath(path)


def definition_from_flags(kind) -> SweepDefinition:
    """The suite's sweep, after checking the flags, the data, the init checkpoint and every
    trial's config."""
    if FLAGS["config"].value is None:
        raise SuiteError("run: --config is required")
    for name in ("init_checkpoint", "data_dir", "out"):
        if not FLAGS[name].value:
            raise SuiteError(f"run: --{name} is required")
    given = FLAGS[kind.parts_flag].value
    parts = parse_parts(kind, kind.parts if given is None else given)
    given_rates = FLAGS.learning_rates
    rates = parse_learning_rates(kind.learning_rates if given_rates is None else given_rates)
    data_dir = FLAGS.data_dir if FLAGS.data_dir == "tfds" else absolute(FLAGS.data_dir)
    sweep = suite_sweep(kind.part_trials(parts, data_dir), rates, FLAGS.seeds)
    if FLAGS.parallel < 1:
        raise SuiteError(f"--parallel={FLAGS.parallel}: must be at least 1")
    if FLAGS.max_retries < 0:
        raise SuiteError(f"--max_retries={FLAGS.max_retries}: must be at least 0")
    overrides = dict(config_flags.get_override_values(FLAGS["config"]))
    # Absolute: the trials, a report from a notebook and `submit` may run elsewhere.
    overrides["init_checkpoint"] = absolute(FLAGS.init_checkpoint)
    overrides.update(kind.data_overrides(data_dir))
    config = sweep_command.apply_overrides(FLAGS.config, overrides, "--config")
    if not kind.is_config(config):
        raise SuiteError(f"--config={FLAGS['config'].config_filename}: not a {kind.title} config")
    kind.check_data(FLAGS.data_dir, config.data.to_dict(), parts)
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
        metric=kind.metric,
        mode="max",
        prune=False,
        max_retries=FLAGS.max_retries,
        sweep_dir=FLAGS.out,
        config_values=json.loads(config.to_json_best_effort()),
        program=kind.program,
    )


def run_command(kind) -> int | None:
    definition = definition_from_flags(kind)
    status = sweep_command.run_command(definition, show_table=False, flag="--out")
    if FLAGS.dry_run:
        return status
    suite = report.load(kind, definition.sweep_dir, FLAGS.storage, FLAGS.study_name)
    print(report.write(suite))
    if kind.submit is None:
        return status
    unfinished = [t for t in suite.trials if t.status != "done"]
    if status or unfinished:
        print(f"{len(unfinished)} trial(s) not done: no submission until they are")
        return status
    return submit(suite)


def submit(suite) -> int | None:
    made = suite.kind.submit(suite)
    print(made.summary)
    return 1 if made.problems else None


def sample(kind, folder: str) -> None:
    if FLAGS.rows < 1:
        raise SuiteError(f"--rows={FLAGS.rows}: must be at least 1")
    if os.path.exists(folder) and os.listdir(folder):
        raise SuiteError(f"{folder}: not empty; name a new folder for the sample")
    kind.write_sample(folder, FLAGS.rows)
    print(
        f"{folder}: {kind.title}'s layout, {FLAGS.rows} made-up examples a file (real in form "
        "only: scores on it mean nothing)"
    )


def main(argv):
    kind = SUITES.get(argv[1]) if len(argv) > 1 else None
    if kind is None:
        raise SuiteError(f"name a suite: {', '.join(SUITES)}")
    for other in SUITES.values():
        if other is not kind and FLAGS[other.parts_flag].present:
            raise SuiteError(
                f"--{other.parts_flag}: a flag of the {other.name} suite, not {kind.name}"
            )
    subcommands = ["run", "report"] + ["submit"] * bool(kind.submit)
    subcommands += ["sample"] * bool(kind.write_sample)
    if len(argv) < 3 or argv[2] not in subcommands:
        raise SuiteError(f"name a subcommand: {', '.join(subcommands)}")
    subcommand, rest = argv[2], argv[3:]
    if subcommand == "run":
        if rest:
            raise SuiteError(f"run: unexpected arguments: {' '.join(rest)}")
        return run_command(kind)
    if len(rest) != 1:
        what = "a folder to write" if subcommand == "sample" else "the suite's folder (run's --out)"
        raise SuiteError(f"{subcommand}: name {what}, once")
    out = rest[0]
    if subcommand == "sample":
        return sample(kind, out)
    url = sweep_command.trial_queue.storage_url(out, FLAGS.storage)
    if not FLAGS.storage and not os.path.isfile(url[len("sqlite:///") :]):
        raise SuiteError(f"{out}: not a {kind.title} suite folder (no sweep.db)")
    suite = report.load(kind, out, FLAGS.storage, FLAGS.study_name)
    if subcommand == "report":
        print(report.write(suite))
        return None
    return submit(suite)
