"""The optimizer and learning-rate schedule of `config.optimizer`.

Defaults live in the experiment config; this module only checks them, and every
error names the option it is about. The recipe is the original BERT's
(optimization.py): clip by global norm, then Adam with decoupled weight decay
(or LAMB) under a linear warmup / linear decay schedule. Unlike the original,
Adam's bias correction is on (optax's AdamW): docs/reference.md#optimizer.
"""

import dataclasses
from typing import Any

import jax
import optax

from data_pipeline.config import ConfigError

NAMES = ("adamw", "lamb")
# Path components that exclude a parameter from weight decay: the original's
# exclusion list (substring match), which covers `bias` and `output_bias` leaves.
NO_DECAY_SUBSTRINGS = ("LayerNorm", "layer_norm", "bias")
# Flax names a norm's gain `scale`; its module is `LayerNorm` in this model, so
# this only guards against a norm module named otherwise.
NO_DECAY_LEAF_NAMES = ("scale",)


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    name: str
    learning_rate: float
    warmup_steps: int
    b1: float
    b2: float
    eps: float
    weight_decay: float
    max_grad_norm: float
    num_microbatches: int
    # Up to this many consecutive steps whose gradients are not finite leave the
    # parameters unchanged (optax.apply_if_finite); one more stops the run. 0: the first stops it.
    skip_non_finite_steps: int

    def __post_init__(self):
        _check(self)


def from_config(optimizer_config: Any) -> OptimizerConfig:
    """Builds an OptimizerConfig from a ConfigDict, a dict or an OptimizerConfig; unknown keys fail."""
    if isinstance(optimizer_config, OptimizerConfig):
        return optimizer_config
    values = dict(optimizer_config)
    names = {f.name for f in dataclasses.fields(OptimizerConfig)}
    for problem, keys in (("unknown", set(values) - names), ("missing", names - set(values))):
        if keys:
            options = ", ".join("config.optimizer." + k for k in sorted(keys))
            raise ConfigError(f"{problem} optimizer option(s): {options}")
    return OptimizerConfig(**values)


def learning_rate_schedule(optimizer_config: Any, num_train_steps: int) -> optax.Schedule:
    """Linear warmup from 0 to the peak over warmup_steps, then linear decay to 0 at num_train_steps.

    The original decays from step 0 and lets warmup override the first steps, so
    it drops to peak * (1 - warmup_steps / num_train_steps) when warmup ends; this
    schedule decays from the peak itself.
    """
    config = from_config(optimizer_config)
    if num_train_steps < 1:
        raise ConfigError(f"num_train_steps={num_train_steps} must be at least 1")
    if config.warmup_steps > num_train_steps:
        raise ConfigError(
            f"config.optimizer.warmup_steps={config.warmup_steps} is above "
            f"num_train_steps={num_train_steps}"
        )
    warmup = optax.linear_schedule(0.0, config.learning_rate, config.warmup_steps)
    decay_steps = num_train_steps - config.warmup_steps
    if decay_steps > 0:
        decay = optax.linear_schedule(config.learning_rate, 0.0, decay_steps)
    else:
        # linear_schedule holds its initial value when given no steps; the run is
        # all warmup, so the rate after it is 0.
        decay = optax.constant_schedule(0.0)
    return optax.join_schedules([warmup, decay], [config.warmup_steps])


def weight_decay_mask(params: Any) -> Any:
    """True for the leaves that decay: kernels and embedding tables, not LayerNorm or biases.

    Takes plain or boxed (nn.LogicallyPartitioned) parameters: the mask has the
    tree structure of whichever tree the optimizer sees.
    """

    def decays(path, _) -> bool:
        names = [str(key.key) for key in path if isinstance(key, jax.tree_util.DictKey)]
        if names and names[-1] in NO_DECAY_LEAF_NAMES:
            return False
        return not any(part in name for name in names for part in NO_DECAY_SUBSTRINGS)

    return jax.tree_util.tree_map_with_path(decays, params)


def make_optimizer(optimizer_config: Any, num_train_steps: int) -> optax.GradientTransformation:
    """Global-norm clipping (unless max_grad_norm is 0), then AdamW or LAMB on the schedule.

    Weight decay is decoupled and scaled by the learning rate, as the original's
    `update += weight_decay * param` before multiplying by the rate.
    """
    config = from_config(optimizer_config)
    schedule = learning_rate_schedule(config, num_train_steps)
    optimizer = optax.adamw if config.name == "adamw" else optax.lamb
    tx = optimizer(
        schedule,
        b1=config.b1,
        b2=config.b2,
        eps=config.eps,
        weight_decay=config.weight_decay,
        mask=weight_decay_mask,
    )
    if config.max_grad_norm > 0:
        tx = optax.chain(optax.clip_by_global_norm(config.max_grad_norm), tx)
    if config.skip_non_finite_steps:
        tx = optax.apply_if_finite(tx, max_consecutive_errors=config.skip_non_finite_steps)
    return tx


def consecutive_non_finite_steps(opt_state) -> int | None:
    """How many steps in a row ended with non-finite gradients (None unless they are skipped)."""
    if isinstance(opt_state, optax.ApplyIfFiniteState):
        return int(opt_state.notfinite_count)
    return None


def _fail(option: str, value: Any, why: str) -> None:
    raise ConfigError(f"config.optimizer.{option}={value!r}: {why}")


def _check(c: OptimizerConfig) -> None:
    if c.name not in NAMES:
        _fail("name", c.name, f"must be one of {', '.join(NAMES)}")
    if not c.learning_rate > 0:
        _fail("learning_rate", c.learning_rate, "must be above 0")
    if not isinstance(c.warmup_steps, int) or c.warmup_steps < 0:
        _fail("warmup_steps", c.warmup_steps, "must be an integer >= 0")
    for name in ("b1", "b2"):
        value = getattr(c, name)
        if not 0.0 <= value < 1.0:
            _fail(name, value, "must be in [0, 1)")
    if not c.eps > 0:
        _fail("eps", c.eps, "must be above 0")
    if not c.weight_decay >= 0:
        _fail("weight_decay", c.weight_decay, "must be >= 0")
    if not c.max_grad_norm >= 0:
        _fail("max_grad_norm", c.max_grad_norm, "must be >= 0 (0 disables clipping)")
    if not isinstance(c.skip_non_finite_steps, int) or c.skip_non_finite_steps < 0:
        _fail("skip_non_finite_steps", c.skip_non_finite_steps, "must be an integer >= 0")
    if not isinstance(c.num_microbatches, int) or c.num_microbatches < 1:
        _fail("num_microbatches", c.num_microbatches, "must be an integer >= 1")
