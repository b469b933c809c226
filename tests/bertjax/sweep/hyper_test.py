"""bertjax.sweep.hyper: the sweep vocabulary of experiment configs."""

import pytest

from bertjax.sweep import hyper
from bertjax.sweep.hyper import SweepError


def test_product_crosses_the_last_key_fastest():
    s = hyper.product(
        hyper.sweep("optimizer.learning_rate", [5e-5, 3e-5]),
        hyper.sweep("num_train_epochs", [2.0, 3.0, 4.0]),
    )
    assert len(s) == 6
    assert s.trials[:2] == (
        {"optimizer.learning_rate": 5e-5, "num_train_epochs": 2.0},
        {"optimizer.learning_rate": 5e-5, "num_train_epochs": 3.0},
    )
    assert s.space["num_train_epochs"] == hyper.Choice((2.0, 3.0, 4.0))


def test_product_takes_a_list_as_big_vision_writes_it():
    a = hyper.product([hyper.sweep("seed", [0, 1]), hyper.fixed("train_batch_size", 16)])
    assert list(a) == [{"seed": 0, "train_batch_size": 16}, {"seed": 1, "train_batch_size": 16}]


def test_zip_pairs_trials_and_repeats_a_single_one():
    s = hyper.zip(
        hyper.sweep("optimizer.learning_rate", [1e-3, 2e-3]),
        hyper.sweep("optimizer.warmup_steps", [10, 20]),
        hyper.fixed("seed", 7),
    )
    assert list(s) == [
        {"optimizer.learning_rate": 1e-3, "optimizer.warmup_steps": 10, "seed": 7},
        {"optimizer.learning_rate": 2e-3, "optimizer.warmup_steps": 20, "seed": 7},
    ]


def test_chain_runs_one_sweep_after_the_other_and_unites_the_space():
    s = hyper.chain(
        hyper.sweep("train_batch_size", [16]),
        hyper.product(hyper.sweep("train_batch_size", [32]), hyper.sweep("seed", [0, 1])),
    )
    assert list(s) == [
        {"train_batch_size": 16},
        {"train_batch_size": 32, "seed": 0},
        {"train_batch_size": 32, "seed": 1},
    ]
    assert s.space["train_batch_size"] == hyper.Choice((16, 32))


def test_draws_are_seeded_within_their_range_and_keep_the_range_for_a_search():
    a = hyper.loguniform("optimizer.learning_rate", 1e-5, 1e-3, 5, seed=3)
    b = hyper.loguniform("optimizer.learning_rate", 1e-5, 1e-3, 5, seed=3)
    c = hyper.loguniform("optimizer.learning_rate", 1e-5, 1e-3, 5, seed=4)
    assert list(a) == list(b) != list(c)
    values = [t["optimizer.learning_rate"] for t in a]
    assert all(1e-5 <= v <= 1e-3 for v in values)
    assert all(v == float(f"{v:.3g}") for v in values)  # three significant digits
    assert a.space["optimizer.learning_rate"] == hyper.Range(1e-5, 1e-3, log=True)
    u = hyper.uniform("model.hidden_dropout_prob", 0.0, 0.2, 3)
    assert len(u) == 3 and u.space["model.hidden_dropout_prob"].log is False


def test_a_list_of_dicts_is_a_sweep_too():
    s = hyper.as_sweep([{"seed": 0}, {"seed": 1, "train_batch_size": 8}], "f.py")
    assert list(s) == [{"seed": 0}, {"seed": 1, "train_batch_size": 8}]
    assert s.space == {"seed": hyper.Choice((0, 1)), "train_batch_size": hyper.Choice((8,))}


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: hyper.sweep("seed", []), "no values"),
        (lambda: hyper.sweep("seed", [[1, 2]]), "a swept value is a bool, int, float or str"),
        (lambda: hyper.sweep("optimizer.learning_rate", [float("nan")]), "finite"),
        (lambda: hyper.sweep("config.seed", [1]), "without 'config.'"),
        (lambda: hyper.sweep("optimizer..lr", [1]), "dotted config key"),
        (
            lambda: hyper.zip(hyper.sweep("seed", [0, 1]), hyper.sweep("train_batch_size", [8])),
            None,
        ),
        (
            lambda: hyper.zip(
                hyper.sweep("seed", [0, 1]), hyper.sweep("train_batch_size", [8, 16, 32])
            ),
            "different numbers of trials",
        ),
        (
            lambda: hyper.product(hyper.sweep("seed", [0]), hyper.sweep("seed", [1])),
            "seed is swept twice",
        ),
        (lambda: hyper.loguniform("optimizer.learning_rate", 0.0, 1.0, 3), "low > 0"),
        (lambda: hyper.uniform("seed", 2.0, 1.0, 3), "low < high"),
        (lambda: hyper.product(hyper.sweep("seed", [0]), {"seed": 1}), "takes sweeps"),
        (lambda: hyper.as_sweep("seed=1", "f.py"), "get_sweep must return"),
    ],
)
def test_bad_definitions_are_one_line(make, message):
    if message is None:
        assert len(make()) == 2  # a one-trial sweep pairs with every trial
        return
    with pytest.raises(SweepError, match=message):
        make()
