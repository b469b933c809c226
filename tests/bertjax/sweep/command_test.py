"""bertjax.sweep.command: a sweep's trials loaded from its config file and checked against the
config, the same sweep told from another, and its queue filled, without running a trial."""

import dataclasses
import re
import textwrap

import ml_collections
import optuna
import pytest
from support.sweeps import make_definition, make_study

from bertjax.sweep import command, hyper, trial_queue
from experiments.pretrain import tiny_cpu


def tiny_config():
    config = tiny_cpu.get_config()
    config.num_train_steps = 40
    config.optimizer.warmup_steps = 5
    return config


@pytest.mark.parametrize(
    "trials, message",
    [
        (
            [{"config.optimizer.warmup": 3}],
            r"trial 0 \(000-warmup=3\): unknown config key: config.optimizer.warmup; "
            r"did you mean config.optimizer.warmup_steps\?",
        ),
        (
            [{"config.seed": 1}, {"config.optimizer.learning_rate": "fast"}],
            r"trial 1 \(.*learning_rate=fast",
        ),
        ([{"config.optimizer.learning_rate": -1.0}], r"learning_rate=-1.0: must be above 0"),
        (
            [{"config.optimizer.warmup_steps": 100}],
            r"warmup_steps=100 is above num_train_steps=40",
        ),
        ([{"config.seed.value": 1}], r"config.seed is a value, not a group"),
        ([{"config.model.num_hidden_layers": 2.5}], r"model.num_hidden_layers=2.5"),
        ([{"config.data.max_seq_length": 1024}], r"max_seq_length"),
    ],
)
def test_every_trial_is_checked_as_a_run_would(trials, message):
    with pytest.raises(command.SweepError, match=message):
        command.check_trials(tiny_config(), hyper.as_sweep(trials))


def test_overrides_keep_the_configs_references():
    config = command.apply_overrides(tiny_config(), {"data.vocab_size": 2048}, "trial 0")
    assert config.model.vocab_size == 2048  # model.vocab_size follows data.vocab_size
    assert tiny_config().model.vocab_size == 4096


def test_another_sweep_in_the_same_directory_is_refused():
    recorded = make_definition("d", trials=({"seed": 0},), max_retries=2)
    command.check_same_sweep(recorded, dataclasses.replace(recorded, max_retries=5), "d")
    with pytest.raises(command.SweepError, match=r"d: holds another sweep: its trials was"):
        command.check_same_sweep(
            recorded, dataclasses.replace(recorded, trials=({"seed": 1},)), "d"
        )


def test_the_experiment_configs_sweeps_are_valid():
    from experiments.finetune import classify, glue

    for module, arg in ((tiny_cpu, None), (glue, "mrpc"), (classify, None)):
        config = module.get_config(*([arg] if arg else []))
        with config.unlocked():
            if "init_checkpoint" in config and not config.init_checkpoint:
                config.init_checkpoint = "unused"
        assert isinstance(config, ml_collections.ConfigDict)
        s = command.load_sweep(module.__file__, arg)
        assert len(s) >= 2
        for overrides in s:
            command.apply_overrides(config, overrides, "test")


def write_experiment(tmp_path, get_hyper: str, name="experiment.py") -> str:
    path = tmp_path / name
    path.write_text(
        "from experiments.pretrain import tiny_cpu\n\n\n"
        "def get_config(arg=None):\n"
        "    return tiny_cpu.get_config()\n\n\n" + textwrap.dedent(get_hyper)
    )
    return str(path)


def test_a_sweep_is_what_get_hyper_returns_given_the_configs_argument(tmp_path):
    with_arg = write_experiment(
        tmp_path,
        """\
        def get_hyper(hyper, arg="one"):
            return hyper.sweep("config.seed", [0, 1] if arg == "two" else [0])
        """,
    )
    assert list(command.load_sweep(with_arg, "two")) == [{"seed": 0}, {"seed": 1}]
    assert list(command.load_sweep(with_arg, None)) == [{"seed": 0}]
    # A get_hyper without the argument serves every argument of get_config.
    without = write_experiment(
        tmp_path, 'def get_hyper(hyper):\n    return [{"config.seed": 3}]\n', name="plain.py"
    )
    swept = command.load_sweep(without, "mrpc")
    assert list(swept) == [{"seed": 3}] and swept.space == {"seed": hyper.Choice((3,))}


@pytest.mark.parametrize(
    "get_hyper, error, message",
    [
        ("X = 1\n", command.SweepError, r": defines no get_hyper\(hyper\) beside get_config\(\)$"),
        (
            "def get_hyper(hyper):\n    return 'seed=1'\n",
            command.SweepError,
            ": get_hyper: get_hyper must return",
        ),
        (
            'def get_sweep(h):\n    return h.sweep("seed", [0])\n',
            command.SweepError,
            r": get_sweep\(h\) is now get_hyper\(hyper\), as in big_vision: rename it and "
            r"write hyper.product\(\[...\]\), .* with keys \"config.KEY\"$",
        ),
        (
            'def get_hyper(hyper):\n    return hyper.sweep("seed", [0])\n',
            command.SweepError,
            r": get_hyper: 'seed': a sweep key is written config.KEY, .*; write config.seed$",
        ),
    ],
)
def test_a_config_file_without_a_sweep_is_refused_by_its_name(tmp_path, get_hyper, error, message):
    path = write_experiment(tmp_path, get_hyper)
    with pytest.raises(error, match=f"^{re.escape(path)}{message}"):
        command.load_sweep(path, None)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"optimizer.learning_rat": 1e-3},
            "trial 4: unknown config key: config.optimizer.learning_rat; "
            "did you mean config.optimizer.learning_rate?",
        ),
        ({"seed.value": 1}, "trial 4: config.seed.value: config.seed is a value, not a group"),
        ({"train_batch_size": "big"}, "trial 4: config.train_batch_size='big': "),
        ({"optimizer": 3}, "trial 4: config.optimizer=3: "),
        ({"seed": 2.0}, "trial 4: config.seed=2.0: "),
    ],
)
def test_an_override_that_does_not_fit_the_config_names_the_trial_and_the_key(overrides, message):
    with pytest.raises(command.SweepError) as raised:
        command.apply_overrides(tiny_config(), overrides, "trial 4")
    assert str(raised.value).startswith(message)


def test_overrides_change_a_copy_of_a_locked_config():
    config = tiny_config()
    config.lock()  # as --config gives it
    changed = command.apply_overrides(config, {"seed": 5, "optimizer.learning_rate": 1e-3}, "t")
    assert (changed.seed, changed.optimizer.learning_rate) == (5, 1e-3)
    assert (config.seed, config.optimizer.learning_rate) == (
        tiny_config().seed,
        tiny_config().optimizer.learning_rate,
    )


def test_a_sweep_differs_in_any_field_but_the_retries_pruning_and_directory():
    recorded = make_definition("d", trials=({"seed": 0},))
    for field, value in (("max_retries", 5), ("prune", True), ("sweep_dir", "elsewhere")):
        command.check_same_sweep(recorded, dataclasses.replace(recorded, **{field: value}), "d")
    with pytest.raises(
        command.SweepError, match=r'^d: holds another sweep: its metric was "", now "accuracy"; '
    ):
        command.check_same_sweep(recorded, dataclasses.replace(recorded, metric="accuracy"), "d")
    many = dataclasses.replace(recorded, trials=tuple({"seed": i} for i in range(100)))
    with pytest.raises(command.SweepError) as raised:
        command.check_same_sweep(recorded, many, "d")
    message = str(raised.value)
    assert message.startswith('d: holds another sweep: its trials was [{"seed": 0}], now [')
    assert message.endswith("...; use another --sweep_dir (or the same command as before)")
    assert len(message) < 400  # the trials cut short after 200 characters


def test_a_changed_override_is_named_with_both_values_however_long_the_overrides():
    # A GLUE suite's overrides: absolute paths that sort before seed and pass 200 characters.
    paths = {f"data.{name}": "/home/me/glue/" + "x" * 80 for name in ("data_dir", "vocab")}
    recorded = make_definition("d", overrides={**paths, "init_checkpoint": "/runs/b", "seed": 0})
    asked = dataclasses.replace(recorded, overrides={**recorded.overrides, "seed": 1})
    with pytest.raises(command.SweepError) as raised:
        command.check_same_sweep(recorded, asked, "out", "--out")
    assert str(raised.value) == (
        "out: holds another sweep: its overrides.seed was 0, now 1; use another --out (or the "
        "same command as before)"
    )
    nested = make_definition("d", config_values={"optimizer": {"b1": 0.9, "lr": 1e-4}, "seed": 0})
    changed = {"optimizer": {"b1": 0.8, "lr": 1e-4}, "seed": 0, "task": "squad"}
    with pytest.raises(command.SweepError) as raised:
        command.check_same_sweep(nested, dataclasses.replace(nested, config_values=changed), "d")
    assert str(raised.value).startswith(
        "d: holds another sweep: its config_values.optimizer.b1 was 0.9, now 0.8, its "
        'config_values.task was (none), now "squad"; '
    )


def test_running_a_sweep_again_queues_the_trials_neither_done_queued_nor_running(tmp_path):
    study, definition = make_study(tmp_path, trials=[{"seed": i} for i in range(4)])
    done, failed, _running = (trial_queue.claim(study) for _ in range(3))
    study.tell(done, 1.0)
    study.tell(failed, state=trial_queue.FAIL)  # no attempts left: failed for good
    assert command.queue_unfinished(study, definition) == 1
    queued = [r for r in trial_queue.records(study) if r.status == "queued"]
    assert [(r.index, r.last.user_attrs["attempt"]) for r in queued] == [(1, 1), (3, 1)]
    assert command.queue_unfinished(study, definition) == 0
    search = dataclasses.replace(definition, search="tpe", trials=())
    assert command.queue_unfinished(study, search) == 0


def test_a_search_samples_with_its_sampler_and_pruning_stops_at_the_median():
    assert isinstance(command.make_sampler("tpe"), optuna.samplers.TPESampler)
    assert isinstance(command.make_sampler("random"), optuna.samplers.RandomSampler)
    assert isinstance(command.make_sampler(""), optuna.samplers.RandomSampler)
    assert isinstance(command.make_pruner(False), optuna.pruners.NopPruner)
    assert isinstance(command.make_pruner(True), optuna.pruners.MedianPruner)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["sweep"], "name a subcommand: run, worker, report"),
        (["sweep", "search"], "name a subcommand: run, worker, report"),
        (["sweep", "run", "extra"], "run: unexpected arguments: extra"),
        (["sweep", "worker", "a", "b"], "worker: unexpected arguments: a b"),
        (["sweep", "report"], "report: name one or more sweep directories"),
    ],
)
def test_a_command_line_without_its_subcommand_or_with_extra_words_is_refused(argv, message):
    with pytest.raises(command.SweepError, match=f"^{message}$"):
        command.main(argv)
