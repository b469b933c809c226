"""A sentence-transformers directory: how its modules embed a text, read at import and
written at export (the files its `SentenceTransformer(directory)` loads).

    modules.json                 the pipeline: Transformer, Pooling, then Normalize or not
    sentence_bert_config.json    the Transformer's max_seq_length (its texts are cut to it)
    1_Pooling/config.json        the pooling mode

bertjax embeds as such a pipeline does when it is a Transformer (BERT or ModernBERT),
a Pooling of mode mean, cls or lasttoken, and optionally Normalize
(bertjax/embedding.py); any other module is refused at import, naming it.
"""

import json
import os

from bertjax.convert.errors import ConversionError
from bertjax.embedding import Pooling
from data_pipeline import files

MODULES_FILE = "modules.json"
TRANSFORMER_CONFIG_FILE = "sentence_bert_config.json"
POOLING_DIR = "1_Pooling"
NORMALIZE_DIR = "2_Normalize"
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
    settings_file = os.path.join(transformer, TRANSFORMER_CONFIG_FILE)
    settings = _json(settings_file) if files.exists(settings_file) else {}
    length = settings.get("max_seq_length") or 0
    if not isinstance(length, int) or length < 3:
        raise ConversionError(f"{settings_file}: max_seq_length {length!r} is not a length")
    return transformer, Pooling(
        mode=_mode(os.path.join(pooling_dir, "config.json")),
        normalize=len(modules) == 3,
        max_seq_length=length,
    )


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


def write(out_dir: str, pooling: Pooling, hidden_size: int, max_seq_length: int) -> None:
    """The module files of a pipeline that embeds as `pooling` does, beside the Hugging Face
    model already in `out_dir`."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {
            "idx": 1,
            "name": "1",
            "path": POOLING_DIR,
            "type": "sentence_transformers.models.Pooling",
        },
    ]
    if pooling.normalize:
        modules.append(
            {
                "idx": 2,
                "name": "2",
                "path": NORMALIZE_DIR,
                "type": "sentence_transformers.models.Normalize",
            }
        )
        files.atomic_write(os.path.join(out_dir, NORMALIZE_DIR, "config.json"), "{}\n")
    mode = next(theirs for theirs, ours in MODES.items() if ours == pooling.mode)
    pooling_config = {
        "embedding_dimension": hidden_size,
        "pooling_mode": mode,
        "include_prompt": True,
    }
    for path, values in (
        (MODULES_FILE, modules),
        (TRANSFORMER_CONFIG_FILE, {"max_seq_length": max_seq_length, "do_lower_case": False}),
        (os.path.join(POOLING_DIR, "config.json"), pooling_config),
    ):
        files.atomic_write(os.path.join(out_dir, path), json.dumps(values, indent=2) + "\n")


def _json(path: str):
    try:
        return json.loads(files.read_bytes(path))
    except OSError as e:
        raise ConversionError(f"{path}: cannot read: {e.strerror or e}") from None
    except ValueError as e:
        raise ConversionError(f"{path}: not JSON: {e}") from None
