"""Pretraining losses as sums with their denominators.

A step returns sums (of losses, of correct predictions) and counts rather than
means, so metrics over many batches, microbatches or hosts add up exactly and
are divided once at the end (`summarize`).
"""

import jax
import jax.numpy as jnp
import numpy as np

SUM_KEYS = (
    "mlm_loss_sum",
    "mlm_correct",
    "mlm_weight",
    "nsp_loss_sum",
    "nsp_correct",
    "nsp_count",
)


def pretraining_sums(mlm_logits, nsp_logits, batch) -> dict[str, jax.Array]:
    """MLM over the weighted masked positions and NSP over the examples, in float32."""
    weights = batch["masked_lm_weights"].astype(jnp.float32)
    log_probs = jax.nn.log_softmax(mlm_logits.astype(jnp.float32), axis=-1)
    labels = batch["masked_lm_ids"]
    mlm_nll = -jnp.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
    mlm_hit = (jnp.argmax(log_probs, axis=-1) == labels).astype(jnp.float32)

    nsp_log_probs = jax.nn.log_softmax(nsp_logits.astype(jnp.float32), axis=-1)
    nsp_labels = batch["next_sentence_labels"]
    nsp_nll = -jnp.take_along_axis(nsp_log_probs, nsp_labels[:, None], axis=-1)[:, 0]
    nsp_hit = (jnp.argmax(nsp_log_probs, axis=-1) == nsp_labels).astype(jnp.float32)
    return {
        "mlm_loss_sum": jnp.sum(weights * mlm_nll),
        "mlm_correct": jnp.sum(weights * mlm_hit),
        "mlm_weight": jnp.sum(weights),
        "nsp_loss_sum": jnp.sum(nsp_nll),
        "nsp_correct": jnp.sum(nsp_hit),
        "nsp_count": jnp.asarray(nsp_labels.shape[0], jnp.float32),
    }


def total_loss(sums, *, mlm_weight, nsp_count):
    """BERT's objective, MLM mean + NSP mean, with the denominators given.

    The denominators are those of the whole batch, so the gradients of
    microbatch losses add up to the gradient of the full batch's loss.
    """
    return sums["mlm_loss_sum"] / jnp.maximum(mlm_weight, 1.0) + sums["nsp_loss_sum"] / nsp_count


def summarize(sums) -> dict[str, float]:
    """Means from accumulated sums; accepts device or host values."""
    s = {key: float(np.asarray(sums[key])) for key in SUM_KEYS}
    mlm_loss = s["mlm_loss_sum"] / max(s["mlm_weight"], 1.0)
    nsp_loss = s["nsp_loss_sum"] / max(s["nsp_count"], 1.0)
    return {
        "loss": mlm_loss + nsp_loss,
        "mlm_loss": mlm_loss,
        "mlm_accuracy": s["mlm_correct"] / max(s["mlm_weight"], 1.0),
        "mlm_perplexity": float(np.exp(min(mlm_loss, 80.0))),
        "nsp_loss": nsp_loss,
        "nsp_accuracy": s["nsp_correct"] / max(s["nsp_count"], 1.0),
    }
