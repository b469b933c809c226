"""The optimizer and learning-rate schedule of `config.optimizer`.

Defaults live in the experiment config; this module only checks them, and every
error names the option it is about. The recipe is the original BERT's
(optimization.py): clip by global norm, then Adam with decoupled weight decay
(or LAMB) under a linear warmup / linear decay schedule. Unlike the original,
Adam's bias correction is on (optax's AdamW): docs/reference.md#optimizer.

ModernBERT's recipe (Warner et al. 2024, arXiv 2412.13663, section 2.2) is an
option: StableAdamW (`name='stable_adamw'`, Wortsman et al. 2023, arXiv
2304.13013) under a warmup-stable-decay schedule (`schedule='warmup_stable_decay'`,
`decay_shape='1-sqrt'`).
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax

from data_pipeline.errors import ConfigError

NAMES = ("adamw", "lamb", "stable_adamw")
# 'linear': warmup, then linear decay to 0 at the last step (BERT's). 'warmup_stable_decay':
# warmup, the peak held, then a decay to 0 over the last decay_steps (trapezoidal, WSD).
SCHEDULES = ("linear", "warmup_stable_decay")
# How warmup_stable_decay's last decay_steps fall from the peak to 0, over s from 0 to 1:
# 1 - s, 1 - sqrt(s) (ModernBERT's), or (1 + cos(pi s)) / 2.
DECAY_SHAPES = ("linear", "1-sqrt", "cosine")
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
    # Options added after configs and workdirs were written hold their defaults there:
    # those read as they did. One of SCHEDULES.
    schedule: str = "linear"
    # warmup_stable_decay: the last steps, over which the rate falls to 0 (0 under 'linear').
    decay_steps: int = 0
    # warmup_stable_decay: one of DECAY_SHAPES ('linear' under 'linear').
    decay_shape: str = "linear"

    def __post_init__(self):
        _check(self)


def from_config(optimizer_config: Any) -> OptimizerConfig:
    """Builds an OptimizerConfig from a ConfigDict, a dict or an OptimizerConfig; unknown keys
    fail, and so do missing ones but those added with a default."""
    if isinstance(optimizer_config, OptimizerConfig):
        return optimizer_config
    values = dict(optimizer_config)
    fields = dataclasses.fields(OptimizerConfig)
    names = {f.name for f in fields}
    required = {f.name for f in fields if f.default is dataclasses.MISSING}
    for problem, keys in (("unknown", set(values) - names), ("missing", required - set(values))):
        if keys:
            options = ", ".join("config.optimizer." + k for k in sorted(keys))
            raise ConfigError(f"{problem} optimizer option(s): {options}")
    return OptimizerConfig(**values)


def learning_rate_schedule(optimizer_config: Any, num_train_steps: int) -> optax.Schedule:
    """Linear warmup from 0 to the peak over warmup_steps, then linear decay to 0 at num_train_steps
    (schedule 'linear'), or `warmup_stable_decay`.

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
    if config.schedule == "warmup_stable_decay":
        return warmup_stable_decay(config, num_train_steps)
    warmup = optax.linear_schedule(0.0, config.learning_rate, config.warmup_steps)
    decay_steps = num_train_steps - config.warmup_steps
    if decay_steps > 0:
        decay = optax.linear_schedule(config.learning_rate, 0.0, decay_steps)
    else:
        # linear_schedule holds its initial value when given no steps; the run is
        # all warmup, so the rate after it is 0.
        decay = optax.constant_schedule(0.0)
    return optax.join_schedules([warmup, decay], [config.warmup_steps])


def warmup_stable_decay(config: OptimizerConfig, num_train_steps: int) -> optax.Schedule:
    """Linear warmup from 0 to the peak over warmup_steps, the peak until the last
    decay_steps, then down to 0 at num_train_steps in `decay_shape` (and 0 after).
    With decay_steps=0 the peak holds to the end: a run whose decay is a later run's,
    as ModernBERT's phase 1.

    The trapezoidal schedule ModernBERT trains with, with its 1-sqrt decay (Warner et
    al. 2024, section 2.2): most of the run at the peak, so that a run can be
    lengthened or branched before its decay.
    """
    decay_start = num_train_steps - config.decay_steps
    if decay_start < config.warmup_steps:
        _fail(
            "decay_steps",
            config.decay_steps,
            f"warmup_steps + decay_steps = {config.warmup_steps + config.decay_steps} "
            f"is above num_train_steps={num_train_steps}",
        )
    peak, steps = config.learning_rate, config.decay_steps
    warmup = optax.linear_schedule(0.0, peak, config.warmup_steps)
    if not steps:
        return optax.join_schedules([warmup, optax.constant_schedule(peak)], [config.warmup_steps])
    decay = {
        "linear": optax.linear_schedule(peak, 0.0, steps),
        "1-sqrt": lambda count: peak * (1.0 - jnp.sqrt(jnp.clip(count / steps, 0.0, 1.0))),
        "cosine": optax.cosine_decay_schedule(peak, steps),
    }[config.decay_shape]
    return optax.join_schedules(
        [warmup, optax.constant_schedule(peak), decay], [config.warmup_steps, decay_start]
    )


def stable_adamw(
    learning_rate: optax.ScalarOrSchedule,
    *,
    b1: float,
    b2: float,
    eps: float,
    weight_decay: float,
    mask: Any,
) -> optax.GradientTransformation:
    """AdamW whose step, decay included, is divided per parameter tensor by
    max(1, sqrt(mean(g^2 / max(v_hat, eps^2)))): StableAdamW (Wortsman et al. 2023, arXiv
    2304.13013, Algorithm 1), where g is the step's gradient and v_hat Adam's
    bias-corrected second moment, that gradient included.

    The ratio is about 1 while the second moment tracks the gradients and grows when a
    gradient outruns it, which is when Adam's steps grow too large (Adafactor's update
    clipping, on this ratio). optax has no such transformation: its clip_by_block_rms
    clips the update's RMS, momentum included, so this one wraps optax's Adam and
    decoupled decay and scales their sum.
    """
    adam = optax.scale_by_adam(b1, b2, eps)
    decay = optax.add_decayed_weights(weight_decay, mask)

    def init(params):
        return adam.init(params), decay.init(params)

    def update(grads, state, params=None):
        adam_state, decay_state = state
        updates, adam_state = adam.update(grads, adam_state, params)
        updates, decay_state = decay.update(updates, decay_state, params)
        nu_hat = optax.tree.bias_correction(adam_state.nu, b2, adam_state.count)

        def clip(update, grad, nu):
            ratio = jnp.mean(jnp.square(grad) / jnp.maximum(nu, eps**2))
            return update / jnp.maximum(1.0, jnp.sqrt(ratio))

        updates = jax.tree.map(clip, updates, grads, nu_hat)
        return updates, (adam_state, decay_state)

    return optax.chain(
        optax.GradientTransformation(init, update), optax.scale_by_learning_rate(learning_rate)
    )


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
    """Global-norm clipping (unless max_grad_norm is 0), then AdamW, LAMB or StableAdamW on
    the schedule.

    Weight decay is decoupled and scaled by the learning rate, as the original's
    `update += weight_decay * param` before multiplying by the rate.
    """
    config = from_config(optimizer_config)
    schedule = learning_rate_schedule(config, num_train_steps)
    optimizer = {"adamw": optax.adamw, "lamb": optax.lamb, "stable_adamw": stable_adamw}[
        config.name
    ]
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
    if c.schedule not in SCHEDULES:
        _fail("schedule", c.schedule, f"must be one of {', '.join(SCHEDULES)}")
    if c.decay_shape not in DECAY_SHAPES:
        _fail("decay_shape", c.decay_shape, f"must be one of {', '.join(DECAY_SHAPES)}")
    if not isinstance(c.decay_steps, int) or c.decay_steps < 0:
        _fail("decay_steps", c.decay_steps, "must be an integer >= 0")
    if c.schedule == "linear":
        # 'linear' decays over every step after warmup, in a straight line.
        for name, default in (("decay_steps", 0), ("decay_shape", "linear")):
            if getattr(c, name) != default:
                _fail(name, getattr(c, name), "applies to schedule='warmup_stable_decay' only")
