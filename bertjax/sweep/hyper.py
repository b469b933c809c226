"""Sweeps as an experiment config defines them: `get_sweep(h)` beside `get_config()`.

    def get_sweep(h):
        return h.product(
            h.sweep("optimizer.learning_rate", [5e-5, 4e-5, 3e-5, 2e-5]),
            h.sweep("num_train_epochs", [2.0, 3.0, 4.0]),
        )

`h` is this module. A sweep is a list of trials, each a dict of dotted config
keys (the keys of `--config.KEY=VALUE`) to values: bool, int, float or str.
`sweep` gives one trial per value of a key, `fixed` one trial, `uniform` and
`loguniform` `n` seeded draws; `product` crosses sweeps, `zip` pairs them
trial by trial (a one-trial sweep pairs with every trial), `chain` runs one
after the other. A config file with an argument (`glue.py:mrpc`) may define
`get_sweep(h, arg)`.

Every sweep also knows its search space, for `bertjax.sweep run --search tpe`:
each key's values become a categorical choice, and a `uniform` or
`loguniform` key the continuous range it draws from. A search treats the keys
as independent, so what `zip` pairs is not kept.
"""

import dataclasses
import itertools
import math

import numpy as np

from data_pipeline.errors import UserError

Value = bool | int | float | str


class SweepError(UserError):
    """A sweep definition that cannot be run."""


@dataclasses.dataclass(frozen=True)
class Choice:
    """A key that takes one of these values."""

    values: tuple[Value, ...]


@dataclasses.dataclass(frozen=True)
class Range:
    """A float key drawn from [low, high], on a log scale if `log`."""

    low: float
    high: float
    log: bool


@dataclasses.dataclass(frozen=True)
class Sweep:
    trials: tuple[dict[str, Value], ...]
    space: dict[str, Choice | Range]

    def __len__(self) -> int:
        return len(self.trials)

    def __iter__(self):
        return iter(self.trials)


def sweep(key: str, values) -> Sweep:
    """One trial per value of `key`."""
    values = tuple(values)
    _check_key(key)
    if not values:
        raise SweepError(f"sweep({key!r}, ...): no values")
    for value in values:
        _check_value(key, value)
    return Sweep(tuple({key: value} for value in values), {key: Choice(_unique(values))})


def fixed(key_or_values: str | dict, value: Value | None = None) -> Sweep:
    """One trial: `fixed(key, value)` or `fixed({key: value, ...})`."""
    values = key_or_values if isinstance(key_or_values, dict) else {key_or_values: value}
    for key, v in values.items():
        _check_key(key)
        _check_value(key, v)
    return Sweep((dict(values),), {key: Choice((v,)) for key, v in values.items()})


def uniform(key: str, low: float, high: float, n: int, *, seed: int = 0) -> Sweep:
    """`n` values of `key` drawn uniformly from [low, high] with `seed`."""
    return _draw(key, low, high, n, seed, log=False)


def loguniform(key: str, low: float, high: float, n: int, *, seed: int = 0) -> Sweep:
    """`n` values of `key` drawn log-uniformly from [low, high] with `seed` (learning rates)."""
    return _draw(key, low, high, n, seed, log=True)


def product(*sweeps) -> Sweep:
    """Every combination, the last sweep varying fastest."""
    sweeps = _sweeps("product", sweeps)
    _check_disjoint("product", sweeps)
    trials = tuple(
        {k: v for part in parts for k, v in part.items()}
        for parts in itertools.product(*(s.trials for s in sweeps))
    )
    return Sweep(trials, {k: v for s in sweeps for k, v in s.space.items()})


def zip(*sweeps) -> Sweep:  # noqa: A001 - `h.zip`, as the sweep vocabulary names it
    """Trial i of each sweep together; all of one length, or one trial (repeated)."""
    sweeps = _sweeps("zip", sweeps)
    _check_disjoint("zip", sweeps)
    lengths = {len(s) for s in sweeps} - {1}
    if len(lengths) > 1:
        described = ", ".join(f"{'/'.join(s.space)}: {len(s)}" for s in sweeps)
        raise SweepError(f"zip: the sweeps have different numbers of trials ({described})")
    length = lengths.pop() if lengths else 1
    trials = tuple(
        {k: v for s in sweeps for k, v in s.trials[i if len(s) > 1 else 0].items()}
        for i in range(length)
    )
    return Sweep(trials, {k: v for s in sweeps for k, v in s.space.items()})


def chain(*sweeps) -> Sweep:
    """The trials of each sweep, one sweep after the other."""
    sweeps = _sweeps("chain", sweeps)
    space: dict[str, Choice | Range] = {}
    for s in sweeps:
        for key, part in s.space.items():
            space[key] = part if key not in space else _union(space[key], part)
    return Sweep(tuple(t for s in sweeps for t in s.trials), space)


def as_sweep(value, where: str) -> Sweep:
    """What `get_sweep` returned, as a Sweep: a Sweep, or a list of trial dicts."""
    if isinstance(value, Sweep):
        return value
    if not isinstance(value, list | tuple) or not all(isinstance(t, dict) for t in value):
        raise SweepError(f"{where}: get_sweep must return h.product(...) etc. or a list of dicts")
    return chain(*(fixed(dict(t)) for t in value)) if value else Sweep((), {})


def _draw(key: str, low: float, high: float, n: int, seed: int, *, log: bool) -> Sweep:
    name = "loguniform" if log else "uniform"
    _check_key(key)
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise SweepError(f"{name}({key!r}, {low}, {high}, ...): needs finite low < high")
    if log and low <= 0:
        raise SweepError(f"{name}({key!r}, {low}, {high}, ...): needs low > 0")
    if not (isinstance(n, int) and n >= 1):
        raise SweepError(f"{name}({key!r}, ..., n={n}): n must be an integer >= 1")
    rng = np.random.default_rng(seed)
    if log:
        draws = np.exp(rng.uniform(math.log(low), math.log(high), n))
    else:
        draws = rng.uniform(low, high, n)
    # Three significant digits: readable names and tables, and the same values everywhere.
    values = tuple(float(f"{x:.3g}") for x in draws)
    return Sweep(tuple({key: v} for v in values), {key: Range(float(low), float(high), log)})


def _sweeps(name: str, sweeps) -> list[Sweep]:
    if len(sweeps) == 1 and isinstance(sweeps[0], list | tuple):
        sweeps = sweeps[0]  # big_vision's style: product([a, b])
    for s in sweeps:
        if not isinstance(s, Sweep):
            raise SweepError(f"{name}: takes sweeps (h.sweep, h.fixed, ...), not {s!r}")
    return list(sweeps)


def _check_disjoint(name: str, sweeps: list[Sweep]) -> None:
    seen = set()
    for s in sweeps:
        for key in s.space:
            if key in seen:
                raise SweepError(f"{name}: {key} is swept twice")
            seen.add(key)


def _union(a: Choice | Range, b: Choice | Range) -> Choice | Range:
    if isinstance(a, Range) and isinstance(b, Range) and a.log == b.log:
        return Range(min(a.low, b.low), max(a.high, b.high), a.log)
    if isinstance(a, Choice) and isinstance(b, Choice):
        return Choice(_unique(a.values + b.values))
    return a if isinstance(a, Range) else b  # a draw and fixed points: search the range


def _unique(values: tuple) -> tuple:
    out = []
    for v in values:
        if not any(type(v) is type(u) and v == u for u in out):
            out.append(v)
    return tuple(out)


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not key or any(not part for part in key.split(".")):
        raise SweepError(f"{key!r}: a sweep key is a dotted config key, e.g. optimizer.lr")
    if key.startswith("config."):
        raise SweepError(f"{key}: write the key without 'config.' ({key[len('config.') :]})")


def _check_value(key: str, value) -> None:
    if not isinstance(value, Value):
        raise SweepError(f"{key}={value!r}: a swept value is a bool, int, float or str")
    if isinstance(value, float) and not math.isfinite(value):
        raise SweepError(f"{key}={value}: must be a finite number")
