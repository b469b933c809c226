"""The typed, validated view of `config.data`.

DataConfig's defaults are the pipeline's: `default_config()` is the ConfigDict
that experiment configs start from (experiments/pretrain/tiny_cpu.py). Every
check runs before any file is read, and every error names the option it is about.
"""

import dataclasses
import difflib
import os
from collections.abc import Iterable
from typing import Any, NoReturn

import ml_collections

from data_pipeline.errors import ConfigError

SOURCES = ("builtin", "text", "tfds", "tfrecord")
TOKENIZERS = ("wordpiece", "sentencepiece", "bpe")
# A learned byte-level BPE vocabulary holds the five specials and all 256 bytes.
MIN_BPE_VOCAB_SIZE = 5 + 256
# [CLS] A [SEP] B [SEP] needs three specials plus one token on each side.
MIN_SEQ_LENGTH = 5
# The files of a fine-tuning task's examples, by extension (data_pipeline/finetune/).
FILE_FORMATS = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}


@dataclasses.dataclass(frozen=True)
class DataConfig:
    # Where documents come from: 'builtin' (Python's own docs), 'text', 'tfds' or 'tfrecord'.
    source: str = "builtin"
    # source='text': comma-separated globs of files in the original BERT format (.gz ok).
    text_files: str = ""
    # source='tfds': dataset name with config/version, e.g. 'wikipedia/20230601.en'.
    tfds_name: str = ""
    # source='tfds': the TFDS split that holds the documents (held-out docs are carved from it).
    tfds_split: str = "train"
    # source='tfds': TFDS data_dir, a local path or gs://...; '' uses the TFDS default.
    tfds_data_dir: str = ""
    # source='tfds': the feature holding a document's text.
    tfds_text_field: str = "text"
    # source='tfrecord': comma-separated globs of offline training instances.
    tfrecord_train_files: str = ""
    # source='tfrecord': comma-separated globs of offline evaluation instances.
    tfrecord_eval_files: str = ""
    # Share of documents (by a hash of their text) held out for evaluation.
    eval_fraction: float = 0.1
    # 'wordpiece' (BERT's), 'sentencepiece', or 'bpe': a byte-level BPE tokenizer.json
    # (GPT-2's, RoBERTa's, ModernBERT's) run by Hugging Face tokenizers (tokenizer.py).
    tokenizer: str = "wordpiece"
    # vocab.txt or tokenizer.json (wordpiece), a .model file (sentencepiece), a BPE
    # tokenizer.json (bpe); '' learns one.
    vocab_file: str = ""
    # Size of the vocabulary learned when vocab_file is ''.
    vocab_size: int = 4096
    # Where learned vocabularies are cached; '' means $XDG_CACHE_HOME/bertjax.
    vocab_cache_dir: str = ""
    # Uncased model: lowercase and strip accents before WordPiece (sentencepiece: lowercase;
    # bpe: must match whether the tokenizer.json's normalizer lowercases).
    do_lower_case: bool = True
    # A word longer than this many characters becomes [UNK] (BERT: 200).
    max_chars_per_word: int = 200
    # Tokens per sequence, [CLS] and both [SEP] included.
    max_seq_length: int = 128
    # Masked positions per sequence, padded with weight 0 (BERT: 20 at 128, 80 at 512).
    max_predictions_per_seq: int = 20
    # Share of tokens to predict, in training (BERT: 0.15; ModernBERT: 0.3, Warner et al.
    # 2024, section 2.2).
    masked_lm_prob: float = 0.15
    # Share of tokens to predict in the eval split (the held-out set, masked once from
    # eval_seed; offline, as the writer masked it); 0.0: masked_lm_prob. A model trained
    # at 0.3 is commonly scored at 0.15.
    eval_masked_lm_prob: float = 0.0
    # Of the predicted tokens: share replaced by [MASK].
    mask_token_prob: float = 0.8
    # Of the predicted tokens: share replaced by a random non-special token (the rest stay).
    random_token_prob: float = 0.1
    # Mask whole words (a token and its ## pieces) instead of single pieces.
    whole_word_mask: bool = False
    # Probability that a document pass aims at a random shorter length.
    short_seq_prob: float = 0.1
    # Sentence pairs for next-sentence prediction, and its loss (BERT). False: masked LM
    # alone (RoBERTa; ModernBERT, Warner et al. 2024, section 2.2): each sequence is
    # `[CLS] text [SEP]`, contiguous text of one document, segment ids 0, with no
    # next_sentence_labels (schema.py); the options of pairs below go unused.
    next_sentence_prediction: bool = True
    # Probability that segment B comes from another document (NotNext).
    random_next_prob: float = 0.5
    # Online: documents per chunk, the unit that NotNext segments come from, whose instances
    # are shuffled together and where a resumed stream restarts (pretraining_input.py). Offline
    # writer: documents held to draw NotNext segments from and to shuffle document order.
    document_buffer_size: int = 256
    # source='tfrecord' only: records shuffled together before batching.
    shuffle_buffer_size: int = 2048
    # Offline writer: masked copies of each document pass (BERT: 10).
    dupe_factor: int = 10
    # Seed of the fixed evaluation masking, so an eval set is identical across runs.
    eval_seed: int = 1234
    # Several sentence pairs share each row of max_seq_length tokens, each attending and
    # predicted on its own (pretraining_input.py, tfrecords.py; Krell et al. 2021). Batch sizes
    # then count rows, and max_predictions_per_seq bounds a row's masked positions (its
    # pairs' together).
    pack_examples: bool = False
    # pack_examples: the most pairs one row holds (Krell et al. pack BERT's at most 3 deep).
    max_sequences_per_row: int = 3
    # Online sources: processes that make the stream's sentence pairs and masks (workers.py),
    # so that they use more than one core; 0 makes them in tf.data's threads, in this
    # process. The batches are the same either way.
    num_workers: int = 0

    def __post_init__(self):
        _check(self)

    def replace(self, **changes) -> "DataConfig":
        return dataclasses.replace(self, **changes)

    def masking_rate(self, split: str) -> float:
        """The share of tokens the `split` split predicts."""
        if split == "eval" and self.eval_masked_lm_prob:
            return self.eval_masked_lm_prob
        return self.masked_lm_prob


def read_config_file(spec: str) -> ml_collections.ConfigDict:
    """The config of an experiment file, `FILE.py` or `FILE.py:ARG`, as --config reads it."""
    from absl import flags
    from ml_collections import config_flags

    path = spec.split(":")[0]
    if not path.endswith(".py") or not os.path.isfile(path):
        raise ConfigError(f"{spec}: no such experiment config (a .py file, FILE.py[:ARG])")
    values = flags.FlagValues()
    argv = ["", f"--config={spec}"]
    # sys_argv: the overrides are these, not the program's (whose --config.KEY=VALUE
    # flags are of its own config, and may name keys this one has not).
    config_flags.DEFINE_config_file("config", None, flag_values=values, sys_argv=argv)
    try:
        values(argv)
    except (flags.IllegalFlagValueError, SyntaxError) as error:
        cause = str(error).strip().splitlines()[-1]
        raise ConfigError(f"{spec}: not an experiment config ({cause})") from None
    return values.config


def default_config() -> ml_collections.ConfigDict:
    """Every data option at its default (DataConfig documents them): what experiments start from."""
    return config_dict(DataConfig)


def config_dict(config_class) -> ml_collections.ConfigDict:
    """A config dataclass's defaults as a ConfigDict, one key per field."""
    return ml_collections.ConfigDict(
        {field.name: field.default for field in dataclasses.fields(config_class)}
    )


def from_config(data_config: Any) -> "DataConfig":
    """Builds a DataConfig from a ConfigDict, a dict or a DataConfig; unknown keys fail."""
    if isinstance(data_config, DataConfig):
        return data_config
    values = data_config.to_dict() if hasattr(data_config, "to_dict") else dict(data_config)
    names = {f.name for f in dataclasses.fields(DataConfig)}
    check_known_keys(values, names, "config.data")
    missing = sorted(names - set(values))
    if missing:
        raise ConfigError(
            f"missing data option(s): {', '.join('config.data.' + k for k in missing)}"
        )
    return DataConfig(**values)


def check_known_keys(
    keys: Iterable[str], allowed: Iterable[str], prefix: str, *, elsewhere: Iterable[str] = ()
) -> None:
    """Fails on the first of `keys` not in `allowed`, naming it and the closest allowed key.

    `prefix` is where the keys sit, as a command line spells it (`config`,
    `config.optimizer`), so the message reads like the option to fix.
    `elsewhere` holds full paths of keys at other depths
    (`config.optimizer.learning_rate`): when no allowed key is close, the one
    whose last name is closest is suggested, for a key put at the wrong depth.
    """
    allowed = sorted(allowed)
    unknown = sorted(set(keys) - set(allowed))
    if not unknown:
        return
    key = unknown[0]
    close = [f"{prefix}.{k}" for k in difflib.get_close_matches(key, allowed, n=1)]
    if not close:
        wrong = f"{prefix}.{key}"  # itself and its own keys, when `elsewhere` holds them
        paths = {
            path.rsplit(".", 1)[-1]: path
            for path in reversed(list(elsewhere))
            if path != wrong and not path.startswith(wrong + ".")
        }
        close = [paths[k] for k in difflib.get_close_matches(key, list(paths), n=1)]
    hint = f"did you mean {close[0]}?" if close else f"known keys: {', '.join(allowed)}"
    if unknown[1:]:
        hint += f" (also unknown: {', '.join(f'{prefix}.{k}' for k in unknown[1:])})"
    raise ConfigError(f"unknown config key: {prefix}.{key}; {hint}")


def task_config(config_class: type, data_config: Any) -> Any:
    """A `config_class` from a ConfigDict, a dict or itself; unknown keys fail; lists -> tuples."""
    if isinstance(data_config, config_class):
        return data_config
    values = data_config.to_dict() if hasattr(data_config, "to_dict") else dict(data_config)
    check_known_keys(values, [f.name for f in dataclasses.fields(config_class)], "config.data")
    return config_class(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def key_paths(config: Any, prefix: str) -> list[str]:
    """The full path of every key in a nested ConfigDict or dict, outer ones first.

    What `check_known_keys` takes as `elsewhere`: `key_paths(config, "config")`.
    """
    paths, nested = [], []
    for key, value in config.items():
        paths.append(f"{prefix}.{key}")
        if hasattr(value, "items"):
            nested += key_paths(value, f"{prefix}.{key}")
    return paths + nested


def check_max_positions(config: DataConfig, max_position_embeddings: int) -> None:
    if config.max_seq_length > max_position_embeddings:
        raise ConfigError(
            f"config.data.max_seq_length={config.max_seq_length} is above the model's "
            f"max_position_embeddings={max_position_embeddings}"
        )


def check_predictions_fit(config: DataConfig) -> None:
    """max_predictions_per_seq holds what each masking rate asks of a full-length sequence,
    less its fraction: int(max_seq_length * rate). BERT masks round(n * rate) of n tokens,
    at most max_predictions_per_seq, so a cap below the whole part would decide how much
    is masked instead of the rate; the fraction is let go so that MLPerf's 76 at 512
    tokens (76.8 asked) passes. Pretraining runs and the offline writer check it."""
    for option in ("masked_lm_prob", "eval_masked_lm_prob"):
        rate = getattr(config, option)
        wanted = config.max_seq_length * rate
        if int(wanted) > config.max_predictions_per_seq:
            fail(
                "max_predictions_per_seq",
                config.max_predictions_per_seq,
                f"a {config.max_seq_length}-token sequence would be masked at "
                f"{config.max_predictions_per_seq / config.max_seq_length:.3f}, not "
                f"config.data.{option}={rate}; raise it to at least {int(wanted)}",
            )


def fail(option: str, value: Any, why: str) -> NoReturn:
    """Raises the ConfigError of `config.data.<option>`=`value`, saying why."""
    raise ConfigError(f"config.data.{option}={value!r}: {why}")


def _check_types(c: DataConfig) -> None:
    """Each option has its default's type (an int is a float too): a dict read from JSON
    is not checked by ConfigDict, as the command line is."""
    for field in dataclasses.fields(c):
        value, kind = getattr(c, field.name), type(field.default)
        ok = isinstance(value, (int, float)) if kind is float else isinstance(value, kind)
        if kind is not bool and isinstance(value, bool):
            ok = False
        if not ok:
            fail(field.name, value, f"must be of type {kind.__name__}")


def _check(c: DataConfig) -> None:
    _check_types(c)
    if c.source not in SOURCES:
        fail("source", c.source, f"must be one of {', '.join(SOURCES)}")
    if c.source == "text" and not c.text_files.strip():
        fail("text_files", c.text_files, "source='text' needs at least one glob")
    if c.source == "tfds" and not c.tfds_name:
        fail("tfds_name", c.tfds_name, "source='tfds' needs a dataset name")
    if c.source == "tfrecord" and not c.tfrecord_train_files.strip():
        fail("tfrecord_train_files", c.tfrecord_train_files, "source='tfrecord' needs a glob")
    if not 0.0 <= c.eval_fraction < 1.0:
        fail("eval_fraction", c.eval_fraction, "must be in [0, 1)")
    if c.tokenizer not in TOKENIZERS:
        fail("tokenizer", c.tokenizer, f"must be one of {', '.join(TOKENIZERS)}")
    if not c.vocab_file and c.vocab_size < 64:
        fail("vocab_size", c.vocab_size, "a learned vocabulary needs at least 64 entries")
    if not c.vocab_file and c.tokenizer == "bpe" and c.vocab_size < MIN_BPE_VOCAB_SIZE:
        fail(
            "vocab_size",
            c.vocab_size,
            f"a learned byte-level BPE vocabulary needs at least {MIN_BPE_VOCAB_SIZE} entries "
            "(the 5 specials and the 256 bytes)",
        )
    if c.max_chars_per_word < 1:
        fail("max_chars_per_word", c.max_chars_per_word, "must be at least 1")
    if c.max_seq_length < MIN_SEQ_LENGTH:
        fail(
            "max_seq_length",
            c.max_seq_length,
            f"must be at least {MIN_SEQ_LENGTH} ([CLS] A [SEP] B [SEP])",
        )
    if c.max_predictions_per_seq < 1:
        fail("max_predictions_per_seq", c.max_predictions_per_seq, "must be at least 1")
    if c.max_predictions_per_seq > c.max_seq_length - 3:
        fail(
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
            fail(name, value, "must be a probability in [0, 1]")
    if c.masked_lm_prob == 0.0:
        fail("masked_lm_prob", c.masked_lm_prob, "must be above 0")
    if not 0.0 <= c.eval_masked_lm_prob <= 1.0:
        fail(
            "eval_masked_lm_prob",
            c.eval_masked_lm_prob,
            "must be a probability in [0, 1] (0: masked_lm_prob)",
        )
    if c.mask_token_prob + c.random_token_prob > 1.0:
        fail(
            "random_token_prob",
            c.random_token_prob,
            f"mask_token_prob + random_token_prob = {c.mask_token_prob + c.random_token_prob} > 1",
        )
    if c.document_buffer_size < 2:
        fail("document_buffer_size", c.document_buffer_size, "must be at least 2 (NotNext)")
    if c.shuffle_buffer_size < 1:
        fail("shuffle_buffer_size", c.shuffle_buffer_size, "must be at least 1")
    if c.dupe_factor < 1:
        fail("dupe_factor", c.dupe_factor, "must be at least 1")
    if c.num_workers < 0:
        fail("num_workers", c.num_workers, "must be 0 (no worker processes) or more")
    if c.max_sequences_per_row < 1:
        fail("max_sequences_per_row", c.max_sequences_per_row, "must be at least 1")
