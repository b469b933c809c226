"""bertjax.glue's command line without running a suite: --tasks and --learning_rates
parsed and refused in one line, the suite's trials in their order, and the default
--config added to `run` alone."""

import os

import pytest

from bertjax.glue import command
from bertjax.sweep import hyper
from data_pipeline.errors import UserError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


def test_tasks_are_lowercased_stripped_and_kept_in_order():
    assert command.parse_tasks(["RTE", " mrpc ", "", "MNLI"]) == ("rte", "mrpc", "mnli")
    assert command.parse_tasks(list(command.TASKS)) == command.TASKS


@pytest.mark.parametrize(
    "names, message",
    [
        (["rte", "squad"], r"^--tasks: unknown task 'squad'; the tasks: cola,sst2,mrpc,.*,wnli$"),
        (["ax"], r"^--tasks: unknown task 'ax'"),
        ([], r"^--tasks: name one or more tasks$"),
        (["", " "], r"^--tasks: name one or more tasks$"),
        (["rte", "cola", "RTE"], r"^--tasks: a task is named twice: rte,cola,rte$"),
    ],
    ids=["unknown", "ax", "none", "blank", "twice"],
)
def test_bad_tasks_are_one_line_errors(names, message):
    with pytest.raises(command.GlueError, match=message) as error:
        command.parse_tasks(names)
    assert "\n" not in str(error.value)
    assert isinstance(error.value, UserError)


def test_learning_rates_are_parsed_in_order():
    assert command.parse_learning_rates(["5e-5", "0.00002", " 3e-5"]) == (5e-5, 2e-5, 3e-5)
    assert command.parse_learning_rates(command.LEARNING_RATES.split(",")) == (
        5e-5, 4e-5, 3e-5, 2e-5,
    )  # fmt: skip


@pytest.mark.parametrize(
    "values, message",
    [
        (["5e-5", "fast"], r"^--learning_rates: 'fast' is not a number$"),
        (["0"], r"^--learning_rates: 0 is not a positive learning rate$"),
        (["-2e-5"], r"^--learning_rates: -2e-5 is not a positive learning rate$"),
        (["inf"], r"^--learning_rates: inf is not a positive learning rate$"),
        (["nan"], r"^--learning_rates: nan is not a positive learning rate$"),
        ([], r"^--learning_rates: name one or more$"),
    ],
    ids=["word", "zero", "negative", "inf", "nan", "none"],
)
def test_bad_learning_rates_are_one_line_errors(values, message):
    with pytest.raises(command.GlueError, match=message) as error:
        command.parse_learning_rates(values)
    assert "\n" not in str(error.value)


def test_the_suite_runs_each_task_then_rate_then_seed():
    sweep = command.suite_sweep(("rte", "mrpc"), (3e-5, 2e-5), 2)
    assert [tuple(t.values()) for t in sweep.trials] == [
        ("rte", 3e-5, 0), ("rte", 3e-5, 1), ("rte", 2e-5, 0), ("rte", 2e-5, 1),
        ("mrpc", 3e-5, 0), ("mrpc", 3e-5, 1), ("mrpc", 2e-5, 0), ("mrpc", 2e-5, 1),
    ]  # fmt: skip
    assert all(list(t) == ["data.glue_task", "optimizer.learning_rate", "seed"] for t in sweep)
    assert sweep.space == {
        "data.glue_task": hyper.Choice(("rte", "mrpc")),
        "optimizer.learning_rate": hyper.Choice((3e-5, 2e-5)),
        "seed": hyper.Choice((0, 1)),
    }


def test_one_seed_is_seed_zero():
    sweep = command.suite_sweep(("cola",), (5e-5, 4e-5, 3e-5), 1)
    assert sweep.trials == tuple(
        {"data.glue_task": "cola", "optimizer.learning_rate": rate, "seed": 0}
        for rate in (5e-5, 4e-5, 3e-5)
    )


@pytest.mark.parametrize("seeds", [0, -1])
def test_fewer_than_one_seed_is_refused(seeds):
    with pytest.raises(command.GlueError, match=rf"^--seeds={seeds}: must be at least 1$"):
        command.suite_sweep(("rte",), (2e-5,), seeds)


def test_run_without_a_config_gets_the_glue_config_first(monkeypatch):
    monkeypatch.chdir(REPO)
    argv = ["glue", "run", "--init_checkpoint=w", "--config.seed=3", "--data_dir=d"]
    assert command.with_default_config(argv) == [
        "glue",
        f"--config={os.path.join('experiments', 'finetune', 'glue.py')}",
        *argv[1:],
    ]
    assert os.path.isfile(command.CONFIG)


def test_run_from_outside_the_checkout_gets_the_configs_absolute_path(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    program, flag, *rest = command.with_default_config(["glue", "run", "--out=o"])
    assert (program, rest) == ("glue", ["run", "--out=o"])
    path = flag.removeprefix("--config=")
    assert os.path.isabs(path)
    assert os.path.samefile(path, os.path.join(REPO, command.CONFIG))


@pytest.mark.parametrize(
    "argv",
    [
        ["glue", "run", "--config=mine.py", "--out=o"],
        ["glue", "run", "--out=o", "--config", "mine.py"],
        ["glue", "run", "-config=mine.py:arg"],
        ["glue", "report", "out"],
        ["glue", "submit", "out"],
        ["glue"],
        ["glue", "--help"],
    ],
    ids=["config", "config-apart", "single-dash", "report", "submit", "nothing", "help"],
)
def test_argv_is_kept_otherwise(argv):
    assert command.with_default_config(list(argv)) == argv


def test_tfds_glue_not_prepared_is_one_line_naming_the_dataset_and_how_to_build_it(tmp_path):
    data = {"glue_dir": "", "tfds_data_dir": str(tmp_path)}
    with pytest.raises(UserError, match=r"TFDS dataset 'glue/rte' .* `tfds build glue/rte`"):
        command.check_data(data, ["rte"])


def test_a_glue_folder_is_checked_for_every_file_the_trials_read(tmp_path):
    from support.glue import write_glue_dir

    root = write_glue_dir(str(tmp_path / "glue"))
    data = {"glue_dir": root, "tfds_data_dir": ""}
    command.check_data(data, list(command.TASKS))  # all there
    os.remove(os.path.join(root, "QNLI", "dev.tsv"))
    command.check_data(data, ["rte", "mnli"])  # not needed
    with pytest.raises(UserError, match=r"QNLI/dev.tsv: missing, for the task qnli"):
        command.check_data(data, ["rte", "qnli"])
