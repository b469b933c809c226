"""A sentence-transformers directory: how its modules embed a text, read at import and
written at export (the files its `SentenceTransformer(directory)` loads).

    modules.json                 the pipeline: Transformer, Pooling, then Normalize or not
    sentence_bert_config.json    the Transformer's settings; up to sentence-transformers 5
                                 also its max_seq_length (its texts are cut to it)
    tokenizer_config.json        from 6 on, the max_seq_length is its model_max_length
    1_Pooling/config.json        the pooling mode
    config_sentence_transformers.json   the kind of model and its similarity (written only)

bertjax embeds as such a pipeline does when it is a Transformer (BERT or ModernBERT),
a Pooling of mode mean, cls or lasttoken, and optionally Normalize
(bertjax/embedding.py); any other module is refused at import, naming it. A Hugging
Face directory without modules.json imports as the pipeline sentence-transformers makes
of it (`without_modules`). Texts are cut at the model's max_position_embeddings at
most, where bertjax.embed cuts them, whatever a file asks for. An export
writes these files as sentence-transformers 6.2's `SentenceTransformer.save` does,
beside the Hugging Face model of the Transformer (import_export.py writes that).
"""

import json
import os

from bertjax.convert.errors import ConversionError
from bertjax.embedding import Pooling
from bertjax.tasks import reranking
from data_pipeline import files

MODULES_FILE = "modules.json"
TRANSFORMER_CONFIG_FILE = "sentence_bert_config.json"
MODEL_CONFIG_FILE = "config_sentence_transformers.json"
POOLING_DIR = "1_Pooling"
NORMALIZE_DIR = "2_Normalize"
# The modules' classes as sentence-transformers 6 names them in modules.json (up to 5:
# sentence_transformers.models.Transformer, ..., which 6 still loads).
MODULE_TYPES = {
    "Transformer": "sentence_transformers.base.modules.transformer.Transformer",
    "Pooling": "sentence_transformers.sentence_transformer.modules.pooling.Pooling",
    "Normalize": "sentence_transformers.base.modules.normalize.Normalize",
}
# The version whose files write() writes: an older one warns that the model is newer.
WRITTEN_AS = "6.2.0"
# sentence-transformers' pooling modes -> ours.
MODES = {"mean": "mean", "cls": "cls", "lasttoken": "last"}
# Its legacy Pooling config: one boolean per mode.
_LEGACY_MODES = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


def is_directory(directory: str) -> bool:
    """Whether `directory` is a sentence-transformers model (it has modules.json)."""
    return files.exists(os.path.join(directory, MODULES_FILE))


def is_cross_encoder(directory: str) -> bool:
    """Whether `directory` is a sentence-transformers CrossEncoder (a reranker): from 6 on its
    config_sentence_transformers.json says so; 4 and 5 keep its activation in config.json
    ("sentence_transformers"), earlier versions as "sbert_ce_default_activation_function"."""
    settings = os.path.join(directory, MODEL_CONFIG_FILE)
    if files.exists(settings) and _json(settings).get("model_type") == "CrossEncoder":
        return True
    config_file = os.path.join(directory, "config.json")
    if not files.exists(config_file):
        return False
    values = _json(config_file)
    legacy = values.get("sentence_transformers")
    return (
        isinstance(legacy, dict) and "activation_fn" in legacy
    ) or "sbert_ce_default_activation_function" in values


def cross_encoder_max_length(directory: str) -> int:
    """Where a CrossEncoder cuts a pair, [CLS] and both [SEP]s included: its tokenizer's
    model_max_length, at most the model's positions."""
    return _max_seq_length(directory)


def write_cross_encoder(out_dir: str) -> None:
    """The module files of a CrossEncoder beside the Hugging Face sequence-classification
    model already in `out_dir`, as sentence-transformers 6.2's `CrossEncoder.save` writes
    them; its activation is the identity, so `predict` gives the logits, bertjax.rerank's
    scores."""
    written = {
        MODEL_CONFIG_FILE: {
            "__version__": {"sentence_transformers": WRITTEN_AS},
            "activation_fn": reranking.IDENTITY_ACTIVATION,
            "default_prompt_name": None,
            "model_type": "CrossEncoder",
            "prompts": {},
        },
        MODULES_FILE: [{"idx": 0, "name": "0", "path": "", "type": MODULE_TYPES["Transformer"]}],
        TRANSFORMER_CONFIG_FILE: {
            "transformer_task": "sequence-classification",
            "modality_config": {"text": {"method": "forward", "method_output_name": "logits"}},
            "module_output_name": "scores",
        },
    }
    for path, values in written.items():
        files.atomic_write_json(os.path.join(out_dir, path), values)


def read(directory: str) -> tuple[str, Pooling]:
    """(the Transformer module's Hugging Face directory, how the pipeline embeds)."""
    modules_file = os.path.join(directory, MODULES_FILE)
    modules = _json(modules_file)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ConversionError(f"{modules_file}: expected a list of modules")
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise ConversionError(
            f"{modules_file}: modules {' -> '.join(kinds)}; bertjax embeds as Transformer -> "
            "Pooling (-> Normalize) only"
        )
    transformer = os.path.join(directory, modules[0].get("path", ""))
    pooling_dir = os.path.join(directory, modules[1].get("path", ""))
    return transformer, Pooling(
        mode=_mode(os.path.join(pooling_dir, "config.json")),
        normalize=len(modules) == 3,
        max_seq_length=_max_seq_length(transformer, settings=True),
    )


def without_modules(directory: str) -> Pooling:
    """How sentence-transformers embeds with a Hugging Face directory that has no
    modules.json. Its SentenceTransformer (6.2's sentence_transformer/model.py, where the
    default modules are made) then builds a Transformer module straight from the
    directory, so its sentence_bert_config.json is not read, followed by a Pooling of
    mode mean (last token for a causal language model, which bertjax does not import),
    without Normalize; the Transformer cuts texts at its tokenizer's model_max_length,
    at most the config's max_position_embeddings (base/modules/transformer.py)."""
    return Pooling(mode="mean", normalize=False, max_seq_length=_max_seq_length(directory))


def _max_seq_length(transformer: str, *, settings: bool = False) -> int:
    """Where the Transformer module cuts texts: with `settings`, its settings'
    max_seq_length; else, or without one (as sentence-transformers 6 saves it), its
    tokenizer's model_max_length; without either (transformers' tokenizers then take no
    bound), the model's positions. At most the model's max_position_embeddings:
    bertjax.embed cuts a longer text there."""
    config_file = os.path.join(transformer, "config.json")
    sources = [
        (os.path.join(transformer, TRANSFORMER_CONFIG_FILE), "max_seq_length"),
        (os.path.join(transformer, "tokenizer_config.json"), "model_max_length"),
        (config_file, "max_position_embeddings"),
    ]
    for where, key in sources if settings else sources[1:]:
        length = _json(where).get(key) if files.exists(where) else None
        if length is not None:
            break
    if not isinstance(length, int) or length < 3:
        raise ConversionError(f"{where}: {key} {length!r} is not a length")
    positions = (
        _json(config_file).get("max_position_embeddings") if files.exists(config_file) else None
    )
    return min(length, positions) if isinstance(positions, int) else length


def _mode(config_file: str) -> str:
    values = _json(config_file)
    modes = values.get("pooling_mode")
    if modes is None:
        modes = [mode for key, mode in _LEGACY_MODES.items() if values.get(key)]
    modes = [modes] if isinstance(modes, str) else list(modes)
    if len(modes) != 1 or modes[0] not in MODES:
        raise ConversionError(
            f"{config_file}: pooling {'+'.join(map(str, modes)) or 'none'}; bertjax pools by "
            f"one of {', '.join(MODES)}"
        )
    if values.get("include_prompt", True) is False:
        raise ConversionError(f"{config_file}: include_prompt false is not supported")
    return MODES[modes[0]]


def write(
    out_dir: str, pooling: Pooling, hidden_size: int, *, model_kwargs: dict | None = None
) -> None:
    """The module files of a pipeline that embeds as `pooling` does, beside the Hugging Face
    model already in `out_dir`, whose tokenizer_config.json's model_max_length is where
    texts are cut (pooling.max_seq_length is not read here). `model_kwargs` go to the
    Transformer's `from_pretrained` (add_pooling_layer=False: a BertModel without a
    pooler)."""
    names = ["Transformer", "Pooling"] + (["Normalize"] if pooling.normalize else [])
    paths = {"Transformer": "", "Pooling": POOLING_DIR, "Normalize": NORMALIZE_DIR}
    modules = [
        {"idx": i, "name": str(i), "path": paths[name], "type": MODULE_TYPES[name]}
        for i, name in enumerate(names)
    ]
    transformer = {
        "transformer_task": "feature-extraction",
        "modality_config": {
            "text": {"method": "forward", "method_output_name": "last_hidden_state"}
        },
        "module_output_name": "token_embeddings",
    }
    if model_kwargs:
        transformer["model_kwargs"] = model_kwargs
    mode = next(theirs for theirs, ours in MODES.items() if ours == pooling.mode)
    written = {
        MODEL_CONFIG_FILE: {
            "__version__": {"sentence_transformers": WRITTEN_AS},
            "model_type": "SentenceTransformer",
            "prompts": {"query": "", "document": ""},
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
        MODULES_FILE: modules,
        TRANSFORMER_CONFIG_FILE: transformer,
        os.path.join(POOLING_DIR, "config.json"): {
            "embedding_dimension": hidden_size,
            "pooling_mode": mode,
            "include_prompt": True,
        },
    }
    if pooling.normalize:
        written[os.path.join(NORMALIZE_DIR, "config.json")] = {
            "module_input_name": "sentence_embedding",
            "module_output_name": "sentence_embedding",
        }
    for path, values in written.items():
        files.atomic_write_json(os.path.join(out_dir, path), values)


def _json(path: str):
    try:
        return json.loads(files.read_bytes(path))
    except OSError as e:
        raise ConversionError(f"{path}: cannot read: {e.strerror or e}") from None
    except ValueError as e:
        raise ConversionError(f"{path}: not JSON: {e}") from None
