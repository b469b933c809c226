"""Dropout whose keep decision reads 16 random bits per element.

jax.random.bernoulli draws one 32-bit word per element and turns it into a
float. BERT drops out a lot: the attention probabilities [B, A, L, L] and
three [B, L, H] activations in every layer. Here an element is kept iff 16
random bits are below round(keep_prob * 2**16), and where the bits come from
depends on the platform the step is built for (sharding.target_platform):

- On a CPU, generating the words is most of dropout's cost, so one threefry
  word decides two elements: it is split into two 16-bit halves. Measured on
  a 2-core CPU for a [16, 8, 128, 128] array, the mask took 6.6 ms of CPU time
  against 17.8 ms with jax.random.bernoulli (python -m bertjax.bench.throughput
  prints the whole step).
- On TPU and GPU each element gets its own word, and its top 16 bits decide.
  The split above reshapes the words, so XLA keeps them as a buffer of their
  own instead of generating them inside the op that applies the mask; the
  masks depend only on the key, and with remat the TPU compiler computed them
  all ahead and held them. Compiled with python -m bertjax.tpu.aot, BERT-Large
  phase 2 with remat_policy='full' on a v5e-8 needed 13.8 GiB per chip that
  way against 6.5 GiB with a word per element, and without remat on a v5p-8
  62.5 GiB against 55.3 (and a roofline step of 212 against 148 ms).

So the same key drops different elements on a CPU than on a TPU or GPU, at the
same rate. The cost of 16 bits is that rates are multiples of 2**-16: BERT's
0.1 becomes 0.100006. Kept values are scaled, in float32, by the inverse of
the keep probability actually used, so a dropped-out activation's expectation
is exact to its dtype's rounding, as in the original's tf.nn.dropout.
"""

import jax
import jax.numpy as jnp
from flax import linen as nn

from bertjax import sharding

_LEVELS = 2**16


def keep_threshold(rate: float) -> int:
    """Elements whose 16 random bits are below this are kept (rate in [0, 1))."""
    return min(_LEVELS, max(1, round((1.0 - rate) * _LEVELS)))


def dropout(x, rate: float, rng: jax.Array):
    """x with each element zeroed with probability `rate` (to 2**-16), the rest scaled up."""
    threshold = keep_threshold(rate)
    if threshold == _LEVELS:  # a rate under 2**-17 rounds to 0
        return x
    keep = keep_mask(x.shape, threshold, rng, halves=sharding.target_platform() == "cpu")
    # Scaled in float32: in bfloat16, 1 / 0.9 would round 0.16% low.
    kept = (x.astype(jnp.float32) * (_LEVELS / threshold)).astype(x.dtype)
    return jnp.where(keep, kept, jnp.zeros((), x.dtype))


def keep_mask(shape, threshold: int, rng: jax.Array, *, halves: bool) -> jax.Array:
    """bool `shape`: True where 16 random bits are below `threshold` (1 to 2**16 - 1; see
    keep_threshold): the two 16-bit halves of one word per pair of elements, or the top
    half of one word per element (module docstring)."""
    if not halves:
        return (jax.random.bits(rng, shape, jnp.uint32) >> 16) < jnp.uint32(threshold)
    *lead, last = shape
    # Two halves per word, along the last axis (an odd one wastes a half).
    words = jax.random.bits(rng, (*lead, -(-last // 2)), jnp.uint32)
    bits = jax.lax.bitcast_convert_type(words, jnp.uint16).reshape(*lead, -1)[..., :last]
    return bits < jnp.uint16(threshold)


class Dropout(nn.Module):
    """flax's nn.Dropout, with masks from `dropout` (module docstring); rng stream 'dropout'."""

    rate: float

    @nn.compact
    def __call__(self, x, *, deterministic: bool):
        if deterministic or self.rate == 0.0:
            return x
        return dropout(x, self.rate, self.make_rng("dropout"))
