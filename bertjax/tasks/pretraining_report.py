"""What a person reads at the end of a run: held-out accuracy against baselines, and fill-mask.

The baselines are what a model with no understanding scores on the same
held-out batches: always predicting the most frequent masked token, and always
predicting the more frequent NSP label (none of masked LM alone).
"""

import collections
import functools
import random
import re

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow as tf

from data_pipeline import config as data_config_lib
from data_pipeline import corpus, make_pretraining_dataset
from data_pipeline.finetune import records
from data_pipeline.tokenizer import bpe_text

MASK_TEXT = "[MASK]"
_WORD = re.compile(r"[A-Za-z]{4,}")


def baselines(data_config, *, batch_size: int, num_batches: int) -> dict:
    """Accuracies of constant predictions on the held-out batches the evaluation uses; no
    NSP entries for batches of masked LM alone."""
    dataset = make_pretraining_dataset(data_config, split="eval", batch_size=batch_size, seed=0)
    if num_batches:
        dataset = dataset.take(num_batches)
    tokens = collections.Counter()
    nsp = collections.Counter()
    for batch in dataset.as_numpy_iterator():
        weights = batch["masked_lm_weights"] > 0
        tokens.update(batch["masked_lm_ids"][weights].tolist())
        if "next_sentence_labels" not in batch:  # masked LM alone
            continue
        labels = batch["next_sentence_labels"]
        if "next_sentence_weights" in batch:  # packed rows: the labels of their sequences
            labels = labels[batch["next_sentence_weights"] > 0]
        nsp.update(labels.tolist())
    token, token_count = tokens.most_common(1)[0]
    out = {"mlm_token": token, "mlm_accuracy": token_count / sum(tokens.values())}
    if nsp:
        label, label_count = nsp.most_common(1)[0]
        out.update(nsp_label=label, nsp_accuracy=label_count / sum(nsp.values()))
    return out


def held_out_sentences(data_config, count: int, seed: int = 0) -> list[tuple[str, str]]:
    """`count` held-out sentences, each with one word swapped for [MASK]: (masked, word)."""
    rng = random.Random(seed)
    picked = []
    for document in corpus.iter_documents(data_config, split="eval"):
        for sentence in document.sentences:
            words = sentence.split()
            candidates = list(_WORD.finditer(sentence))
            if 8 <= len(words) <= 24 and candidates:
                match = rng.choice(candidates)
                masked = sentence[: match.start()] + MASK_TEXT + sentence[match.end() :]
                picked.append((masked, match.group()))
                break
        if len(picked) == count:
            break
    return picked


def print_report(restored, config, last_eval: dict, *, fill_mask_examples: int, out) -> None:
    data = data_config_lib.from_config(config.data)
    vocab = restored.tokenizer.vocab
    data = data.replace(vocab_file=restored.tokenizer.vocab.path)
    if not last_eval:
        print("\nno held-out evaluation (config.eval_every_steps=0)", file=out)
    else:
        base = baselines(data, batch_size=config.eval_batch_size, num_batches=config.num_eval_steps)
        print(
            f"\nheld-out MLM accuracy {last_eval['mlm_accuracy']:.3f} "
            f"(baseline {base['mlm_accuracy']:.3f}: always {vocab.tokens[base['mlm_token']]!r}); "
            f"perplexity {last_eval['mlm_perplexity']:.1f}",
            file=out,
        )
        if "nsp_accuracy" in base:
            label = "NotNext" if base["nsp_label"] else "IsNext"
            print(
                f"held-out NSP accuracy {last_eval['nsp_accuracy']:.3f} "
                f"(baseline {base['nsp_accuracy']:.3f}: always {label})",
                file=out,
            )
    if not fill_mask_examples:
        return
    sentences = held_out_sentences(data, fill_mask_examples)
    if not sentences:
        print(
            f"\nno held-out sentences to fill (config.data.eval_fraction={data.eval_fraction})",
            file=out,
        )
    else:
        print(f"\nfill-mask on held-out sentences (model at step {restored.step}):", file=out)
    for masked, word in sentences:
        [top] = fill_mask(restored, masked, top_k=5)
        # A byte-level BPE guess is text with its leading space (" level").
        guesses = "  ".join(f"{token.strip()} {p:.2f}" for token, p in top)
        hit = "*" if word.lower() in [token.strip().lower() for token, _ in top] else " "
        print(f"  {masked}\n    answer {word!r}{hit}  top 5: {guesses}", file=out)


def fill_mask(restored, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    """For each `[MASK]` in `text`, the `top_k` tokens and their probabilities (of a
    byte-level BPE, the tokens' text: "fox" for "Ġfox", with its space in front)."""
    restored.require_pretraining_heads("fill_mask")
    vocab = restored.tokenizer.vocab
    pieces = text.split(MASK_TEXT)
    if len(pieces) < 2:
        raise ValueError(f"no {MASK_TEXT} in {text!r}")
    if vocab.kind == "bpe":
        # A byte-level token carries the space before it, so the mask takes the space
        # before it too (ModernBERT's [MASK] strips it: lstrip).
        pieces = [piece.rstrip() for piece in pieces[:-1]] + pieces[-1:]
    encoded = restored.tokenizer.tokenize(tf.constant(pieces)).to_list()
    ids = [vocab.cls_id]
    positions = []
    for index, piece in enumerate(encoded):
        if index:
            positions.append(len(ids))
            ids.append(vocab.mask_id)
        ids.extend(piece)
    ids.append(vocab.sep_id)
    if len(ids) > restored.max_seq_length:
        raise ValueError(
            f"{len(ids)} tokens: longer than the model's max_seq_length {restored.max_seq_length}"
        )
    # Padded (one compile serves texts of similar lengths), the padding masked out: the
    # model's outputs at the masks are those of the text alone.
    width = records.power_of_two_width(len(ids), restored.max_seq_length)
    input_ids, input_mask = np.zeros((2, 1, width), np.int32)
    input_ids[0, : len(ids)], input_mask[0, : len(ids)] = ids, 1
    probs = np.asarray(
        _mlm_probabilities(
            restored.model,
            restored.params,
            input_ids,
            input_mask,
            np.asarray([positions], np.int32),
        )
    )
    results = []
    for row in probs:
        best = np.argsort(-row)[:top_k]
        results.append([(_token_text(vocab, i), float(row[i])) for i in best])
    return results


@functools.partial(jax.jit, static_argnums=0)
def _mlm_probabilities(model, params, input_ids, input_mask, positions):
    """The masked LM's probabilities at `positions` of one row: [positions, vocab]. Jitted:
    run op by op, one text cost seconds of compiling each of its operations."""
    mlm_logits, _ = model.apply(
        {"params": params},
        input_ids,
        input_mask,
        jnp.zeros_like(input_ids),
        positions,
        deterministic=True,
    )
    return jax.nn.softmax(mlm_logits[0], axis=-1)


def _token_text(vocab, i: int) -> str:
    if vocab.kind != "bpe" or vocab.is_special[i]:
        return vocab.tokens[i]
    return bpe_text([vocab.tokens[i]])
