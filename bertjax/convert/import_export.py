"""The conversions behind `python -m bertjax.convert` (command.py describes them):
`import_checkpoint` turns a Google TF or Hugging Face BERT checkpoint into a new
workdir, `export_hf` writes a workdir's checkpoint as the Hugging Face model of its task,
and `export_sentence_transformers` its encoder as a sentence-transformers model that
embeds as the workdir does.
"""

import dataclasses
import functools
import json
import os
import re
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import safetensors
import safetensors.numpy
import tensorflow as tf
from flax import linen as nn
from flax import traverse_util

from bertjax import checkpoint, inference, tasks
from bertjax import model as model_lib
from bertjax import workdir as workdir_lib
from bertjax.convert import (
    config_json,
    destination,
    param_names,
    sentence_transformers,
    tokenizer_files,
)
from bertjax.convert.errors import ConversionError
from bertjax.convert.param_names import FORMATS
from bertjax.embedding import Pooling
from bertjax.model import BertConfig, BertForPreTraining, BertForReranking
from bertjax.tasks import pretraining, reranking
from bertjax.tasks.contract import Description, HFClass, Task
from data_pipeline import config as data_config_lib
from data_pipeline import files
from data_pipeline.tokenizer import normalizer_lowercases
from data_pipeline.vocab import Vocab, VocabError, load_vocab

# Files that would have to be unpickled to be read.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle")
# Hugging Face's WordPiece gives up on longer words (the original: 200 characters).
HF_MAX_CHARS_PER_WORD = 100


@dataclasses.dataclass
class _Source:
    """A checkpoint read into memory, tensor names as param_names spells them."""

    # 'bert' or 'modernbert' (config_json.hf_family).
    family: str
    config: BertConfig
    config_file: str
    weights_file: str
    tensors: dict[str, np.ndarray]
    # Names in the checkpoint that are not parameters (param_names.IGNORED).
    ignored: list[str]
    vocab_file: str
    do_lower_case: bool
    max_chars_per_word: int
    record: dict


# ----------------------------------------------------------------------------- import


def import_checkpoint(
    format: str,
    source: str,
    workdir: str,
    *,
    do_lower_case: bool | None = None,
    scan_layers: bool = False,
    seed: int = 0,
) -> dict:
    """Converts the checkpoint at `source` into the new bertjax workdir `workdir`.

    `do_lower_case` is needed only when the source does not say (a Hugging Face
    tokenizer file, or a TF directory name with 'uncased' or 'cased'). Missing
    heads and pooler get our initialization from `seed`. Returns what was done.
    """
    if format not in FORMATS:
        raise ConversionError(f"--format={format!r}: must be one of {', '.join(FORMATS)}")
    workdir = workdir_lib.absolute(workdir)
    destination.check_empty(workdir)
    src, pooling, modules, cross_encoder = _read_source(format, source, do_lower_case)
    config = dataclasses.replace(src.config, scan_layers=scan_layers)
    task = reranking.TASK if cross_encoder else pretraining.TASK
    hf_class = reranking.HF_CLASSES[config_json.hf_family(config)] if cross_encoder else None
    params, initialized = params_from_tensors(
        src.tensors, config, format, where=src.weights_file, config_file=src.config_file,
        seed=seed, hf_class=hf_class,
    )  # fmt: skip
    vocab = _vocab_of(src, config, format)
    vocab_file = os.path.join(workdir, "vocab" + os.path.splitext(src.vocab_file)[1])
    run_config = ml_collections.ConfigDict(
        {
            "data": _data_config(src, vocab_file, len(vocab)),
            "model": _model_config(config),
            "converted_from": {
                "format": format,
                "config_file": src.config_file,
                "weights_file": src.weights_file,
                "vocab_file": src.vocab_file,
                "initialized": initialized,
                "ignored": src.ignored,
                **src.record,
                "sentence_transformers": pooling.to_json() if modules else None,
                "cross_encoder": bool(cross_encoder),
            },
        }
    )
    description = pretraining.describe(run_config.data)
    if pooling:
        description = dataclasses.replace(description, embedding=pooling.to_json())
    if cross_encoder:
        description = reranking.imported(description.tokenizer_data, cross_encoder)
    with destination.staging(workdir) as staging:
        workdir_lib.write_run_description(
            staging,
            run_config,
            config,
            src.vocab_file,
            kind=task.name,
            description=description.to_json(),
        )
        # Closing the manager waits for the asynchronous save.
        with checkpoint.make_manager(staging, max_to_keep=1) as manager:
            checkpoint.save(manager, 0, {"params": params}, data={})
    return {
        "workdir": workdir,
        "config": config,
        "vocab_file": vocab_file,
        "do_lower_case": src.do_lower_case,
        "initialized": initialized,
        "ignored": src.ignored,
        "num_parameters": sum(x.size for x in jax.tree.leaves(params)),
        "pooling": pooling,
        # Whether the pooling is a sentence-transformers pipeline's (modules.json), or
        # what sentence-transformers makes of a directory without one.
        "modules": modules,
        "cross_encoder": bool(cross_encoder),
    }


def _read_source(format: str, source: str, do_lower_case: bool | None):
    """(the checkpoint, how it embeds or None, whether that is a sentence-transformers
    pipeline's, and for a CrossEncoder where it cuts a pair, else 0)."""
    pooling, modules, cross_encoder = None, False, 0
    directory = format == "hf" and not _isfile(source) and _source_directory(source)
    if directory and sentence_transformers.is_cross_encoder(directory):
        cross_encoder = sentence_transformers.cross_encoder_max_length(directory)
    elif directory and sentence_transformers.is_directory(directory):
        source, pooling = sentence_transformers.read(directory)
        modules = True
    src = _read_tf(source, do_lower_case) if format == "tf" else _read_hf(source, do_lower_case)
    if cross_encoder:
        _check_one_label(src.config_file)
    elif format == "hf" and pooling is None:
        # bertjax.embed then embeds as SentenceTransformer(source) does.
        pooling = sentence_transformers.without_modules(os.path.dirname(src.config_file))
    return src, pooling, modules, cross_encoder


def _check_one_label(config_file: str) -> None:
    """A CrossEncoder bertjax imports scores a pair with one logit."""
    values = _read_json(config_file)
    labels = values.get("num_labels", len(values.get("id2label") or {0: ""}))
    if labels != 1:
        raise ConversionError(
            f"{config_file}: a CrossEncoder of {labels} labels; bertjax imports rerankers of "
            "one (a relevance score)"
        )


def _vocab_of(src, config, format: str):
    """The source's vocabulary, refused in one line when it does not fit the embedding."""
    try:
        vocab = load_vocab(src.vocab_file)
    except VocabError as e:
        raise ConversionError(str(e)) from None
    embedding = _table(format, config, 0)["bert/embeddings/word_embeddings/embedding"][0]
    if len(vocab) != config.vocab_size:
        raise ConversionError(
            f"{src.vocab_file}: {len(vocab)} entries, but {embedding} in {src.weights_file} "
            f"has {config.vocab_size} rows"
        )
    return vocab


def params_from_tensors(
    tensors: Mapping[str, np.ndarray],
    config: BertConfig,
    format: str,
    *,
    where: str = "the checkpoint",
    config_file: str = "the config",
    seed: int = 0,
    hf_class: HFClass | None = None,
) -> tuple[dict, list[str]]:
    """Our BertForPreTraining parameters from a checkpoint's tensors, by the rename table;
    with `hf_class` (hf only), those of a reranker (model.BertForReranking) from the
    tensors of that sequence-classification class.

    Returns (params, initialized): numpy parameters in config.scan_layers's layout, and
    the optional groups that were missing and so got our initialization from `seed`.
    """
    tensors = dict(tensors)
    table = _table(format, config, config.num_hidden_layers, hf_class)
    family = config_json.hf_family(config)
    if format == "hf":
        _untie(tensors, where, family)
    per_layer = dataclasses.replace(config, scan_layers=False)
    init = functools.partial(_init_params, reranker=hf_class is not None)
    shapes = _flat(jax.eval_shape(functools.partial(init, per_layer), jax.random.key(0)))
    known = {name for name, _ in table.values()}
    ignored = param_names.IGNORED[format]
    unknown = sorted(n for n in tensors if n not in known and not ignored.fullmatch(n))
    if unknown:
        raise ConversionError(
            f"{where}: tensor {unknown[0]!r} is not one bertjax knows"
            + (f" ({len(unknown) - 1} more: {', '.join(unknown[1:4])}...)" if unknown[1:] else "")
            + f"; {config_file} has num_hidden_layers={config.num_hidden_layers} and the table "
            f"(bertjax/convert/param_names.py) lists {_WHAT_THE_TABLE_LISTS[family]}"
        )
    missing = [path for path, (name, _) in table.items() if name not in tensors]
    initialized = [
        group
        for group in _OPTIONAL_GROUPS[family]
        if all(path in missing for path in table if param_names.group_of(path) == group)
    ]
    missing = [path for path in missing if param_names.group_of(path) not in initialized]
    if missing:
        raise ConversionError(
            f"{where}: missing tensor {table[missing[0]][0]!r}"
            + (f" ({len(missing) - 1} more)" if missing[1:] else "")
        )
    flat = {}
    for path, (name, layout) in table.items():
        if name not in tensors:
            continue
        value = np.asarray(tensors[name])
        expected = param_names.source_shape(layout, format, shapes[path].shape)
        if value.shape != expected:
            raise ConversionError(
                f"{where}: {name} has shape {list(value.shape)}, but {config_file} implies "
                f"{list(expected)}"
            )
        value = param_names.to_ours(value, layout, format, shapes[path].shape)
        flat[path] = value.astype(shapes[path].dtype)
    # ModernBERT's layer 0 has no attention norm; ours exists unused (model.BertLayer).
    unread = [path for path in shapes if path not in table]
    if initialized or unread:
        # Heads and pooler take their rngs from their own paths, so a one-layer model
        # initializes them as the full one would, and compiles in a fraction of the time.
        one_layer = dataclasses.replace(config, num_hidden_layers=1, scan_layers=False)
        fresh = _flat(jax.jit(functools.partial(init, one_layer))(jax.random.key(seed)))
        for path in table:
            if param_names.group_of(path) in initialized:
                flat[path] = np.asarray(fresh[path])
        for path in unread:
            flat[path] = np.asarray(fresh[path])
    params = traverse_util.unflatten_dict(flat, sep="/")
    if config.scan_layers:
        params["bert"] = model_lib.stack_layers(params["bert"], config.num_hidden_layers)
    return params, initialized


# Per family (config_json.hf_family): what its rename table lists, the groups of our
# parameters a checkpoint may leave out, and its tied tensors.
_WHAT_THE_TABLE_LISTS = {
    "bert": "BERT's encoder, pooler and pretraining heads",
    "modernbert": "ModernBertForMaskedLM's encoder and masked-LM head",
}
_OPTIONAL_GROUPS = {"bert": param_names.OPTIONAL_GROUPS, "modernbert": ("predictions",)}
_TIED = {"bert": param_names.HF_TIED, "modernbert": param_names.MODERNBERT_TIED}
# A Hugging Face encoder without heads (BertModel, ModernBertModel) names its tensors
# without the prefix its pretraining class adds, and starts them with these.
_ENCODER_PREFIXES = {
    "bert": (param_names.HF_ENCODER_PREFIX, ("embeddings.", "encoder.", "pooler.")),
    "modernbert": (
        param_names.MODERNBERT_ENCODER_PREFIX,
        ("embeddings.", "layers.", "final_norm."),
    ),
}


def _table(format: str, config: BertConfig, num_layers: int, hf_class: HFClass | None = None):
    """param_names' table of the format for a model of `config`: the pretraining model's,
    or in hf that of `hf_class`."""
    family = config_json.hf_family(config)
    head, pooler = (None, True) if hf_class is None else (hf_class.head, hf_class.pooler)
    if family == "modernbert" and format == "hf":
        table = param_names.modernbert_names(num_layers, head, pooler)
    elif family == "modernbert":
        raise ConversionError(
            f"--format={format}: a model in ModernBERT's shape converts to and from Hugging "
            "Face's format (hf) only"
        )
    elif family != "bert":
        raise ConversionError(
            f"no {format} checkpoint holds this model: its block options "
            f"(norm_placement={config.norm_placement!r}, feed_forward={config.feed_forward!r}, "
            f"position_embedding={config.position_embedding!r}, ...) are neither BERT's nor "
            "ModernBERT's (docs/modern-encoders.md)"
        )
    else:
        table = param_names.names(format, num_layers, head, pooler)
    if hf_class is not None and hf_class.bare:
        prefix = _ENCODER_PREFIXES[family][0]
        table = {
            path: (name.removeprefix(prefix), layout) for path, (name, layout) in table.items()
        }
    return table


def _untie(tensors: dict[str, np.ndarray], where: str, family: str) -> None:
    """Drops Hugging Face's tied copies after checking they are copies."""
    for alias, name in _TIED[family].items():
        if alias not in tensors:
            continue
        value = tensors.pop(alias)
        if name not in tensors:
            tensors[name] = value
        elif not np.array_equal(tensors[name], value):
            raise ConversionError(
                f"{where}: {alias} differs from {name}; bertjax ties them (an untied MLM "
                "decoder cannot be converted)"
            )


def _read_hf(source: str, do_lower_case: bool | None) -> _Source:
    if _isfile(source):
        if source.endswith(PICKLE_SUFFIXES):
            raise ConversionError(_pickle_message(source))
        raise ConversionError(f"{source}: pass the checkpoint's directory, not a file")
    directory = _source_directory(source)
    config_file = _required_file(directory, "config.json", "a Hugging Face checkpoint")
    values = _read_json(config_file)
    family = values.get("model_type")
    if family not in _ENCODER_PREFIXES:
        raise ConversionError(
            f"{config_file}: model_type {family!r} is not supported; BERT ('bert') and "
            "ModernBERT ('modernbert') checkpoints convert"
        )
    if family == "bert":
        config = _bert_config(config_file)
    else:
        try:
            config = config_json.from_modernbert(values, config_file)
        except data_config_lib.ConfigError as e:
            raise ConversionError(str(e)) from None
    weights_file = os.path.join(directory, "model.safetensors")
    if not _isfile(weights_file):
        pickles = sorted(n for n in files.listdir(directory) if n.endswith(PICKLE_SUFFIXES))
        if pickles:
            raise ConversionError(_pickle_message(os.path.join(directory, pickles[0])))
        if tf.io.gfile.exists(weights_file + ".index.json"):
            raise ConversionError(
                f"{weights_file}.index.json: sharded checkpoints are not supported; save the "
                "model as one model.safetensors"
            )
        raise ConversionError(f"{weights_file}: missing (a Hugging Face checkpoint needs it)")
    try:
        with tf.io.gfile.GFile(weights_file, "rb") as f:
            tensors = safetensors.numpy.load(f.read())
    except safetensors.SafetensorError as e:
        raise ConversionError(f"{weights_file}: not a readable safetensors file: {e}") from None
    # A BertModel's names lack the "bert." its BertForPreTraining would give them.
    prefix, encoder = _ENCODER_PREFIXES[family]
    if not any(name.startswith(prefix) for name in tensors):
        tensors = {(prefix if n.startswith(encoder) else "") + n: v for n, v in tensors.items()}
    # ModernBERT's tokenizer is a byte-level BPE in tokenizer.json alone.
    names = ("vocab.txt", "tokenizer.json") if family == "bert" else ("tokenizer.json",)
    vocab_files = [os.path.join(directory, n) for n in names]
    vocab_file = next(filter(_isfile, vocab_files), None)
    if vocab_file is None:
        raise ConversionError(
            f"{vocab_files[0]}: missing (a Hugging Face checkpoint needs {' or '.join(names)})"
        )
    inferred, max_chars_per_word, case_file = _hf_tokenizer_settings(directory)
    return _Source(
        family=family,
        config=config,
        config_file=config_file,
        weights_file=weights_file,
        tensors=tensors,
        ignored=sorted(n for n in tensors if param_names.IGNORED["hf"].fullmatch(n)),
        vocab_file=vocab_file,
        do_lower_case=_lower_case(inferred, do_lower_case, case_file or directory),
        max_chars_per_word=max_chars_per_word,
        record={"architectures": values.get("architectures")},
    )


def _hf_tokenizer_settings(directory: str) -> tuple[bool | None, int, str | None]:
    """(do_lower_case or None when unknown, max characters a word, the file that said so)."""
    tokenizer_json = os.path.join(directory, "tokenizer.json")
    tokenizer_config = os.path.join(directory, "tokenizer_config.json")
    if _isfile(tokenizer_json):
        values = _read_json(tokenizer_json)
        model = values.get("model") or {}
        max_chars = model.get("max_input_chars_per_word", HF_MAX_CHARS_PER_WORD)
        if model.get("type") == "BPE":
            # Its normalizer says; ModernBERT's keeps case.
            return normalizer_lowercases(values.get("normalizer")), max_chars, tokenizer_json
        normalizer = values.get("normalizer") or {}
        if normalizer.get("type") == "BertNormalizer":
            lower = normalizer.get("lowercase")
            _check_strip_accents(normalizer.get("strip_accents"), lower, tokenizer_json)
            return lower, max_chars, tokenizer_json
        return None, max_chars, None
    if _isfile(tokenizer_config):
        values = _read_json(tokenizer_config)
        lower = values.get("do_lower_case")
        _check_strip_accents(values.get("strip_accents"), lower, tokenizer_config)
        return lower, HF_MAX_CHARS_PER_WORD, tokenizer_config if lower is not None else None
    return None, HF_MAX_CHARS_PER_WORD, None


def _check_strip_accents(strip_accents, lower_case, path: str) -> None:
    # BERT's BasicTokenizer strips accents exactly when it lowercases (None: follow lowercase).
    if strip_accents is not None and strip_accents != lower_case:
        raise ConversionError(
            f"{path}: strip_accents={strip_accents} with lowercase={lower_case}; bertjax's "
            "tokenizer strips accents exactly when it lowercases"
        )


def _read_tf(source: str, do_lower_case: bool | None) -> _Source:
    prefix, directory = _tf_checkpoint_prefix(source)
    config_file = _required_file(directory, "bert_config.json", "a TF BERT checkpoint")
    vocab_file = _required_file(directory, "vocab.txt", "a TF BERT checkpoint")
    config = _bert_config(config_file)
    try:
        reader = tf.train.load_checkpoint(prefix)
        names = sorted(reader.get_variable_to_shape_map())
        ignored = [n for n in names if param_names.IGNORED["tf"].fullmatch(n)]
        # Left unread: Adam's moments are twice the model's size.
        tensors = {name: reader.get_tensor(name) for name in names if name not in ignored}
        step = int(reader.get_tensor("global_step")) if "global_step" in names else None
    except (tf.errors.OpError, ValueError) as e:
        raise ConversionError(f"{prefix}: cannot read the TF checkpoint: {e}") from None
    # As google-research/bert's validate_case_matches_checkpoint: the release names say.
    name = os.path.basename(directory)
    words = set(re.split(r"[_-]", name))
    inferred = True if "uncased" in words else False if "cased" in words else None
    return _Source(
        family="bert",
        config=config,
        config_file=config_file,
        weights_file=prefix,
        tensors=tensors,
        ignored=ignored,
        vocab_file=vocab_file,
        do_lower_case=_lower_case(inferred, do_lower_case, f"the directory name {name!r}"),
        max_chars_per_word=data_config_lib.DataConfig.max_chars_per_word,
        record={"global_step": step},
    )


def _tf_checkpoint_prefix(source: str) -> tuple[str, str]:
    """(checkpoint prefix, its directory) for a directory or a prefix."""
    source = workdir_lib.absolute(source)
    if _isfile(source + ".index"):
        directory = os.path.dirname(source)
        _check_symlinks(directory)
        return source, directory
    directory = _source_directory(source)
    indexes = sorted(n for n in files.listdir(directory) if n.endswith(".index"))
    if not indexes:
        raise ConversionError(
            f"{os.path.join(directory, 'bert_model.ckpt.index')}: missing (no TF checkpoint "
            f"*.index in {directory})"
        )
    if len(indexes) > 1:
        raise ConversionError(
            f"{directory}: several checkpoints ({', '.join(indexes)}); pass one prefix, "
            f"e.g. {os.path.join(directory, indexes[-1].removesuffix('.index'))}"
        )
    return os.path.join(directory, indexes[0].removesuffix(".index")), directory


def _lower_case(inferred: bool | None, given: bool | None, where: str) -> bool:
    if inferred is None and given is None:
        raise ConversionError(
            f"{where}: cannot tell whether the model is uncased; pass --do_lower_case or "
            "--no_do_lower_case"
        )
    if inferred is not None and given is not None and inferred != given:
        raise ConversionError(
            f"--{'' if given else 'no_'}do_lower_case contradicts {where}, which says "
            f"do_lower_case={inferred}"
        )
    return inferred if given is None else given


def _data_config(src: _Source, vocab_file: str, vocab_size: int) -> ml_collections.ConfigDict:
    data = data_config_lib.default_config()
    data.tokenizer = "wordpiece" if src.family == "bert" else "bpe"
    if src.family == "modernbert":
        # Its objective, for a run that continues pretraining from it (docs/modern-encoders.md).
        data.next_sentence_prediction = False
        data.masked_lm_prob = 0.3
        data.eval_masked_lm_prob = 0.15
        data.max_predictions_per_seq = 40  # 30% of 128 tokens
    data.vocab_file = vocab_file
    data.vocab_size = vocab_size
    data.do_lower_case = src.do_lower_case
    data.max_chars_per_word = src.max_chars_per_word
    data.max_seq_length = min(data.max_seq_length, src.config.max_position_embeddings)
    data.max_predictions_per_seq = min(data.max_predictions_per_seq, data.max_seq_length - 3)
    try:
        data_config_lib.from_config(data)
    except data_config_lib.ConfigError as e:
        raise ConversionError(f"the converted data config: {e}") from None
    return data


def _model_config(config: BertConfig) -> ml_collections.ConfigDict:
    """config.model for `config`: every field set, so the preset only names the size."""
    sizes = {k: getattr(config, k) for k in model_lib.PRESETS["base"]}
    preset = next((n for n, p in model_lib.PRESETS.items() if p == sizes), "base")
    model = ml_collections.ConfigDict({"preset": preset, **config.to_dict()})
    assert model_lib.from_config(model) == config
    return model


# ----------------------------------------------------------------------------- export


def export_hf(workdir: str, out_dir: str, step: int | None = None) -> dict:
    """Writes `workdir`'s checkpoint (latest or `step`) as the Hugging Face model of its task.

    A pretraining or converted workdir becomes a BertForPreTraining, a fine-tuned
    one the transformers class of its head (its task's `hf_class`), with its labels. OUT_DIR
    gets config.json, model.safetensors and the tokenizer (tokenizer_files.py):
    `AutoModelFor...from_pretrained(OUT_DIR)` loads it with nothing missing or
    unexpected, and `AutoTokenizer.from_pretrained(OUT_DIR)` tokenizes as the run did.
    """
    source = _export_source(workdir, out_dir, step, hf_task=True)
    try:
        hf_class = source.task.hf_class(source.family, source.description)
    except ValueError as e:
        raise ConversionError(f"{source.task_file}: {e}") from None

    # Without `step`, the newest checkpoint that verifies.
    restored = inference.restore(source.workdir, step)
    tensors = tensors_from_params(restored.params, source.config, "hf", hf_class)
    max_length = source.config.max_position_embeddings
    with destination.staging(source.out_dir) as staging:
        _write_hf(staging, source, hf_class, tensors, max_length)
    return {
        "out_dir": source.out_dir,
        "step": restored.step,
        "config": source.config,
        "class": hf_class.name,
    }


def export_sentence_transformers(workdir: str, out_dir: str, step: int | None = None) -> dict:
    """Writes `workdir`'s checkpoint (latest or `step`) as a sentence-transformers model that
    embeds as `bertjax.embed` embeds with the workdir (sentence_transformers.py).

    Any workdir's encoder exports, as its family's bare transformers class (BertModel,
    ModernBertModel) without the task's heads, followed by the workdir's Pooling
    (task.json's "embedding", else Pooling()'s mean) and Normalize when it normalizes;
    texts are cut where bertjax.embed cuts them. `SentenceTransformer(OUT_DIR)` loads it,
    and `AutoModel.from_pretrained(OUT_DIR)` loads its encoder with nothing missing or
    unexpected (a BERT pretrained without a pooler: with add_pooling_layer=False).
    """
    source = _export_source(workdir, out_dir, step, hf_task=False)
    if source.task.reranks:
        return _export_cross_encoder(source, step)
    try:
        pooling = Pooling.from_json(source.description.embedding)
    except (TypeError, ValueError) as e:
        raise ConversionError(f'{source.task_file}: "embedding": {e}') from None
    # What bertjax.embed reads of a text, [CLS] and [SEP] included.
    max_length = min(
        pooling.max_seq_length or source.description.max_seq_length,
        source.config.max_position_embeddings,
    )

    restored = inference.restore(source.workdir, step)
    # A BERT's pooler goes with it where the workdir has one (a BertModel has a pooler
    # unless made without, and a user may read pooler_output), and is left out where it
    # has none (pretrained with masked LM alone): a fresh random one would pass for
    # trained weights. The pipeline then makes its BertModel without a pooler
    # (add_pooling_layer=False), so nothing is missing. ModernBertModel has none.
    pooler = source.family == "bert" and "pooler" in restored.params["bert"]
    hf_class = HFClass(
        "BertModel" if source.family == "bert" else "ModernBertModel",
        head={},
        pooler=pooler,
        bare=True,
    )
    model_kwargs = {"add_pooling_layer": False} if source.family == "bert" and not pooler else {}
    tensors = tensors_from_params(restored.params, source.config, "hf", hf_class)
    with destination.staging(source.out_dir) as staging:
        _write_hf(staging, source, hf_class, tensors, max_length)
        sentence_transformers.write(
            staging, pooling, source.config.hidden_size, model_kwargs=model_kwargs
        )
    return {
        "out_dir": source.out_dir,
        "step": restored.step,
        "config": source.config,
        "class": hf_class.name,
        "pooling": dataclasses.replace(pooling, max_seq_length=max_length),
    }


def _export_cross_encoder(source, step: int | None) -> dict:
    """A reranking workdir as a sentence-transformers CrossEncoder: its transformers
    sequence classifier of one label, and the module files (activation the identity:
    `predict` gives bertjax.rerank's scores). A pair is cut at the workdir's length;
    transformers cuts the longer side first and does not cut the query at
    max_query_length first, so a longer query is read further there."""
    hf_class = source.task.hf_class(source.family, source.description)
    restored = inference.restore(source.workdir, step)
    tensors = tensors_from_params(restored.params, source.config, "hf", hf_class)
    max_length = min(source.description.max_seq_length, source.config.max_position_embeddings)
    with destination.staging(source.out_dir) as staging:
        _write_hf(staging, source, hf_class, tensors, max_length)
        sentence_transformers.write_cross_encoder(staging)
    return {
        "out_dir": source.out_dir,
        "step": restored.step,
        "config": source.config,
        "class": hf_class.name,
        "pooling": None,
        "max_length": max_length,
    }


@dataclasses.dataclass(frozen=True)
class _ExportSource:
    """A workdir to export, its files read and checked, and where it goes."""

    workdir: str
    out_dir: str
    config: BertConfig
    family: str  # config_json.hf_family
    task: Task
    task_file: str
    description: Description
    vocab: Vocab
    vocab_file: str
    tokenizer_data: dict


def _export_source(workdir: str, out_dir: str, step: int | None, *, hf_task: bool):
    """Every check of an export that reads no checkpoint: the workdir's model config,
    task.json, vocabulary, the checkpoint `step` (None: any), and an empty `out_dir`.
    With `hf_task`, its task must declare its transformers class (Task.hf_class)."""
    workdir = workdir_lib.absolute(workdir)
    out_dir = workdir_lib.absolute(out_dir)
    config = workdir_lib.read_model_config(workdir)
    if config is None:
        raise ConversionError(f"{os.path.join(workdir, workdir_lib.MODEL_CONFIG_FILE)}: missing")
    task_file = os.path.join(workdir, workdir_lib.TASK_FILE)
    kind, values = workdir_lib.read_task(workdir)
    if hf_task:
        task = _exported_task(kind, task_file)
    else:
        task = tasks.get(kind, where=f"{task_file}: kind")
    family = config_json.hf_family(config)
    _table("hf", config, 0)  # a mix of BERT's and ModernBERT's blocks fails here, in one line
    description = Description.from_json(values, where=task_file)
    tokenizer_data = workdir_lib.read_tokenizer_data(workdir)
    vocab_file = workdir_lib.vocab_file(workdir)
    if vocab_file is None:
        raise ConversionError(
            f"{os.path.join(workdir, 'vocab.txt')}: missing (no vocabulary in the workdir)"
        )
    try:
        vocab = load_vocab(vocab_file)
    except VocabError as e:
        raise ConversionError(str(e)) from None
    needed = {"bert": "wordpiece", "modernbert": "bpe"}[family]
    if vocab.kind != needed:
        raise ConversionError(
            f"{vocab_file}: a {vocab.kind} vocabulary; Hugging Face's "
            f"{'BERT' if family == 'bert' else 'ModernBERT'} tokenizer here is {needed}"
        )
    if len(vocab) != config.vocab_size:
        raise ConversionError(
            f"{vocab_file}: {len(vocab)} entries, but model_config.json has "
            f"vocab_size={config.vocab_size}"
        )
    _checkpoint_step(workdir, step)  # a checkpoint, and `step` among them
    destination.check_empty(out_dir)
    return _ExportSource(
        workdir=workdir,
        out_dir=out_dir,
        config=config,
        family=family,
        task=task,
        task_file=task_file,
        description=description,
        vocab=vocab,
        vocab_file=vocab_file,
        tokenizer_data=tokenizer_data,
    )


def _exported_task(kind: str, task_file: str):
    """The Task of a `kind` workdir, which must export to Hugging Face."""
    try:
        task = tasks.get(kind, where=f"{task_file}: kind")
    except data_config_lib.ConfigError:
        task = None  # a task of the user's that is not importable here
    if task is None or task.hf_class is None:
        exported = [name for name, t in tasks.table().items() if t.hf_class is not None]
        raise ConversionError(
            f"{task_file}: a {kind} workdir; export writes the models of "
            f"{', '.join(exported)} workdirs"
        )
    return task


def _write_hf(
    staging: str, source: _ExportSource, hf_class: HFClass, tensors: dict, max_length: int
) -> None:
    """The Hugging Face model `hf_class` of `tensors` into `staging`: config.json,
    model.safetensors and a tokenizer whose model_max_length is `max_length`."""
    hf_config, tokenizer = _hf_files(source, hf_class, max_length)
    files.atomic_write_json(os.path.join(staging, "config.json"), hf_config)
    for name, values in tokenizer.items():
        files.atomic_write_json(os.path.join(staging, name), values)
    if source.family == "bert":
        with tf.io.gfile.GFile(os.path.join(staging, "vocab.txt"), "w") as f:
            f.write("".join(token + "\n" for token in source.vocab.tokens))
    with tf.io.gfile.GFile(os.path.join(staging, "model.safetensors"), "wb") as f:
        f.write(safetensors.numpy.save(tensors, metadata={"format": "pt"}))


def _hf_files(source: _ExportSource, hf_class: HFClass, max_length: int) -> tuple[dict, dict]:
    """(config.json, tokenizer files) of the workdir's model as `hf_class`."""
    config, vocab = source.config, source.vocab
    if source.family == "modernbert":
        hf_config = {
            "architectures": [hf_class.name],
            "model_type": "modernbert",
            **config_json.to_modernbert(config),
            **hf_class.config,
            "pad_token_id": vocab.pad_id,
            "cls_token_id": vocab.cls_id,
            "sep_token_id": vocab.sep_id,
            "bos_token_id": vocab.cls_id,
            "eos_token_id": vocab.sep_id,
        }
        tokenizer = tokenizer_files.bpe_tokenizer_files(
            vocab, _read_json(source.vocab_file), max_length=max_length
        )
        return hf_config, tokenizer
    hf_config = {
        "architectures": [hf_class.name],
        "model_type": "bert",
        **config_json.to_hf(config),
        **hf_class.config,
        "position_embedding_type": "absolute",
        "pad_token_id": vocab.pad_id,
        "tie_word_embeddings": True,
    }
    tokenizer = tokenizer_files.hf_tokenizer_files(
        vocab,
        do_lower_case=source.tokenizer_data["do_lower_case"],
        max_chars_per_word=source.tokenizer_data["max_chars_per_word"],
        max_length=max_length,
    )
    return hf_config, tokenizer


def tensors_from_params(
    params, config: BertConfig, format: str, hf_class: HFClass | None = None
) -> dict[str, np.ndarray]:
    """The checkpoint tensors (float32, the format's names and layouts) of our parameters:
    the pretraining model's, or in hf as `hf_class` holds them."""
    if hf_class is not None and hf_class.bare:
        params = {"bert": params["bert"]}  # the task's heads stay behind
    params = {**params, "bert": model_lib.unstack_layers(params["bert"], config.num_hidden_layers)}
    flat = {path: np.asarray(value, np.float32) for path, value in _flat(params).items()}
    table = _table(format, config, config.num_hidden_layers, hf_class)
    # A model pretrained with masked LM alone has no pooler and no NSP head: its
    # transformers class is BertForMaskedLM's (hf_class), whose names are the rest.
    table = {
        path: entry
        for path, entry in table.items()
        if path in flat or param_names.group_of(path) not in ("bert/pooler", "seq_relationship")
    }
    # A BERT token or span head's transformers class has no pooler; ours computes one
    # unused. ModernBERT's layer 0 has no attention norm; ours is there unused.
    unused = {
        path
        for path in flat
        if path not in table
        and (path.startswith("bert/pooler/") or "layer_0/pre_attention_LayerNorm" in path)
    }
    if set(flat) - unused != set(table):
        differ = sorted((set(flat) - unused) ^ set(table))
        raise ConversionError(
            f"the model's parameters do not fit transformers' "
            f"{'class for it' if hf_class is None else hf_class.name}: "
            f"{', '.join(differ[:3])}{' ...' if differ[3:] else ''}"
        )
    tensors = {}
    # Parts of one fused tensor (ModernBERT's Wqkv, Wi) come in the order of their k.
    for path, (name, layout) in sorted(table.items(), key=lambda row: row[1][1].part or (0, 1)):
        value = param_names.from_ours(flat[path], layout, format)
        tensors[name] = value if name not in tensors else np.concatenate([tensors[name], value])
    return tensors


def _checkpoint_step(workdir: str, step: int | None) -> int:
    directory = workdir_lib.checkpoint_dir(workdir)
    names = files.listdir(directory) if tf.io.gfile.isdir(directory) else []
    steps = sorted(int(n) for n in names if n.isdigit())
    if not steps:
        raise ConversionError(f"{directory}: no checkpoint")
    if step is None:
        return steps[-1]
    if step not in steps:
        raise ConversionError(
            f"{os.path.join(directory, str(step))}: missing; steps there: "
            f"{', '.join(map(str, steps))}"
        )
    return step


# ----------------------------------------------------------------------------- shared


def _init_params(config: BertConfig, rng, reranker: bool = False):
    ids = jnp.zeros((1, 2), jnp.int32)
    if reranker:
        variables = BertForReranking(config).init(rng, ids, ids, ids, deterministic=True)
        return nn.meta.unbox(variables["params"])
    # ModernBERT pretrains with masked LM alone: no pooler, no NSP head.
    model = BertForPreTraining(config, next_sentence=config_json.hf_family(config) != "modernbert")
    variables = model.init(rng, ids, ids, ids, ids[:, :1], deterministic=True)
    return nn.meta.unbox(variables["params"])


def _flat(tree) -> dict:
    return traverse_util.flatten_dict(tree, sep="/")


def _bert_config(path: str) -> BertConfig:
    try:
        return config_json.read(path)
    except data_config_lib.ConfigError as e:
        raise ConversionError(str(e)) from None
    except json.JSONDecodeError as e:
        raise ConversionError(f"{path}: not valid JSON: {e}") from None


def _read_json(path: str) -> dict:
    try:
        with tf.io.gfile.GFile(path) as f:
            value = json.load(f)
    except json.JSONDecodeError as e:
        raise ConversionError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise ConversionError(f"{path}: not a JSON object")
    return value


def _pickle_message(path: str) -> str:
    return (
        f"{path}: a pickled PyTorch checkpoint, which bertjax never loads (unpickling runs "
        "code); save the model as safetensors, e.g. model.save_pretrained(DIR, "
        "safe_serialization=True), and convert DIR"
    )


def _source_directory(source: str) -> str:
    directory = workdir_lib.absolute(source)
    if not tf.io.gfile.isdir(directory):
        raise ConversionError(f"{directory}: missing (no such checkpoint directory)")
    _check_symlinks(directory)
    return directory


def _check_symlinks(directory: str) -> None:
    """Refuses a checkpoint directory whose links lead out of it."""
    if "://" in directory:
        return  # object stores have no links
    root = os.path.realpath(directory)
    for entry in os.scandir(directory):
        if entry.is_symlink():
            target = os.path.realpath(entry.path)
            if os.path.commonpath([root, target]) != root:
                raise ConversionError(
                    f"{entry.path}: a symbolic link to {target}, outside the checkpoint "
                    f"directory {directory}; copy the files in (cp -L) instead"
                )


def _required_file(directory: str, name: str, what: str) -> str:
    path = os.path.join(directory, name)
    if not _isfile(path):
        raise ConversionError(f"{path}: missing ({what} needs {name})")
    return path


def _isfile(path: str) -> bool:
    return tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path)
