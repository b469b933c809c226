r"""SQuAD 1.1 and 2.0 fine-tuning of a pretrained checkpoint, with seeds, as one resumable sweep.

    python -m bertjax.squad_suite run --init_checkpoint W --data_dir D|tfds --out OUT \
        [--versions v1.1,v2.0] [--learning_rates 3e-5] [--seeds N] [--parallel N] \
        [--storage URL] [--dry_run] [--config.KEY=VALUE ...]
    python -m bertjax.squad_suite report OUT

run: every version x learning rate x seed (config.seed 0..N-1) is a trial of
    one bertjax.sweep sweep in OUT, on experiments/finetune/squad.py (the
    original repository's recipe: length 384, stride 128, 2 epochs, lr 3e-5;
    batch 32); --config.KEY=VALUE overrides apply to every trial. Each trial
    is a bertjax.main fine-tuning run scored on dev by the official rules of its
    version; a SQuAD 2.0 run also at the null-score threshold best on dev, as
    the original README chooses it with evaluate-v2.0.py. The data is checked
    first; the same command again resumes. --parallel, --storage and
    `bertjax.sweep worker` spread the trials as for any sweep. It ends with the
    report.
report: per version, the learning rate chosen on dev (the best median F1
    over seeds), the median and spread over seeds, the best run, and SQuAD
    2.0's tuned scores and threshold, beside the paper's numbers for a model of
    the checkpoint's shape; OUT/report/squad.md and squad.csv.

--data_dir: the official files under their own names (train-v1.1.json,
    dev-v1.1.json, train-v2.0.json, dev-v2.0.json), local or gs://; or `tfds` for
    TFDS squad/v1.1 and squad/v2.0 already prepared.
"""

import os

from absl import flags
from ml_collections import config_flags

from bertjax.glue import command as glue_command
from bertjax.sweep import command as sweep_command
from bertjax.sweep import hyper
from data_pipeline import files
from data_pipeline.errors import UserError

FLAGS = flags.FLAGS
SUBCOMMANDS = ("run", "report")
VERSIONS = ("v1.1", "v2.0")
CONFIG = os.path.join("experiments", "finetune", "squad.py")
# The official files' names.
FILES = {version: (f"train-{version}.json", f"dev-{version}.json") for version in VERSIONS}
HOW_TO_GET = (
    "the official files are at rajpurkar.github.io/SQuAD-explorer; or read TFDS "
    "squad/v1.1 and squad/v2.0 with --data_dir tfds"
)


class SquadSuiteError(UserError):
    """A SQuAD suite that cannot run as asked."""


def with_default_config(argv: list[str]) -> list[str]:
    return glue_command.with_default_config(argv, CONFIG)


def define_flags() -> None:
    config_flags.DEFINE_config_file(
        "config", None, f"The fine-tuning config of every trial (default {CONFIG}).",
        lock_config=True,
    )  # fmt: skip
    flags.DEFINE_string("init_checkpoint", None, "The pretrained workdir to fine-tune.")
    flags.DEFINE_string("data_dir", None, "The official SQuAD files' folder, or `tfds`.")
    flags.DEFINE_string("out", None, "Where the trials and the report go.")
    flags.DEFINE_list("versions", list(VERSIONS), "SQuAD versions to run.")
    flags.DEFINE_list("learning_rates", ["3e-5"], "Chosen among on dev.")
    flags.DEFINE_integer("seeds", 1, "Runs of each version and learning rate (config.seed 0..N-1).")
    flags.DEFINE_integer("parallel", 1, "Trials at once on this machine.")
    flags.DEFINE_string("storage", "", "Database URL of the queue (default: OUT/sweep.db).")
    flags.DEFINE_string("study_name", "sweep", "The sweep's name in the database.")
    flags.DEFINE_integer("max_retries", 2, "Attempts after a trial's first failure.")
    flags.DEFINE_integer("heartbeat_s", 30, "Seconds between a worker's heartbeats.")
    flags.DEFINE_bool("dry_run", False, "Print the trials' commands; run nothing.")


def parse_versions(names) -> tuple[str, ...]:
    versions = tuple(name.strip() for name in names if name.strip())
    for name in versions:
        if name not in VERSIONS:
            raise SquadSuiteError(f"--versions: unknown version {name!r}; the versions: v1.1,v2.0")
    if not versions:
        raise SquadSuiteError("--versions: name v1.1, v2.0 or both")
    if len(set(versions)) != len(versions):
        raise SquadSuiteError(f"--versions: a version is named twice: {','.join(versions)}")
    return versions


def version_trials(versions, data_dir: str) -> hyper.Sweep:
    """One trial per version: what tells SQuAD 2.0 from 1.1 in the config, and its data."""
    parts = [
        hyper.sweep("config.data.version_2_with_negative", [v == "v2.0" for v in versions]),
        hyper.sweep("config.data.tfds_name", [f"squad/{v}" for v in versions]),
    ]
    if data_dir != "tfds":
        for key, position in (("train_file", 0), ("eval_file", 1)):
            paths = [os.path.join(data_dir, FILES[v][position]) for v in versions]
            parts.append(hyper.sweep(f"config.data.{key}", paths))
    return hyper.zipit(parts)


def suite_sweep(versions, learning_rates, seeds: int, data_dir: str) -> hyper.Sweep:
    """The trials: version, then learning rate, then seed, the last varying fastest."""
    if seeds < 1:
        raise SquadSuiteError(f"--seeds={seeds}: must be at least 1")
    return hyper.product(
        [
            version_trials(versions, data_dir),
            hyper.sweep("config.optimizer.learning_rate", learning_rates),
            hyper.sweep("config.seed", list(range(seeds))),
        ]
    )


def check_data(data_dir: str, versions, tfds_data_dir: str) -> None:
    """Fails in one line on the first file or TFDS split a trial would read that is missing."""
    if data_dir != "tfds":
        if not files.isdir(data_dir):
            raise SquadSuiteError(f"--data_dir={data_dir}: no such directory; {HOW_TO_GET}")
        for version in versions:
            for name in FILES[version]:
                path = os.path.join(data_dir, name)
                if not files.exists(path):
                    raise SquadSuiteError(f"{path}: missing, for SQuAD {version}; {HOW_TO_GET}")
        return
    from data_pipeline.finetune.records import TaskDataError, tfds_builder

    for version in versions:
        name = f"squad/{version}"
        builder = tfds_builder(name, tfds_data_dir)
        for split in ("train", "validation"):
            if split not in builder.info.splits:
                raise TaskDataError(
                    f"TFDS dataset {name!r} (data_dir={str(builder.data_dir)!r}) has no split "
                    f"{split!r}: prepare it with `tfds build {name}`"
                )


def definition_from_flags():
    if FLAGS["config"].value is None:
        raise SquadSuiteError("run: --config is required")
    for name in ("init_checkpoint", "data_dir", "out"):
        if not FLAGS[name].value:
            raise SquadSuiteError(f"run: --{name} is required")
    versions = parse_versions(FLAGS.versions)
    rates = glue_command.parse_learning_rates(FLAGS.learning_rates)
    data_dir = FLAGS.data_dir if FLAGS.data_dir == "tfds" else glue_command.absolute(FLAGS.data_dir)
    sweep = suite_sweep(versions, rates, FLAGS.seeds, data_dir)
    if FLAGS.parallel < 1:
        raise SquadSuiteError(f"--parallel={FLAGS.parallel}: must be at least 1")
    if FLAGS.max_retries < 0:
        raise SquadSuiteError(f"--max_retries={FLAGS.max_retries}: must be at least 0")
    overrides = dict(config_flags.get_override_values(FLAGS["config"]))
    overrides["init_checkpoint"] = glue_command.absolute(FLAGS.init_checkpoint)
    overrides["data.source"] = "tfds" if data_dir == "tfds" else "files"
    config = sweep_command.apply_overrides(FLAGS.config, overrides, "--config")
    if config.get("task") != "squad":
        raise SquadSuiteError(f"--config={FLAGS['config'].config_filename}: not a SQuAD config")
    check_data(data_dir, versions, config.data.tfds_data_dir)
    return glue_command.suite_definition(
        config, overrides, sweep, metric="f1", program="bertjax.main"
    )


def main(argv):
    if len(argv) < 2 or argv[1] not in SUBCOMMANDS:
        raise SquadSuiteError(f"name a subcommand: {', '.join(SUBCOMMANDS)}")
    subcommand, rest = argv[1], argv[2:]
    from bertjax.squad_suite import report

    if subcommand == "run":
        if rest:
            raise SquadSuiteError(f"run: unexpected arguments: {' '.join(rest)}")
        definition = definition_from_flags()
        status = sweep_command.run_command(definition, show_table=False, flag="--out")
        if FLAGS.dry_run:
            return status
        print(report.write(report.load(definition.sweep_dir, FLAGS.storage, FLAGS.study_name)))
        return status
    if len(rest) != 1:
        raise SquadSuiteError("report: name the suite's folder (run's --out), once")
    url = sweep_command.trial_queue.storage_url(rest[0], FLAGS.storage)
    if not FLAGS.storage and not os.path.isfile(url[len("sqlite:///") :]):
        raise SquadSuiteError(f"{rest[0]}: not a SQuAD suite folder (no sweep.db)")
    print(report.write(report.load(rest[0], FLAGS.storage, FLAGS.study_name)))
    return None
