"""A smaller student from a workdir: the same model with some of its encoder layers.

    python -m bertjax.convert shrink SRC OUT --layers 0,2,4 [--step N]

OUT is a workdir of SRC's task whose encoder keeps the listed layers of SRC's, in
order; everything else (embeddings, pooler, task head, vocabulary, tokenizer settings,
pooling) is copied. It is the starting point of a distilled student
(docs/distillation.md): DistilBERT (Sanh et al., 2019, arXiv:1910.01108) initializes its
6-layer student from every other layer of BERT-Base, and sentence-transformers'
layer-reduction example keeps layers of an embedder the same way.

A ModernBERT block attends to the whole sequence in every `global_attention_every`-th
layer from layer 0 and locally in the others. The kept layers keep the attention each had
in SRC, so they must fall into that pattern again: a first layer that is global, then
every k-th (layers 0, 3 and 6 of ModernBERT-base's pattern of 3 make a student whose
every layer is global; 0, 1 and 2 one that is global every third). A selection that does
not, such as 0, 3 and 4, is refused: neither our config nor Hugging Face's can say it.
"""

import dataclasses
import os
import re

import jax
import ml_collections

from bertjax import checkpoint, inference
from bertjax import workdir as workdir_lib
from bertjax.convert import destination
from bertjax.convert.errors import ConversionError
from bertjax.model import BertConfig

_LAYER = re.compile(r"layer_(\d+)")


def parse_layers(text: str, num_layers: int, *, where: str) -> tuple[int, ...]:
    """`--layers 0,2,4` as (0, 2, 4): distinct layers of a model of `num_layers`, in
    increasing order."""
    parts = [part.strip() for part in text.split(",")] if text.strip() else []
    if not parts or not all(re.fullmatch(r"\d+", part) for part in parts):
        raise ConversionError(
            f"--layers={text!r}: list the layers to keep, counted from 0, e.g. --layers 0,2,4"
        )
    layers = tuple(int(part) for part in parts)
    if any(b <= a for a, b in zip(layers, layers[1:], strict=False)):
        raise ConversionError(f"--layers={text!r}: each layer once, in increasing order")
    if layers[-1] >= num_layers:
        raise ConversionError(
            f"--layers={text!r}: {where} has {num_layers} layers, 0 to {num_layers - 1}"
        )
    return layers


def is_global(config: BertConfig, layer: int) -> bool:
    """Whether `layer` attends to the whole sequence (BertEncoder's pattern)."""
    return layer % config.global_attention_every == 0


def kept_pattern(config: BertConfig, layers: tuple[int, ...], *, text: str) -> int:
    """The global_attention_every of a model of `layers` of `config` whose layers attend
    as they did in `config`; refuses a selection no such number describes."""
    wanted = [is_global(config, layer) for layer in layers]
    if all(wanted):
        return 1
    for every in range(2, len(layers) + 1):
        if all((j % every == 0) == g for j, g in enumerate(wanted)):
            return every
    pattern = ", ".join(
        f"{layer} {'global' if g else 'local'}" for layer, g in zip(layers, wanted, strict=True)
    )
    raise ConversionError(
        f"--layers={text!r}: their attention ({pattern}) is not global every k-th layer "
        "from the first, the pattern a ModernBERT config can hold; keep a global layer "
        "first and the global ones evenly spaced"
    )


def shrink(src: str, out: str, layers: str, step: int | None = None) -> dict:
    """Writes the workdir `out`: `src`'s model (its checkpoint `step`, default the latest)
    with the encoder layers `layers` ("0,2,4") alone. Every check runs before a checkpoint
    is read; the output appears whole or not at all (destination.staging)."""
    src, out = workdir_lib.absolute(src), workdir_lib.absolute(out)
    config = workdir_lib.require_model_config(src, what="SRC")
    kept = parse_layers(layers, config.num_hidden_layers, where=src)
    every = kept_pattern(config, kept, text=layers)
    kind, description = workdir_lib.read_task(src)
    vocab = workdir_lib.require_vocab_file(src, what="SRC")
    run_config = workdir_lib.read_json(os.path.join(src, workdir_lib.CONFIG_FILE)) or {}
    destination.check_empty(out)
    restored = inference.restore(src, step)  # one device, the layers unstacked
    student = dataclasses.replace(
        config, num_hidden_layers=len(kept), global_attention_every=every, scan_layers=False
    )
    params = {**restored.params, "bert": _kept_layers(restored.params["bert"], kept)}
    record = {"workdir": src, "step": restored.step, "layers": list(kept)}
    if isinstance(run_config.get("model"), dict):
        run_config["model"] = {**run_config["model"], "num_hidden_layers": len(kept)}
    run_config = ml_collections.ConfigDict({**run_config, "shrunk_from": record})
    with destination.staging(out) as staging:
        workdir_lib.write_run_description(
            staging, run_config, student, vocab, kind=kind, description=description
        )
        with checkpoint.make_manager(staging, max_to_keep=1) as manager:
            checkpoint.save(manager, 0, {"params": params}, data={})
    return {
        "workdir": out,
        "kind": kind,
        "step": restored.step,
        "layers": kept,
        "source_layers": config.num_hidden_layers,
        "parameters": (_count(restored.params), _count(params)),
        # (kept layer, its index in SRC, global) where attention differs between layers.
        "attention": (
            [(j, layer, is_global(student, j)) for j, layer in enumerate(kept)]
            if config.global_attention_every > 1
            else None
        ),
    }


def _kept_layers(bert: dict, kept: tuple[int, ...]) -> dict:
    """BertModel's parameters with encoder layer j taken from layer kept[j]; the
    encoder's other modules (ModernBERT's final LayerNorm) and the rest as they are."""
    encoder = {name: value for name, value in bert["encoder"].items() if not _LAYER.fullmatch(name)}
    for j, layer in enumerate(kept):
        encoder[f"layer_{j}"] = bert["encoder"][f"layer_{layer}"]
    return {**bert, "encoder": encoder}


def _count(params) -> int:
    return sum(x.size for x in jax.tree.leaves(params))
