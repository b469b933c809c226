r"""Serving latency with the tokenizer included: bertjax's SavedModel against the same
weights in Hugging Face transformers on PyTorch.

    python -m bertjax.bench.serving [--workdir W --st_dir D] [--batch_sizes 1,8,32] \
        [--seq_len 128] [--requests 50] [--warmup 5] [--json]

A request is a batch of raw texts in, one vector per text out, on this machine's CPUs:

    savedmodel    WORKDIR exported by `python -m bertjax.convert export --format
                  savedmodel --max_seq_length SEQ_LEN`, loaded with
                  tf.saved_model.load; its serving_default signature tokenizes in the
                  graph, runs the model and pools
    transformers  AutoTokenizer (the fast, Rust tokenizer) and AutoModel of D, in
                  torch.inference_mode: tokenized with padding='max_length' and
                  truncation at SEQ_LEN, the model, then mean pooling over the mask and
                  L2 normalization (all-MiniLM-L6-v2's, as sentence-transformers pools)

Both pad every text to SEQ_LEN tokens, so they compute over the same shapes; the texts
are passages of the built-in corpus of at least SEQ_LEN words, so they fill it. Each
side runs in its own process, one after the other, with every core: per batch size,
--warmup requests, then --requests timed ones, whose 50th and 99th percentiles are
printed, with the largest difference between the two sides' vectors. By default both
load all-MiniLM-L6-v2 from the zip `make install` puts in .venv/test-extras, imported
for ours into a temporary folder.

--framework savedmodel or transformers measures one side in this process (what the two
processes run); --json prints the figures as one JSON object as the last line.
"""

import json
import os
import tempfile
import time

from absl import flags

from bertjax import program
from bertjax.bench import embedding as embedding_bench
from data_pipeline.errors import UserError

FRAMEWORKS = ("savedmodel", "transformers")


def define_flags() -> None:
    flags.DEFINE_string("workdir", None, "A bertjax workdir that embeds; default MiniLM's import.")
    flags.DEFINE_string("st_dir", None, "The same model as a Hugging Face directory.")
    flags.DEFINE_list("batch_sizes", ["1", "8", "32"], "Texts a request.")
    flags.DEFINE_integer("seq_len", 128, "Tokens a text, [CLS] and [SEP] included.")
    flags.DEFINE_integer("requests", 50, "Timed requests a batch size.")
    flags.DEFINE_integer("warmup", 5, "Requests before the timed ones.")
    flags.DEFINE_enum("framework", "both", ("both", *FRAMEWORKS), "Both, or one here.")
    flags.DEFINE_string("savedmodel", None, "--framework savedmodel: the exported model.")
    flags.DEFINE_bool("json", False, "Also print the figures as one JSON object.")


def main(args) -> None:
    sizes = check_args(args)
    if args.framework != "both":
        result = MEASURE[args.framework](args, sizes)
        print(json.dumps(result) if args.json else result)
        return
    with tempfile.TemporaryDirectory(prefix="serving-bench-") as scratch:
        st_dir, workdir = embedding_bench.prepared_models(args, scratch)
        exported = os.path.join(scratch, "savedmodel")
        from bertjax.convert import savedmodel

        savedmodel.export_savedmodel(workdir, exported, max_seq_length=args.seq_len)
        results = {
            framework: run_side(framework, args, st_dir, exported) for framework in FRAMEWORKS
        }
    report = summary(args, sizes, results)
    print_report(report)
    if args.json:
        print(json.dumps(report))


def check_args(args) -> list[int]:
    """The batch sizes; one-line errors for what would fail later, before anything loads."""
    try:
        sizes = [int(size) for size in args.batch_sizes]
    except ValueError:
        raise UserError(f"--batch_sizes={','.join(args.batch_sizes)}: whole numbers") from None
    if not sizes or min(sizes) < 1:
        raise UserError(f"--batch_sizes={','.join(args.batch_sizes)}: each at least 1")
    if args.seq_len < 3:
        raise UserError(f"--seq_len={args.seq_len}: at least 3 ([CLS] text [SEP])")
    if args.requests < 2 or args.warmup < 1:
        raise UserError("--requests: at least 2; --warmup: at least 1")
    if args.framework == "savedmodel" and not args.savedmodel:
        raise UserError("--framework savedmodel needs --savedmodel DIR")
    if args.framework != "savedmodel":
        check_models(args)
    return sizes


def check_models(args) -> None:
    if args.workdir is not None and not os.path.isfile(
        os.path.join(args.workdir, "model_config.json")
    ):
        raise UserError(f"--workdir={args.workdir}: not a bertjax workdir (no model_config.json)")
    if args.st_dir is not None and not os.path.isfile(os.path.join(args.st_dir, "config.json")):
        raise UserError(f"--st_dir={args.st_dir}: not a Hugging Face model directory")
    defaults = args.framework == "both" and (args.st_dir is None or args.workdir is None)
    if defaults and not embedding_bench.MINILM_ZIP.is_file():
        raise UserError(
            f"{embedding_bench.MINILM_ZIP} is missing (`make install` fetches it): give "
            "--st_dir and --workdir"
        )


def run_side(framework: str, args, st_dir: str, exported: str) -> dict:
    """One side measured in its own process (this program with --framework)."""
    return embedding_bench.measured_apart(
        "bertjax.bench.serving", framework,
        f"--framework={framework}", f"--st_dir={st_dir}", f"--savedmodel={exported}",
        f"--batch_sizes={','.join(args.batch_sizes)}", f"--seq_len={args.seq_len}",
        f"--requests={args.requests}", f"--warmup={args.warmup}",
    )  # fmt: skip


def texts(count: int, words: int) -> list[str]:
    """`count` passages of the built-in corpus of at least `words` words each."""
    pairs = embedding_bench.corpus_pairs(1, words)
    if len(pairs) < count:
        raise UserError(f"the built-in corpus makes only {len(pairs)} texts of {words} words")
    return [passage for _, passage in pairs[:count]]


def timed(request, batch: list[str], args) -> dict:
    """p50 and p99 of --requests calls of `request(batch)`, after --warmup, in seconds."""
    import numpy as np

    for _ in range(args.warmup):
        request(batch)
    seconds = []
    for _ in range(args.requests):
        start = time.perf_counter()
        request(batch)
        seconds.append(time.perf_counter() - start)
    return {"p50_s": float(np.percentile(seconds, 50)), "p99_s": float(np.percentile(seconds, 99))}


def measure_savedmodel(args, sizes: list[int]) -> dict:
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

    start = time.perf_counter()
    serve = tf.saved_model.load(args.savedmodel).signatures["serving_default"]
    setup_s = time.perf_counter() - start
    batch = texts(max(sizes), args.seq_len)

    def request(chunk):
        return serve(text=tf.constant(chunk))["embedding"].numpy()

    return {
        "framework": "savedmodel",
        "versions": {"tensorflow": tf.__version__, "tensorflow-text": tensorflow_text.__version__},
        "setup_s": setup_s,
        "latency": {size: timed(request, batch[:size], args) for size in sizes},
        "vectors": request(batch[:2]).tolist(),
    }


def measure_transformers(args, sizes: list[int]) -> dict:
    import torch
    import transformers
    from transformers.utils import logging as transformers_logging

    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()  # "Loading weights" on every load
    torch.set_num_threads(embedding_bench.cores())
    start = time.perf_counter()
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.st_dir, use_fast=True)
    model = transformers.AutoModel.from_pretrained(args.st_dir).eval()
    setup_s = time.perf_counter() - start
    batch = texts(max(sizes), args.seq_len)

    def request(chunk):
        with torch.inference_mode():
            tokens = tokenizer(
                chunk,
                padding="max_length",
                truncation=True,
                max_length=args.seq_len,
                return_tensors="pt",
            )
            hidden = model(**tokens).last_hidden_state
            mask = tokens["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1).numpy()

    return {
        "framework": "transformers",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "threads": torch.get_num_threads(),
        "setup_s": setup_s,
        "latency": {size: timed(request, batch[:size], args) for size in sizes},
        "vectors": request(batch[:2]).tolist(),
    }


MEASURE = {"savedmodel": measure_savedmodel, "transformers": measure_transformers}


def summary(args, sizes: list[int], results: dict) -> dict:
    import numpy as np

    ours, theirs = results["savedmodel"], results["transformers"]
    rows = []
    for size in sizes:
        a, b = ours["latency"][str(size)], theirs["latency"][str(size)]
        rows.append({"batch_size": size, "savedmodel": a, "transformers": b,
                     "p50_ratio": a["p50_s"] / b["p50_s"]})  # fmt: skip
    difference = np.abs(np.asarray(ours["vectors"]) - np.asarray(theirs["vectors"])).max()
    return {
        "model": args.st_dir or embedding_bench.DEFAULT_MODEL,
        "seq_len": args.seq_len,
        "requests": args.requests,
        "warmup": args.warmup,
        "cores": embedding_bench.cores(),
        "versions": {**ours["versions"], **theirs["versions"]},
        "max_vector_difference": float(difference),
        "rows": rows,
    }


def print_report(r: dict) -> None:
    versions = ", ".join(f"{name} {version}" for name, version in r["versions"].items())
    print(
        f"model      {r['model']}, texts padded and cut to {r['seq_len']} tokens, a vector each "
        f"(the two sides' vectors differ by at most {r['max_vector_difference']:.1e})"
    )
    print(
        f"timing     {r['requests']} requests a batch size after {r['warmup']} warm-up ones, "
        f"tokenizing included; {r['cores']} cores; each side in its own process"
    )
    print(f"versions   {versions}")
    print()
    print(f"{'batch':>5}  {'SavedModel p50 / p99 (ms)':>26}  {'transformers p50 / p99 (ms)':>28}"
          f"  {'p50 ratio':>9}")  # fmt: skip
    for row in r["rows"]:
        a, b = row["savedmodel"], row["transformers"]
        print(
            f"{row['batch_size']:>5}  {a['p50_s'] * 1e3:>12.1f} / {a['p99_s'] * 1e3:<11.1f}  "
            f"{b['p50_s'] * 1e3:>13.1f} / {b['p99_s'] * 1e3:<12.1f}  {row['p50_ratio']:>9.2f}"
        )
    print("p50 ratio: the SavedModel's p50 over transformers' (below 1: the SavedModel is faster)")


if __name__ == "__main__":
    program.run("bertjax.bench.serving:main", define_flags)
