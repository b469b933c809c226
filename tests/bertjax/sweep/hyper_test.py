"""bertjax.sweep.hyper: the sweep vocabulary of experiment configs, big_vision's `get_hyper`."""

import pytest

from bertjax.sweep import hyper
from bertjax.sweep.hyper import SweepError


def test_a_big_vision_get_hyper_ports_by_copy():
    def get_hyper(hyper):
        return hyper.product(
            [
                hyper.sweep("config.seed", [0, 1]),
                hyper.sweep("config.optimizer.learning_rate", [1e-4, 3e-4]),
            ]
        )

    # The trials hold the keys without "config.", as --config.KEY and a sweep directory name them.
    assert list(get_hyper(hyper)) == [
        {"seed": 0, "optimizer.learning_rate": 1e-4},
        {"seed": 0, "optimizer.learning_rate": 3e-4},
        {"seed": 1, "optimizer.learning_rate": 1e-4},
        {"seed": 1, "optimizer.learning_rate": 3e-4},
    ]


def test_product_crosses_a_list_of_sweeps_the_last_key_fastest():
    s = hyper.product(
        [
            hyper.sweep("config.optimizer.learning_rate", [5e-5, 3e-5]),
            hyper.sweep("config.num_train_epochs", [2.0, 3.0, 4.0]),
            hyper.fixed("config.train_batch_size", 16, length=1),
        ]
    )
    assert len(s) == 6
    assert s.trials[:2] == (
        {"optimizer.learning_rate": 5e-5, "num_train_epochs": 2.0, "train_batch_size": 16},
        {"optimizer.learning_rate": 5e-5, "num_train_epochs": 3.0, "train_batch_size": 16},
    )
    assert s.space["num_train_epochs"] == hyper.Choice((2.0, 3.0, 4.0))
    assert list(hyper.product([])) == [{}]  # scenic's "no sweep": one run of the config


def test_fixed_gives_length_trials_of_one_value():
    assert list(hyper.fixed("config.seed", 7)) == [{"seed": 7}]
    assert list(hyper.fixed("config.seed", 7, length=3)) == [{"seed": 7}] * 3
    assert hyper.fixed("config.seed", 7, length=3).space == {"seed": hyper.Choice((7,))}


def test_zipit_pairs_a_list_of_sweeps_and_repeats_a_single_trial():
    s = hyper.zipit(
        [
            hyper.sweep("config.optimizer.learning_rate", [1e-3, 2e-3]),
            hyper.fixed("config.optimizer.warmup_steps", 10, length=2),
            hyper.fixed("config.seed", 7, length=1),
        ]
    )
    assert list(s) == [
        {"optimizer.learning_rate": 1e-3, "optimizer.warmup_steps": 10, "seed": 7},
        {"optimizer.learning_rate": 2e-3, "optimizer.warmup_steps": 10, "seed": 7},
    ]


def test_chainit_runs_a_list_of_sweeps_one_after_the_other_and_unites_the_space():
    s = hyper.chainit(
        [
            hyper.sweep("config.train_batch_size", [16]),
            hyper.product(
                [hyper.sweep("config.train_batch_size", [32]), hyper.sweep("config.seed", [0, 1])]
            ),
        ]
    )
    assert list(s) == [
        {"train_batch_size": 16},
        {"train_batch_size": 32, "seed": 0},
        {"train_batch_size": 32, "seed": 1},
    ]
    assert s.space["train_batch_size"] == hyper.Choice((16, 32))


def test_draws_are_seeded_within_their_range_and_keep_the_range_for_a_search():
    a = hyper.loguniform("config.optimizer.learning_rate", 1e-5, 1e-3, 5, seed=3)
    b = hyper.loguniform("config.optimizer.learning_rate", 1e-5, 1e-3, 5, seed=3)
    c = hyper.loguniform("config.optimizer.learning_rate", 1e-5, 1e-3, 5, seed=4)
    assert list(a) == list(b) != list(c)
    values = [t["optimizer.learning_rate"] for t in a]
    assert all(1e-5 <= v <= 1e-3 for v in values)
    assert all(v == float(f"{v:.3g}") for v in values)  # three significant digits
    assert a.space["optimizer.learning_rate"] == hyper.Range(1e-5, 1e-3, log=True)
    u = hyper.uniform("config.model.hidden_dropout_prob", 0.0, 0.2, 3)
    assert len(u) == 3 and u.space["model.hidden_dropout_prob"].log is False


def test_a_list_of_dicts_is_a_sweep_too():
    s = hyper.as_sweep([{"config.seed": 0}, {"config.seed": 1, "config.train_batch_size": 8}])
    assert list(s) == [{"seed": 0}, {"seed": 1, "train_batch_size": 8}]
    assert s.space == {"seed": hyper.Choice((0, 1)), "train_batch_size": hyper.Choice((8,))}


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: hyper.sweep("seed", [1]),
            "^'seed': a sweep key is written config.KEY, KEY as in --config.KEY=VALUE; "
            "write config.seed$",
        ),
        (lambda: hyper.fixed("optimizer.learning_rate", 1e-3), "write config.optimizer"),
        (lambda: hyper.loguniform("optimizer.learning_rate", 1e-5, 1e-3, 2), "write config."),
        (lambda: hyper.as_sweep([{"seed": 1}]), "'seed': .* write config.seed$"),
        (lambda: hyper.sweep("config.seed", []), "no values"),
        (lambda: hyper.sweep("config.seed", 3), "the values are a list"),
        (lambda: hyper.sweep("config.seed", [[1, 2]]), "a swept value is a bool, int, float"),
        (lambda: hyper.sweep("config.optimizer.learning_rate", [float("nan")]), "finite"),
        (lambda: hyper.sweep("config.optimizer..lr", [1]), "dotted config key"),
        (lambda: hyper.fixed("config.seed", 1, length=0), "length is an integer >= 1"),
        (
            lambda: hyper.zipit(
                [
                    hyper.sweep("config.seed", [0, 1]),
                    hyper.sweep("config.train_batch_size", [8, 16, 32]),
                ]
            ),
            r"^zipit: the sweeps have different numbers of trials \(config.seed: 2, "
            r"config.train_batch_size: 3\)$",
        ),
        (
            lambda: hyper.zipit(
                [hyper.sweep("config.seed", [0, 1]), hyper.fixed("config.train_batch_size", 8, 3)]
            ),
            "different numbers of trials",
        ),
        (
            lambda: hyper.product(
                [hyper.sweep("config.seed", [0]), hyper.sweep("config.seed", [1])]
            ),
            "^product: config.seed is swept twice$",
        ),
        (lambda: hyper.product(hyper.sweep("config.seed", [0])), "takes one list of sweeps"),
        (lambda: hyper.chainit([hyper.sweep("config.seed", [0]), {"seed": 1}]), "takes sweeps"),
        (lambda: hyper.loguniform("config.optimizer.learning_rate", 0.0, 1.0, 3), "low > 0"),
        (lambda: hyper.uniform("config.seed", 2.0, 1.0, 3), "low < high"),
        (lambda: hyper.as_sweep("seed=1"), "get_hyper must return"),
    ],
)
def test_bad_definitions_are_one_line(make, message):
    with pytest.raises(SweepError, match=message):
        make()


def test_the_old_varargs_form_is_not_taken():
    with pytest.raises(TypeError):
        hyper.product(hyper.sweep("config.seed", [0]), hyper.sweep("config.train_batch_size", [8]))
