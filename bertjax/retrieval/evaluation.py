"""The work of `python -m bertjax.retrieval` (its __main__ describes the commands)."""

import os

import jax
import numpy as np

from bertjax import inference, retrieval_metrics, search
from bertjax.retrieval import command, mining
from bertjax.tasks import scores
from data_pipeline import files, progress
from data_pipeline.errors import UserError
from data_pipeline.finetune import records, retrieval_input

RUN_FILE, METRICS_FILE = "run.trec", "metrics.json"


def main(args) -> None:
    if len(args.argv) != 1 or args.argv[0] not in command.COMMANDS:
        raise UserError(
            f"expected a command, {', '.join(command.COMMANDS)}; got: {' '.join(args.argv)}"
        )
    if args.argv[0] == "mine":
        _mine(args)
        return
    if args.argv[0] == "evaluate":
        for flag in ("data_dir", "split", "out"):
            if not getattr(args, flag):
                raise UserError(f"evaluate needs --{flag}")
        figures = evaluate(
            args.workdir, args.data_dir, args.split, args.out, args.step, args.batch_size
        )
        print("  ".join(f"{name} {figures[name]:.4f}" for name in retrieval_metrics.MEASURES))
        print(f"wrote {os.path.join(args.out, RUN_FILE)} and {METRICS_FILE}")
        return
    if not args.file:
        raise UserError("sts needs --file")
    correlation, pairs = sts(args.workdir, args.file, args.step, args.batch_size)
    print(f"STS spearman {correlation:.4f} ({pairs} pairs)")


def _mine(args) -> None:
    for flag in ("data_dir", "out"):
        if not getattr(args, flag):
            raise UserError(f"mine needs --{flag}")
    options = mining.Options(
        rank_range=mining.parse_rank_range(args.rank_range),
        num_negatives=args.num_negatives,
        margin=args.margin,
        relative_margin=args.relative_margin,
        sampling=args.sampling,
        seed=args.seed,
        chunk=args.chunk,
    )
    mining.require_kind(args.workdir, "--workdir", reranker=False)
    collection = _load_collection(args.data_dir, args.split)
    counts = mining.mine(
        args.workdir, collection, args.out, options,
        scorer=args.scorer, step=args.step, batch_size=args.batch_size,
    )  # fmt: skip
    short = f"; {counts['short']:,} with fewer than {args.num_negatives}" if counts["short"] else ""
    print(f"wrote {args.out}: negatives of {counts['queries']:,} queries{short}")


def evaluate(
    workdir: str, data_dir: str, split: str, out: str, step=None, batch_size: int = 64
) -> dict[str, float]:
    """trec_eval's measures of `workdir`'s search of the BEIR collection's `split`, with
    OUT/run.trec and OUT/metrics.json written."""
    if files.exists(out) and not files.isdir(out):
        raise UserError(f"--out={out}: a file, not a directory")
    collection = _load_collection(data_dir, split)
    mining.require_kind(workdir, "--workdir", reranker=False)
    restored = inference.restore(workdir, step)
    texts = (collection.queries, collection.passages)
    embedding = progress.Progress(
        f"embedding {len(texts[0]):,} queries and {len(texts[1]):,} passages",
        sum(-(-len(part) // batch_size) for part in texts),
        unit="batches",
    )
    queries, passages = (
        inference.embed(restored, part, batch_size=batch_size, progress=embedding) for part in texts
    )
    embedding.finish()
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("corpus",))
    run = search.ranked(
        collection.query_ids,
        collection.passage_ids,
        queries,
        passages,
        retrieval_metrics.DEPTH,
        mesh=mesh,
    )
    figures = retrieval_metrics.evaluate(collection.qrels, run)
    retrieval_metrics.write_trec_run(
        os.path.join(out, RUN_FILE), run, depth=retrieval_metrics.DEPTH
    )
    record = {
        **figures,
        "workdir": workdir,
        "step": restored.step,
        "data_dir": data_dir,
        "split": split,
        "queries": len(collection.queries),
        "passages": len(collection.passages),
    }
    files.atomic_write_json(os.path.join(out, METRICS_FILE), record)
    return figures


def _load_collection(data_dir: str, split: str) -> retrieval_input.Collection:
    """The collection, its errors naming this command's flags, not the config options a
    fine-tuning run gives the same values by."""
    try:
        return retrieval_input.load_collection(data_dir, split)
    except UserError as error:
        message = str(error)
        for flag, option in command.EVALUATE_OPTIONS.items():
            message = message.replace(records.OPTION_PREFIX + option, flag)
        raise type(error)(message) from None


def sts(workdir: str, path: str, step=None, batch_size: int = 64) -> tuple[float, int]:
    """(Spearman's rho of cosine against score, pairs) over the file's pairs."""
    columns = [("file", "sentence1"), ("file", "sentence2"), ("file", "score")]
    first, second, gold = [], [], []
    for line, (a, b, score) in records.read_records(path, columns):
        try:
            gold.append(float(score))
        except ValueError:
            raise UserError(f"{path}: line {line}: score {score!r} is not a number") from None
        first.append(str(a))
        second.append(str(b))
    if len(gold) < 2:
        raise UserError(f"{path}: {len(gold)} pairs; a correlation needs at least 2")
    mining.require_kind(workdir, "--workdir", reranker=False)
    restored = inference.restore(workdir, step)
    a, b = (
        inference.embed(restored, texts, batch_size=batch_size, normalize=True)
        for texts in (first, second)
    )
    return float(scores.spearman(np.asarray(gold), np.sum(a * b, axis=1))), len(gold)
