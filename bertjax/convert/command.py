r"""Imports released BERT checkpoints into a bertjax workdir, exports a workdir to Hugging Face,
as a sentence-transformers model or as a TensorFlow SavedModel that takes text, and
shrinks a workdir to some of its layers (a distilled student's start).

    python -m bertjax.convert import --format {tf,hf} SOURCE WORKDIR \
        [--do_lower_case | --no_do_lower_case] [--scan_layers]
    python -m bertjax.convert export --format {hf,sentence-transformers,savedmodel} \
        WORKDIR OUT_DIR [--step N]
    python -m bertjax.convert shrink SRC OUT --layers 0,2,4 [--step N]

docs/checkpoints.md, "Import Google and Hugging Face checkpoints", describes the two
formats. SOURCE may also be a TF checkpoint prefix. The result is an ordinary
workdir (workdir.py) whose config.json also records "converted_from"; import
with --scan_layers when the run that continues from it sets
config.model.scan_layers. Export --format hf writes the transformers class of the
workdir's task; --format sentence-transformers writes its encoder and the pooling
it embeds with, so that SentenceTransformer(OUT_DIR).encode gives bertjax.embed's
vectors (docs/checkpoints.md, "Export to Hugging Face" and "Export as a
sentence-transformers model"), or, of a reranking workdir, a CrossEncoder whose
predict gives bertjax.rerank's scores (a CrossEncoder directory imports as a
reranking workdir); --format savedmodel writes a SavedModel with the
tokenizer in its graph, served with tensorflow and tensorflow_text alone
(bertjax/convert/savedmodel.py, docs/serving.md). Every check runs before anything is written; the
output is assembled in a temporary folder next to WORKDIR (or OUT_DIR) and
renamed into place at the end (shrink too: bertjax/convert/shrink.py); the next conversion to the same path removes one that a
killed conversion left (destination.py). Any path may be in Cloud Storage (`gs://...`),
where that rename copies each object and so is not atomic.
"""

from absl import app, flags

from bertjax.convert.param_names import FORMATS

FLAGS = flags.FLAGS
# What export writes (import reads the rename table's FORMATS).
EXPORT_FORMATS = ("hf", "sentence-transformers", "savedmodel")
COMMANDS = {
    "import": "import --format {tf,hf} SOURCE WORKDIR",
    "export": "export --format {hf,sentence-transformers,savedmodel} WORKDIR OUT_DIR",
    "shrink": "shrink SRC OUT --layers 0,2,4",
}
# The commands that take each flag.
_FLAG_COMMANDS = {
    "format": ("import", "export"),
    "do_lower_case": ("import",),
    "no_do_lower_case": ("import",),
    "scan_layers": ("import",),
    "step": ("export", "shrink"),
    "max_seq_length": ("export",),
    "layers": ("shrink",),
}


def define_flags() -> None:
    flags.DEFINE_enum(
        "format",
        None,
        sorted({*FORMATS, *EXPORT_FORMATS}),
        "import: the checkpoint's format (tf or hf); export: hf (the transformers class of "
        "the workdir's task), sentence-transformers (its encoder and how it embeds) or "
        "savedmodel (TensorFlow, text in, the tokenizer in the graph).",
    )
    flags.DEFINE_bool(
        "do_lower_case", None, "import: an uncased model (only when the checkpoint does not say)."
    )
    flags.DEFINE_bool(
        "no_do_lower_case", False, "import: a cased model (only when the checkpoint does not say)."
    )
    flags.mark_bool_flags_as_mutual_exclusive(["do_lower_case", "no_do_lower_case"])
    flags.DEFINE_bool("scan_layers", False, "import: write the scan_layers parameter layout.")
    flags.DEFINE_integer(
        "step", None, "export, shrink: the checkpoint to read; default the latest."
    )
    flags.DEFINE_string(
        "layers", None, "shrink: the encoder layers to keep, counted from 0, e.g. 0,2,4."
    )
    flags.DEFINE_integer(
        "max_seq_length",
        None,
        "export --format savedmodel: texts cut to this many tokens; default the workdir's.",
    )


def main(argv: list[str]) -> None:
    command, first, second = _command_line(argv[1:])
    # Imported here, not at the top: `--help` and a usage error answer in a fraction of a
    # second instead of after seconds of TensorFlow and JAX imports.
    if command == "shrink":
        _shrink(first, second)
        return
    from bertjax.convert import import_export

    if command == "export" and FLAGS.format == "hf":
        result = import_export.export_hf(first, second, FLAGS.step)
        print(
            f"exported {first} step {result['step']} to {result['out_dir']} as a "
            f"transformers {result['class']}"
        )
        return
    if command == "export" and FLAGS.format == "savedmodel":
        from bertjax.convert import savedmodel

        result = savedmodel.export_savedmodel(first, second, FLAGS.step, FLAGS.max_seq_length)
        print(
            f"exported {first} step {result['step']} to {result['out_dir']} as a SavedModel: "
            f"{', '.join(result['texts'])} -> {', '.join(result['outputs'])}, texts cut to "
            f"{result['length']} tokens (signatures {savedmodel.SIGNATURE_TEXT} and "
            f"{savedmodel.SIGNATURE_IDS})"
        )
        return
    if command == "export":
        result = import_export.export_sentence_transformers(first, second, FLAGS.step)
        pooling = result["pooling"]
        if pooling is None:
            print(
                f"exported {first} step {result['step']} to {result['out_dir']} as a "
                f"sentence-transformers CrossEncoder ({result['class']}, one score a pair, "
                f"pairs cut to {result['max_length']} tokens)"
            )
            return
        normalized = ", normalized" if pooling.normalize else ""
        print(
            f"exported {first} step {result['step']} to {result['out_dir']} as a "
            f"sentence-transformers model ({result['class']}, {pooling.mode} pooling"
            f"{normalized}, texts cut to {pooling.max_seq_length} tokens)"
        )
        return
    do_lower_case = False if FLAGS.no_do_lower_case else FLAGS.do_lower_case
    result = import_export.import_checkpoint(
        FLAGS.format, first, second, do_lower_case=do_lower_case, scan_layers=FLAGS.scan_layers
    )
    config = result["config"]
    print(
        f"imported {first} ({config.num_hidden_layers} layers, hidden "
        f"{config.hidden_size}, {result['num_parameters']:,} parameters) into "
        f"{result['workdir']}; vocabulary {result['vocab_file']} "
        f"(do_lower_case={result['do_lower_case']})"
    )
    pooling = result["pooling"]
    if result["cross_encoder"]:
        print("  sentence-transformers CrossEncoder: a reranking workdir (bertjax.rerank scores as")
        print("  CrossEncoder.predict does with the identity activation: the logits)")
    if pooling:
        normalized = ", normalized" if pooling.normalize else ""
        what = "sentence-transformers embedder" if result["modules"] else "embedder"
        how = (
            "" if result["modules"] else ", as sentence-transformers reads it without modules.json"
        )
        print(
            f"  {what}: {pooling.mode} pooling{normalized}, texts cut to "
            f"{pooling.max_seq_length} tokens{how} (bertjax.embed embeds the same)"
        )
    for group in result["initialized"]:
        print(f"  {group}: not in the checkpoint, initialized freshly")
    if result["ignored"]:
        print(f"  ignored (not parameters): {', '.join(result['ignored'])}")


def _shrink(src: str, out: str) -> None:
    from bertjax.convert import shrink

    result = shrink.shrink(src, out, FLAGS.layers, FLAGS.step)
    kept, (before, after) = result["layers"], result["parameters"]
    print(
        f"shrunk {src} step {result['step']} to {out}: layers "
        f"{', '.join(map(str, kept))} of {result['source_layers']}, a {result['kind']} "
        f"workdir of {after:,} parameters ({before:,} in {src})"
    )
    if result["attention"]:
        print(
            "  attention: "
            + ", ".join(
                f"layer {j} (was {layer}) {'global' if whole else 'local'}"
                for j, layer, whole in result["attention"]
            )
        )


def _command_line(args: list[str]) -> tuple[str, str, str]:
    """The command and its two paths, from the arguments that are not flags."""
    if not args or args[0] not in COMMANDS:
        raise app.UsageError(f"expected a command, import, export or shrink; got: {' '.join(args)}")
    command, paths = args[0], args[1:]
    if len(paths) != 2:
        raise app.UsageError(f"usage: python -m bertjax.convert {COMMANDS[command]}")
    for name, commands in _FLAG_COMMANDS.items():
        if command not in commands and FLAGS[name].present:
            raise app.UsageError(
                f"--{name} is an option of {' and '.join(commands)}, not of {command}"
            )
    if command == "shrink":
        if FLAGS.layers is None:
            raise app.UsageError("shrink needs --layers, e.g. --layers 0,2,4")
        return command, *paths
    if FLAGS.format is None:
        raise app.UsageError(f"{command} needs --format")
    if command == "import" and FLAGS.format not in FORMATS:
        raise app.UsageError(f"import reads --format {' or '.join(FORMATS)}")
    if command == "export" and FLAGS.format not in EXPORT_FORMATS:
        raise app.UsageError(f"export writes --format {' or '.join(EXPORT_FORMATS)}")
    if FLAGS["max_seq_length"].present and FLAGS.format != "savedmodel":
        raise app.UsageError("--max_seq_length is an option of export --format savedmodel")
    return command, *paths
