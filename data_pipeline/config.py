"""The typed, validated view of `config.data`.

Defaults live in the experiment config (experiments/pretrain/tiny_cpu.py); this
module only checks them. Every check runs before any file is read, and every
error names the option it is about.
"""

import dataclasses
from typing import Any

SOURCES = ("builtin", "text", "tfds", "tfrecord")
TOKENIZERS = ("wordpiece", "sentencepiece")
# [CLS] A [SEP] B [SEP] needs three specials plus one token on each side.
MIN_SEQ_LENGTH = 5


class ConfigError(ValueError):
    """An inconsistent or out-of-range data option."""


@dataclasses.dataclass(frozen=True)
class DataConfig:
    source: str
    text_files: str
    tfds_name: str
    tfds_split: str
    tfds_data_dir: str
    tfds_text_field: str
    tfrecord_train_files: str
    tfrecord_eval_files: str
    eval_fraction: float
    tokenizer: str
    vocab_file: str
    vocab_size: int
    vocab_cache_dir: str
    do_lower_case: bool
    max_chars_per_word: int
    max_seq_length: int
    max_predictions_per_seq: int
    masked_lm_prob: float
    mask_token_prob: float
    random_token_prob: float
    whole_word_mask: bool
    short_seq_prob: float
    random_next_prob: float
    document_buffer_size: int
    shuffle_buffer_size: int
    dupe_factor: int
    eval_seed: int

    def __post_init__(self):
        _check(self)

    def replace(self, **changes) -> "DataConfig":
        return dataclasses.replace(self, **changes)


def from_config(data_config: Any) -> "DataConfig":
    """Builds a DataConfig from a ConfigDict, a dict or a DataConfig; unknown keys fail."""
    if isinstance(data_config, DataConfig):
        return data_config
    values = data_config.to_dict() if hasattr(data_config, "to_dict") else dict(data_config)
    names = {f.name for f in dataclasses.fields(DataConfig)}
    unknown = sorted(set(values) - names)
    missing = sorted(names - set(values))
    if unknown:
        raise ConfigError(
            f"unknown data option(s): {', '.join('config.data.' + k for k in unknown)}"
        )
    if missing:
        raise ConfigError(
            f"missing data option(s): {', '.join('config.data.' + k for k in missing)}"
        )
    return DataConfig(**values)


def check_max_positions(config: DataConfig, max_position_embeddings: int) -> None:
    if config.max_seq_length > max_position_embeddings:
        raise ConfigError(
            f"config.data.max_seq_length={config.max_seq_length} is above the model's "
            f"max_position_embeddings={max_position_embeddings}"
        )


def _fail(option: str, value: Any, why: str) -> None:
    raise ConfigError(f"config.data.{option}={value!r}: {why}")


def _check(c: DataConfig) -> None:
    if c.source not in SOURCES:
        _fail("source", c.source, f"must be one of {', '.join(SOURCES)}")
    if c.source == "text" and not c.text_files.strip():
        _fail("text_files", c.text_files, "source='text' needs at least one glob")
    if c.source == "tfds" and not c.tfds_name:
        _fail("tfds_name", c.tfds_name, "source='tfds' needs a dataset name")
    if c.source == "tfrecord" and not c.tfrecord_train_files.strip():
        _fail("tfrecord_train_files", c.tfrecord_train_files, "source='tfrecord' needs a glob")
    if not 0.0 <= c.eval_fraction < 1.0:
        _fail("eval_fraction", c.eval_fraction, "must be in [0, 1)")
    if c.tokenizer not in TOKENIZERS:
        _fail("tokenizer", c.tokenizer, f"must be one of {', '.join(TOKENIZERS)}")
    if not c.vocab_file and c.vocab_size < 64:
        _fail("vocab_size", c.vocab_size, "a learned vocabulary needs at least 64 entries")
    if c.max_chars_per_word < 1:
        _fail("max_chars_per_word", c.max_chars_per_word, "must be at least 1")
    if c.max_seq_length < MIN_SEQ_LENGTH:
        _fail(
            "max_seq_length",
            c.max_seq_length,
            f"must be at least {MIN_SEQ_LENGTH} ([CLS] A [SEP] B [SEP])",
        )
    if c.max_predictions_per_seq < 1:
        _fail("max_predictions_per_seq", c.max_predictions_per_seq, "must be at least 1")
    if c.max_predictions_per_seq > c.max_seq_length - 3:
        _fail(
            "max_predictions_per_seq",
            c.max_predictions_per_seq,
            f"cannot exceed max_seq_length - 3 = {c.max_seq_length - 3} maskable tokens",
        )
    for name in (
        "masked_lm_prob",
        "mask_token_prob",
        "random_token_prob",
        "short_seq_prob",
        "random_next_prob",
    ):
        value = getattr(c, name)
        if not 0.0 <= value <= 1.0:
            _fail(name, value, "must be a probability in [0, 1]")
    if c.masked_lm_prob == 0.0:
        _fail("masked_lm_prob", c.masked_lm_prob, "must be above 0")
    if c.mask_token_prob + c.random_token_prob > 1.0:
        _fail(
            "random_token_prob",
            c.random_token_prob,
            f"mask_token_prob + random_token_prob = {c.mask_token_prob + c.random_token_prob} > 1",
        )
    if c.document_buffer_size < 2:
        _fail("document_buffer_size", c.document_buffer_size, "must be at least 2 (NotNext)")
    if c.shuffle_buffer_size < 1:
        _fail("shuffle_buffer_size", c.shuffle_buffer_size, "must be at least 1")
    if c.dupe_factor < 1:
        _fail("dupe_factor", c.dupe_factor, "must be at least 1")
