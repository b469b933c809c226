"""Pretraining and fine-tuning losses as sums with their denominators.

A step returns sums (of losses, of correct predictions) and counts rather than
means, so metrics over many batches, microbatches or hosts add up exactly and
are divided once at the end (`summarize`).
"""

import jax
import jax.numpy as jnp
import numpy as np

MLM_SUM_KEYS = ("mlm_loss_sum", "mlm_correct", "mlm_weight")
# Pretraining with next-sentence prediction; masked LM alone has MLM_SUM_KEYS only.
SUM_KEYS = (*MLM_SUM_KEYS, "nsp_loss_sum", "nsp_correct", "nsp_count")


def _weighted_nll(logits, labels, weights):
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    nll = -jnp.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
    hit = (jnp.argmax(log_probs, axis=-1) == labels).astype(jnp.float32)
    return {
        "loss_sum": jnp.sum(weights * nll),
        "correct": jnp.sum(weights * hit),
        "weight": jnp.sum(weights),
    }


def pretraining_sums(mlm_logits, nsp_logits, batch) -> dict[str, jax.Array]:
    """MLM over the weighted masked positions and NSP over the examples, in float32; of
    packed rows, NSP over the sequences that `next_sentence_weights` [R, K] marks.
    MLM_SUM_KEYS alone where `nsp_logits` is None (masked LM alone: no NSP head)."""
    weights = batch["masked_lm_weights"].astype(jnp.float32)
    mlm = _weighted_nll(mlm_logits, batch["masked_lm_ids"], weights)
    mlm = {f"mlm_{key}": value for key, value in mlm.items()}
    if nsp_logits is None:
        return mlm
    labels = batch["next_sentence_labels"]
    nsp = _weighted_nll(nsp_logits, labels, nsp_weights(batch))
    return {
        **mlm,
        "nsp_loss_sum": nsp["loss_sum"],
        "nsp_correct": nsp["correct"],
        "nsp_count": nsp["weight"],
    }


def nsp_weights(batch) -> jax.Array:
    """float32, 1 per example's NSP label: [B] of ones, or a packed batch's
    `next_sentence_weights` [R, K] (0 in empty slots)."""
    if "next_sentence_weights" in batch:
        return batch["next_sentence_weights"].astype(jnp.float32)
    return jnp.ones(batch["next_sentence_labels"].shape, jnp.float32)


def total_loss(sums, *, mlm_weight, nsp_count):
    """BERT's objective, MLM mean + NSP mean, with the denominators given; the MLM mean
    alone where `nsp_count` is None (masked LM alone).

    The denominators are those of the whole batch, so the gradients of
    microbatch losses add up to the gradient of the full batch's loss.
    """
    mlm = sums["mlm_loss_sum"] / jnp.maximum(mlm_weight, 1.0)
    if nsp_count is None:
        return mlm
    return mlm + sums["nsp_loss_sum"] / nsp_count


def summarize(sums) -> dict[str, float]:
    """Means from accumulated sums; accepts device or host values. Sums of masked LM
    alone (no nsp_count) give no NSP entries."""
    next_sentence = "nsp_count" in sums
    s = {key: float(np.asarray(sums[key])) for key in SUM_KEYS if key in sums}
    mlm_loss = s["mlm_loss_sum"] / max(s["mlm_weight"], 1.0)
    means = {
        "loss": mlm_loss,
        "mlm_loss": mlm_loss,
        "mlm_accuracy": s["mlm_correct"] / max(s["mlm_weight"], 1.0),
        "mlm_perplexity": float(np.exp(min(mlm_loss, 80.0))),
    }
    if next_sentence:
        nsp_loss = s["nsp_loss_sum"] / max(s["nsp_count"], 1.0)
        means["loss"] += nsp_loss
        means["nsp_loss"] = nsp_loss
        means["nsp_accuracy"] = s["nsp_correct"] / max(s["nsp_count"], 1.0)
    return means


def mlm_distillation_sums(student_logits, teacher_logits, *, weights, temperature: float):
    """Knowledge distillation of the masked-LM head (Hinton et al., 2015, arXiv:1503.02531;
    DistilBERT's soft-target loss): at each masked position, the KL divergence of the
    student's softened distribution, softmax(logits / temperature), from the teacher's,
    times temperature squared (so that its gradients keep their scale as the temperature
    changes), summed over the positions' `weights`."""
    t = jax.nn.log_softmax(teacher_logits.astype(jnp.float32) / temperature, axis=-1)
    s = jax.nn.log_softmax(student_logits.astype(jnp.float32) / temperature, axis=-1)
    kl = jnp.sum(jnp.exp(t) * (t - s), axis=-1)
    return {"distill_loss_sum": temperature**2 * jnp.sum(weights * kl)}


def distilled_total_loss(sums, *, mlm_weight, nsp_count, distill_weight: float, hard_weight: float):
    """total_loss with the MLM mean weighted by `hard_weight` and `distill_weight` times the
    mean distillation loss over the masked positions added."""
    mlm = sums["mlm_loss_sum"] / jnp.maximum(mlm_weight, 1.0)
    distill = sums["distill_loss_sum"] / jnp.maximum(mlm_weight, 1.0)
    total = hard_weight * mlm + distill_weight * distill
    return total if nsp_count is None else total + sums["nsp_loss_sum"] / nsp_count


def summarize_distilled(sums, *, distill_weight: float, hard_weight: float) -> dict[str, float]:
    """summarize's means, the distillation loss's mean over the masked positions, and the
    loss as distilled_total_loss weighs it."""
    means = summarize(sums)
    weight = max(float(np.asarray(sums["mlm_weight"])), 1.0)
    distill = float(np.asarray(sums["distill_loss_sum"])) / weight
    loss = hard_weight * means["mlm_loss"] + distill_weight * distill + means.get("nsp_loss", 0.0)
    return {**means, "loss": loss, "distill_loss": distill}


# ------------------------------------------------------------------ fine-tuning
# Every fine-tuning loss is a weighted sum over examples (or tokens) with its
# weight total: `example_weight` is 0 on the rows that pad an eval batch.
FINETUNE_SUM_KEYS = ("loss_sum", "correct", "weight")


def classification_sums(logits, batch) -> dict[str, jax.Array]:
    """Cross-entropy of [B, K] logits against `label`."""
    return _weighted_nll(logits, batch["label"], batch["example_weight"].astype(jnp.float32))


def regression_sums(logits, batch) -> dict[str, jax.Array]:
    """Squared error of the one output [B, 1] (packed: [R, K, 1]) against the float `label`
    (STS-B)."""
    weights = batch["example_weight"].astype(jnp.float32)
    error = logits[..., 0].astype(jnp.float32) - batch["label"].astype(jnp.float32)
    return {
        "loss_sum": jnp.sum(weights * error**2),
        "correct": jnp.zeros((), jnp.float32),
        "weight": jnp.sum(weights),
    }


def token_weights(batch) -> jax.Array:
    """float32 [B, L]: `label_weights` times the example weight of each token's example
    (`example_weight` [B], or [R, K] packed, where input_mask numbers a row's examples)."""
    example_weight = batch["example_weight"].astype(jnp.float32)
    if example_weight.ndim == 1:
        example_weight = example_weight[:, None]
    else:
        ids = batch["input_mask"]
        slot = jnp.maximum(ids - 1, 0)
        example_weight = jnp.take_along_axis(example_weight, slot, axis=1) * (ids > 0)
    return batch["label_weights"].astype(jnp.float32) * example_weight


def tagging_sums(logits, batch) -> dict[str, jax.Array]:
    """Cross-entropy per labelled token ([B, L, K] against `label_ids` where `label_weights`)."""
    return _weighted_nll(logits, batch["label_ids"], token_weights(batch))


def span_sums(logits, batch) -> dict[str, jax.Array]:
    """The mean of the start and end cross-entropies (run_squad.py); `correct`: both right.

    Each softmax runs over the example's own tokens (input_mask), not over padding or the
    other examples packed in its row: then a packed row's losses are the unpacked ones.
    Positions and example_weight are [B], or [R, K] for the K examples packed in a row,
    positions then counted from the start of the row.
    """
    weights = batch["example_weight"].astype(jnp.float32)
    starts, ends = batch["start_positions"], batch["end_positions"]
    if weights.ndim == 1:  # one example a row: its slot 0, input_mask 1 on its tokens
        weights, starts, ends = weights[:, None], starts[:, None], ends[:, None]
    slots = jnp.arange(1, weights.shape[1] + 1)
    own = batch["input_mask"][:, None, :] == slots[None, :, None]  # [R, K, L]
    # The lowest float, not -inf: a slot without tokens (an empty one) stays finite.
    lowest = jnp.finfo(jnp.float32).min

    def per_example(logits):
        return jnp.where(own, logits.astype(jnp.float32)[:, None, :], lowest)

    start_logits, end_logits = (per_example(x) for x in logits)
    start = _weighted_nll(start_logits, starts, weights)
    end = _weighted_nll(end_logits, ends, weights)
    both = (jnp.argmax(start_logits, -1) == starts) & (jnp.argmax(end_logits, -1) == ends)
    return {
        "loss_sum": (start["loss_sum"] + end["loss_sum"]) / 2,
        "correct": jnp.sum(weights * both.astype(jnp.float32)),
        "weight": jnp.sum(weights),
    }


def summarize_finetune(sums) -> dict[str, float]:
    """Mean loss and accuracy (of examples, tokens or exact spans) from accumulated sums."""
    s = {key: float(np.asarray(sums[key])) for key in FINETUNE_SUM_KEYS}
    weight = max(s["weight"], 1.0)
    return {"loss": s["loss_sum"] / weight, "accuracy": s["correct"] / weight}


def in_batch_negatives_sums(
    outputs, batch, *, scale: float, symmetric: bool = False, dims: tuple[int, ...] = ()
) -> dict[str, jax.Array]:
    """The retrieval task's contrastive loss (sentence-transformers'
    MultipleNegativesRankingLoss): each query's cross-entropy over `scale` times its
    cosine similarity to every passage of the batch, its own positive the target.

    `outputs` are the embeddings of the whole global batch, queries [B, H] and passages
    [B, P, H] (the positive, then hard negatives): under jit they are the global arrays,
    so every query sees the candidates of every data-parallel shard and host. A passage
    whose text is the query's positive (`passage_keys`), or another positive of the same
    query text (`query_key`), is not a negative of it. `symmetric` averages in the
    positives' cross-entropy over the queries (MultipleNegativesSymmetricRankingLoss);
    `dims` sums the loss over those prefixes of the vectors (MatryoshkaLoss), () the
    whole vector. Accuracy: the positive ranks first (at the last of `dims`).
    """
    queries, passages = (x.astype(jnp.float32) for x in outputs)
    rows, width, _ = passages.shape
    weights = batch["example_weight"].astype(jnp.float32)
    candidates = passages.reshape(rows * width, -1)
    keys, query_key = batch["passage_keys"], batch["query_key"]
    hidden, target = _hidden_candidates(batch, rows, width)
    # The other way: positive i's other matches, the same query text or positive text.
    back_same = (query_key[None, :] == query_key[:, None]) | (keys[None, :, 0] == keys[:, None, 0])
    back_hidden = (back_same | (weights == 0)[None, :]) & ~jnp.eye(rows, dtype=bool)
    loss = jnp.zeros((rows,), jnp.float32)
    for dim in dims or (queries.shape[-1],):
        q, c = _unit(queries[:, :dim]), _unit(candidates[:, :dim])
        logits = jnp.where(hidden, -jnp.inf, scale * q @ c.T)
        row_loss = _cross_entropy(logits, target)
        if symmetric:
            back = jnp.where(back_hidden, -jnp.inf, scale * c[target] @ q.T)
            row_loss = (row_loss + _cross_entropy(back, jnp.arange(rows))) / 2
        loss = loss + row_loss
    hit = (jnp.argmax(logits, axis=-1) == target).astype(jnp.float32)  # at the last prefix
    return {
        "loss_sum": jnp.sum(weights * loss),
        "correct": jnp.sum(weights * hit),
        "weight": jnp.sum(weights),
    }


def _hidden_candidates(batch, rows: int, width: int):
    """(bool [B, B * P]: which of the batch's passages are not candidates of each query,
    int [B]: where its positive is among them). Not a negative of query i: a copy of its
    positive's text, another positive of its text, a padding row's passage. Its own
    positive stays the target."""
    keys, query_key = batch["passage_keys"], batch["query_key"]
    weights = batch["example_weight"]
    owner = jnp.arange(rows * width) // width  # the row each candidate comes from
    target = jnp.arange(rows) * width
    is_positive = jnp.arange(rows * width) % width == 0
    same = (keys.reshape(-1)[None, :] == keys[:, 0][:, None]) | (
        is_positive[None, :] & (query_key[owner][None, :] == query_key[:, None])
    )
    hidden = (same | (weights[owner] == 0)[None, :]) & (jnp.arange(rows * width) != target[:, None])
    return hidden, target


# ------------------------------------------------------------- embedding distillation

# config.loss.name of the retrieval task: in-batch negatives alone, or a teacher's
# outputs learned (with the in-batch negatives' loss beside, weighted).
EMBEDDING_LOSSES = ("in_batch", "mse", "kl", "margin_mse")


def embedding_distillation_sums(
    outputs,
    batch,
    *,
    loss: str,
    scale: float,
    distill_weight: float = 1.0,
    in_batch_weight: float = 0.0,
    margin_scale: float = 1.0,
    symmetric: bool = False,
    dims: tuple[int, ...] = (),
) -> dict[str, jax.Array]:
    """A student embedder's loss against its teacher, plus `in_batch_weight` times the
    in-batch negatives' loss (in_batch_negatives_sums, whose accuracy is reported). The
    teacher's vectors are `batch["teacher"]` (queries [B, H'], passages [B, P, H']):

        mse         each text's mean squared difference between the student's vector
                    and the teacher's (sentence-transformers' MSELoss), averaged over a
                    row's texts;
        kl          each query's KL divergence from the teacher's distribution over the
                    batch's candidates (softmax of `scale` times the cosines, the
                    in-batch negatives' candidates) to the student's: the teacher's
                    ranking, widths free to differ;
        margin_mse  Margin-MSE (Hofstaetter et al., 2020): the squared difference between
                    the student's margin of a row's positive over each of its hard
                    negatives and the teacher's, `batch["teacher_margins"]` [B, P - 1],
                    averaged over the negatives. The student's score of a passage is
                    `margin_scale` times its cosine, the order it is searched by (1:
                    sentence-transformers' dot product of normalized vectors); the
                    scale brings its margins to the size of the teacher's.
    """
    sums = in_batch_negatives_sums(outputs, batch, scale=scale, symmetric=symmetric, dims=dims)
    weights = batch["example_weight"].astype(jnp.float32)
    student = tuple(x.astype(jnp.float32) for x in outputs)
    if loss == "margin_mse":
        margins = batch["teacher_margins"].astype(jnp.float32)
        rows = _margin_mse_rows(student, margins, margin_scale)
    else:
        teacher = tuple(x.astype(jnp.float32) for x in batch["teacher"])
        rows = (
            _mse_rows(student, teacher)
            if loss == "mse"
            else _kl_rows(student, teacher, batch, scale)
        )
    distill = jnp.sum(weights * rows)
    return {
        **sums,
        "loss_sum": distill_weight * distill + in_batch_weight * sums["loss_sum"],
        "distill_sum": distill,
        "in_batch_sum": sums["loss_sum"],
    }


def _mse_rows(student, teacher):
    (queries, passages), (teacher_queries, teacher_passages) = student, teacher
    per_text = jnp.concatenate(
        [
            jnp.mean(jnp.square(queries - teacher_queries), axis=-1)[:, None],
            jnp.mean(jnp.square(passages - teacher_passages), axis=-1),
        ],
        axis=1,
    )
    return jnp.mean(per_text, axis=1)


def _kl_rows(student, teacher, batch, scale: float):
    rows, width, _ = student[1].shape
    hidden, _ = _hidden_candidates(batch, rows, width)

    def log_probs(queries, passages):
        candidates = _unit(passages.reshape(rows * width, -1))
        # A finite floor, not -inf: the hidden terms' (-inf) - (-inf) would make their
        # gradient NaN even where they are masked out.
        logits = jnp.where(hidden, -1e9, scale * _unit(queries) @ candidates.T)
        return jax.nn.log_softmax(logits, axis=-1)

    ours, theirs = log_probs(*student), log_probs(*teacher)
    return jnp.sum(jnp.where(hidden, 0.0, jnp.exp(theirs) * (theirs - ours)), axis=-1)


def _margin_mse_rows(student, teacher_margins, scale: float):
    queries, passages = student
    scores = scale * jnp.einsum("bh,bph->bp", _unit(queries), _unit(passages))
    margins = scores[:, :1] - scores[:, 1:]
    return jnp.mean(jnp.square(margins - teacher_margins), axis=-1)


def summarize_embedding_distillation(sums) -> dict[str, float]:
    """summarize_finetune's loss and accuracy, and the two losses it sums, unweighted."""
    weight = max(float(np.asarray(sums["weight"])), 1.0)
    return {
        **summarize_finetune(sums),
        "distill_loss": float(np.asarray(sums["distill_sum"])) / weight,
        "in_batch_loss": float(np.asarray(sums["in_batch_sum"])) / weight,
    }


def _unit(x):
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def _cross_entropy(logits, target):
    return (
        jax.nn.logsumexp(logits, axis=-1) - jnp.take_along_axis(logits, target[:, None], -1)[:, 0]
    )


# ------------------------------------------------------------------ reranking
# A cross-encoder scores each (query, candidate) pair with one logit. A batch holds
# groups: row b is a query and its G candidates, `labels` float32 [B, G] their relevance
# and `candidate_weight` [B, G] 1 where a candidate is there (0 pads a shorter group).
# Every loss reads the logit itself, never a sigmoid of it: a saturating activation
# flattens the listwise losses' differences between candidates.
RERANKING_LOSSES = ("bce", "listnet", "lambdaloss")
# LambdaLoss's weighting: NDCG-Loss2++ (Wang et al., 2018, "The LambdaLoss Framework for
# Ranking Metric Optimization", section 4.3: the strongest of its schemes), its mu.
LAMBDALOSS_MU = 10.0


def reranking_sums(logits, batch, *, loss: str, pos_weight: float = 1.0) -> dict[str, jax.Array]:
    """The loss sum of [B, G] logits over the batch's groups (its denominator is
    `reranking_weight`'s), and `correct`: the group's top-scored candidate is relevant
    (label above 0), or, for groups of one pair, the logit's sign is the label's.

    bce          binary cross-entropy of each pair against its label in [0, 1], the
                 positives' term times `pos_weight`; a mean over pairs.
    listnet      each group's cross-entropy between the softmax of its logits and the
                 softmax of its labels (ListNet's top-one probabilities, Cao et al.,
                 2007); a mean over groups.
    lambdaloss   over each pair of a group's candidates whose labels differ, the
                 log-sigmoid of their logits' difference in the order the labels say,
                 weighted by what swapping them costs the group's nDCG (NDCG-Loss2++,
                 mu LAMBDALOSS_MU; logarithms in base 2); a mean over such pairs.
    """
    x = logits.astype(jnp.float32)
    labels = batch["labels"].astype(jnp.float32)
    valid = batch["candidate_weight"] > 0
    group_weight = batch["example_weight"].astype(jnp.float32)
    weights = group_weight[:, None] * valid
    if loss == "bce":
        per_pair = pos_weight * labels * jax.nn.softplus(-x) + (1 - labels) * jax.nn.softplus(x)
        loss_sum = jnp.sum(weights * per_pair)
    elif loss == "listnet":
        masked = jnp.where(valid, x, -jnp.inf)
        target = jax.nn.softmax(jnp.where(valid, labels, -jnp.inf), axis=-1)
        log_probs = jax.nn.log_softmax(masked, axis=-1)
        per_group = -jnp.sum(jnp.where(valid, target * log_probs, 0.0), axis=-1)
        loss_sum = jnp.sum(group_weight * per_group)
    elif loss == "lambdaloss":
        loss_sum = jnp.sum(group_weight * _lambdaloss_per_group(x, labels, valid))
    else:
        raise ValueError(f"unknown reranking loss {loss!r}: one of {RERANKING_LOSSES}")
    if x.shape[1] == 1:
        hit = (x[:, 0] > 0) == (labels[:, 0] > 0.5)
    else:
        top = jnp.argmax(jnp.where(valid, x, -jnp.inf), axis=-1)
        hit = jnp.take_along_axis(labels, top[:, None], axis=-1)[:, 0] > 0
    return {
        "loss_sum": loss_sum,
        "correct": jnp.sum(group_weight * hit),
        "weight": reranking_weight(batch, loss=loss),
        "groups": jnp.sum(group_weight),
    }


def reranking_weight(batch, *, loss: str) -> jax.Array:
    """What the loss sum is divided by: the batch's pairs (bce), groups (listnet), or
    pairs of candidates with different labels (lambdaloss). From the labels alone, so
    that microbatches divide by the whole batch's."""
    valid = batch["candidate_weight"] > 0
    group_weight = batch["example_weight"].astype(jnp.float32)
    if loss == "bce":
        return jnp.sum(group_weight[:, None] * valid)
    if loss == "listnet":
        return jnp.sum(group_weight)
    return jnp.sum(group_weight * jnp.sum(_ordered_pairs(batch["labels"], valid), axis=(1, 2)))


def summarize_reranking(sums) -> dict[str, float]:
    """The mean loss, and the share of groups whose top-scored candidate is relevant."""
    s = {key: float(np.asarray(sums[key])) for key in ("loss_sum", "correct", "weight", "groups")}
    return {
        "loss": s["loss_sum"] / max(s["weight"], 1.0),
        "accuracy": s["correct"] / max(s["groups"], 1.0),
    }


def _ordered_pairs(labels, valid) -> jax.Array:
    """[B, G, G]: candidates i and j both there, and i's label above j's."""
    labels = labels.astype(jnp.float32)
    both = valid[:, :, None] & valid[:, None, :]
    return (both & (labels[:, :, None] > labels[:, None, :])).astype(jnp.float32)


def _lambdaloss_per_group(x, labels, valid) -> jax.Array:
    """Each group's LambdaLoss sum over its ordered pairs, computed in the order of the
    logits (the nDCG weights depend on the ranks the model gives)."""
    size = x.shape[1]
    order = jnp.argsort(jnp.where(valid, -x, jnp.inf), axis=-1)  # best first, absent last
    scores = jnp.take_along_axis(x, order, axis=-1)
    gains_at = jnp.take_along_axis(jnp.where(valid, labels, 0.0), order, axis=-1)
    present = jnp.take_along_axis(valid, order, axis=-1)
    ideal = -jnp.sort(-jnp.where(valid, labels, 0.0), axis=-1)
    discount = jnp.log2(1.0 + jnp.arange(1, size + 1, dtype=jnp.float32))
    max_dcg = jnp.maximum(jnp.sum((2.0**ideal - 1) / discount, axis=-1), 1e-10)
    gain = (2.0**gains_at - 1) / max_dcg[:, None]
    gain_gap = jnp.abs(gain[:, :, None] - gain[:, None, :])
    # NDCG-Loss2: |1/D(|i-j|) - 1/D(|i-j| + 1)|, D(k) = log2(1 + k); LambdaRank: |1/D_i - 1/D_j|.
    rank = jnp.arange(1, size + 1)
    gap = jnp.abs(rank[:, None] - rank[None, :])
    at = jnp.log2(1.0 + jnp.maximum(gap, 1).astype(jnp.float32))
    delta = jnp.where(gap > 0, jnp.abs(1 / at - 1 / jnp.log2(2.0 + gap)), 0.0)
    lambda_rank = jnp.abs(1 / discount[:, None] - 1 / discount[None, :])
    pair_weight = (LAMBDALOSS_MU * delta + lambda_rank)[None] * gain_gap
    pairs = _ordered_pairs(gains_at, present)
    difference = jnp.clip(scores[:, :, None] - scores[:, None, :], -1e8, 1e8)
    per_pair = -pair_weight * jax.nn.log_sigmoid(difference) / np.log(2.0)
    return jnp.sum(jnp.where(pairs > 0, per_pair, 0.0), axis=(1, 2))
