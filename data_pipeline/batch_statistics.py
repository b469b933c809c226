"""What a person checks in pretraining batches: decoded examples and running statistics."""

import dataclasses

import numpy as np

from data_pipeline import corpus
from data_pipeline.vocab import Vocab


@dataclasses.dataclass
class BatchStatistics:
    """Running totals over batches in the schema of schema.py; with `next_sentence` False,
    of masked LM alone (no next_sentence_labels)."""

    max_seq_length: int
    max_predictions_per_seq: int
    next_sentence: bool = True
    sequences: int = 0
    tokens: int = 0
    short_sequences: int = 0
    not_next: int = 0
    predictions: int = 0
    predictions_at_cap: int = 0
    as_mask: int = 0
    as_random: int = 0
    as_same: int = 0
    specials_predicted: int = 0
    length_histogram: np.ndarray = dataclasses.field(default=None)

    def __post_init__(self):
        if self.length_histogram is None:
            self.length_histogram = np.zeros(self.max_seq_length + 1, np.int64)

    def update(self, batch: dict, vocab: Vocab) -> None:
        mask = np.asarray(batch["input_mask"])
        ids = np.asarray(batch["input_ids"])
        weights = np.asarray(batch["masked_lm_weights"]) > 0
        positions = np.asarray(batch["masked_lm_positions"])
        labels = np.asarray(batch["masked_lm_ids"])
        lengths = mask.sum(axis=1)
        self.sequences += len(lengths)
        self.tokens += int(lengths.sum())
        self.length_histogram += np.bincount(lengths, minlength=self.max_seq_length + 1)
        self.short_sequences += int((lengths < self.max_seq_length // 2).sum())
        if self.next_sentence:
            self.not_next += int(np.asarray(batch["next_sentence_labels"]).sum())
        per_row = weights.sum(axis=1)
        self.predictions += int(per_row.sum())
        self.predictions_at_cap += int((per_row == self.max_predictions_per_seq).sum())
        rows = np.nonzero(weights)[0]
        now = ids[rows, positions[weights]]
        original = labels[weights]
        self.as_mask += int((now == vocab.mask_id).sum())
        self.as_same += int((now == original).sum())
        self.as_random += int(((now != vocab.mask_id) & (now != original)).sum())
        self.specials_predicted += int(
            np.isin(original, [vocab.cls_id, vocab.sep_id, vocab.pad_id]).sum()
        )

    def summary(self) -> dict:
        n = max(self.sequences, 1)
        lengths = np.repeat(np.arange(self.max_seq_length + 1), self.length_histogram)
        predictions = max(self.predictions, 1)
        return {
            "sequences": self.sequences,
            "tokens": self.tokens,
            "length_mean": float(lengths.mean()) if lengths.size else 0.0,
            "length_min": int(lengths.min()) if lengths.size else 0,
            "length_p50": float(np.percentile(lengths, 50)) if lengths.size else 0.0,
            "length_max": int(lengths.max()) if lengths.size else 0,
            "share_full_length": float(self.length_histogram[-1] / n),
            "share_short": self.short_sequences / n,
            "share_not_next": self.not_next / n if self.next_sentence else None,
            "predictions_per_sequence": self.predictions / n,
            "share_tokens_predicted": self.predictions / max(self.tokens, 1),
            "share_sequences_at_prediction_cap": self.predictions_at_cap / n,
            "share_mask_token": self.as_mask / predictions,
            "share_random_token": self.as_random / predictions,
            "share_unchanged": self.as_same / predictions,
            "specials_predicted": self.specials_predicted,
            "share_padding": 1.0 - self.tokens / (n * self.max_seq_length),
        }


def format_summary(summary: dict, corpus_stats: dict | None = None) -> str:
    s = summary
    lines = [
        f"sequences            {s['sequences']:,} ({s['tokens']:,} tokens)",
        f"length               mean {s['length_mean']:.1f}, median {s['length_p50']:.0f}, "
        f"min {s['length_min']}, max {s['length_max']}; "
        f"{s['share_full_length']:.1%} full length",
        f"short (< half max)   {s['share_short']:.1%}",
        *(
            [
                f"NSP                  {s['share_not_next']:.1%} NotNext, "
                f"{1 - s['share_not_next']:.1%} IsNext"
            ]
            if s["share_not_next"] is not None
            else []
        ),
        f"masked per sequence  {s['predictions_per_sequence']:.2f} "
        f"({s['share_tokens_predicted']:.1%} of tokens; "
        f"{s['share_sequences_at_prediction_cap']:.1%} of sequences at the cap)",
        f"masked as            {s['share_mask_token']:.1%} [MASK], "
        f"{s['share_random_token']:.1%} random, {s['share_unchanged']:.1%} unchanged",
        f"specials masked      {s['specials_predicted']}",
        f"padding              {s['share_padding']:.1%} of positions",
    ]
    if corpus_stats:
        c = corpus_stats
        lines += [
            # Counted as read, so training's read-ahead and later passes are included.
            f"documents read       {c['documents_read']:,} (all passes, read-ahead included; "
            f"{c['documents_in_other_split']:,} belong to the other split), "
            f"{c['sentences_read']:,} sentences, {c['files_read']:,} files",
            f"skipped              {c['empty_lines_skipped']:,} empty lines, "
            f"{c['invalid_bytes']:,} invalid UTF-8 bytes, "
            f"{c['control_characters']:,} control characters",
            f"cut                  {c['long_lines_cut']:,} lines longer than "
            f"{corpus.MAX_LINE_BYTES:,} bytes ({c['long_line_bytes_skipped']:,} bytes skipped)",
        ]
    return "\n".join(lines)


def format_example(example: dict, vocab: Vocab) -> str:
    """One example (no batch axis) as text: `[MASK]{dog}` a masked token, `~cat{dog}` a random
    replacement, `={dog}` one kept. An example of masked LM alone (no next_sentence_labels)
    is one segment, shown without a B line."""
    ids = np.asarray(example["input_ids"])[: int(np.asarray(example["input_mask"]).sum())]
    tokens = vocab.decode(ids)
    weights = np.asarray(example["masked_lm_weights"]) > 0
    positions = np.asarray(example["masked_lm_positions"])[weights].tolist()
    labels = vocab.decode(np.asarray(example["masked_lm_ids"])[weights])
    masked = dict(zip(positions, labels, strict=True))
    segments = np.asarray(example["segment_ids"])
    parts: list[list[str]] = [[], []]
    for position, token in enumerate(tokens):
        label = masked.get(position)
        if label is None:
            shown = token
        elif token == label:
            shown = f"={{{label}}}"
        elif int(ids[position]) == vocab.mask_id:
            shown = f"[MASK]{{{label}}}"
        else:
            shown = f"~{token}{{{label}}}"
        parts[int(segments[position])].append(shown)
    head = f"{len(tokens)} tokens, {len(masked)} masked"
    if "next_sentence_labels" not in example:
        return f"{head}\n  A: {' '.join(parts[0])}"
    label = "NotNext" if int(example["next_sentence_labels"]) else "IsNext"
    return f"{label}, {head}\n  A: {' '.join(parts[0])}\n  B: {' '.join(parts[1])}"
