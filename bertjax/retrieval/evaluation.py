"""The work of `python -m bertjax.retrieval` (its __main__ describes the commands)."""

import os

import jax
import numpy as np

from bertjax import inference, retrieval_metrics, search
from bertjax.retrieval import command, mining
from bertjax.tasks import scores
from bertjax.tasks.reranking import score_pairs
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
        split = "test" if args.split is None else args.split
        for flag, value in (("data_dir", args.data_dir), ("split", split), ("out", args.out)):
            if not value:
                raise UserError(f"evaluate needs --{flag}")
        for flag in ("rerank_depth", "rerank_step"):
            if getattr(args, flag) is not None and not args.rerank:
                raise UserError(f"--{flag}={getattr(args, flag)}: give --rerank, the reranker")
        if args.first_stage and args.workdir:
            raise UserError(
                f"--first_stage={args.first_stage} and --workdir={args.workdir}: one first "
                "stage, a run file or an embedder"
            )
        depth = retrieval_metrics.DEPTH if args.rerank_depth is None else args.rerank_depth
        figures = evaluate(
            args.workdir, args.data_dir, split, args.out, args.step, args.batch_size,
            rerank=args.rerank, rerank_depth=depth, first_stage=args.first_stage,
            rerank_step=args.rerank_step,
        )  # fmt: skip
        if args.rerank:
            print(f"first stage  {_figures(figures[FIRST_STAGE_DIR])}")
            print(f"reranked     {_figures(figures)}")
            print(
                f"by chance    ndcg@10 {figures[RANDOM_ORDER]:.4f} (the first "
                f"{depth} in a random order)"
            )
            print(
                f"wrote {os.path.join(args.out, RUN_FILE)}, {METRICS_FILE} and {FIRST_STAGE_DIR}/"
            )
            return
        print(_figures(figures))
        print(f"wrote {os.path.join(args.out, RUN_FILE)} and {METRICS_FILE}")
        return
    for flag in ("workdir", "file"):
        if not getattr(args, flag):
            raise UserError(f"sts needs --{flag}")
    correlation, pairs = sts(args.workdir, args.file, args.step, args.batch_size)
    print(f"STS spearman {correlation:.4f} ({pairs} pairs)")


def _figures(figures: dict) -> str:
    return "  ".join(f"{name} {figures[name]:.4f}" for name in retrieval_metrics.MEASURES)


def _mine(args) -> None:
    for flag in ("workdir", "data_dir", "split", "out"):
        if not getattr(args, flag):
            raise UserError(
                f"mine needs --{flag}"
                + (
                    " (qrels/SPLIT.tsv: whose queries get negatives, train)"
                    if flag == "split"
                    else ""
                )
            )
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
    workdir: str,
    data_dir: str,
    split: str,
    out: str,
    step=None,
    batch_size: int = 64,
    *,
    rerank: str = "",
    rerank_depth: int = retrieval_metrics.DEPTH,
    first_stage: str = "",
    rerank_step: int | None = None,
) -> dict[str, float]:
    """trec_eval's measures of `workdir`'s search of the BEIR collection's `split`, with
    OUT/run.trec and OUT/metrics.json written. With `rerank` (a reranking workdir), each
    query's first `rerank_depth` passages of that search, or of the run file
    `first_stage`, are scored by the reranker and ranked by its scores: OUT holds the
    reranked run and its measures, OUT/first_stage/ the first stage's. `rerank_step` is the
    reranker's checkpoint (default its latest)."""
    if files.exists(out) and not files.isdir(out):
        raise UserError(f"--out={out}: a file, not a directory")
    if first_stage and not rerank:
        raise UserError(f"--first_stage={first_stage}: give --rerank, the reranker to apply")
    if rerank:
        mining.require_kind(rerank, "--rerank", reranker=True)
        if rerank_depth < 1:
            raise UserError(f"--rerank_depth={rerank_depth}: at least 1")
    collection = _load_collection(data_dir, split)
    if first_stage:
        run = read_first_stage(first_stage, collection, rerank_depth)
        source = {"first_stage": first_stage}
    else:
        if not workdir:
            raise UserError(
                "evaluate needs --workdir (the embedder), or --first_stage with --rerank"
            )
        depth = max(retrieval_metrics.DEPTH, rerank_depth if rerank else 0)
        run, step = _search(workdir, collection, depth, step, batch_size)
        source = {"workdir": workdir, "step": step}
    about = {
        "data_dir": data_dir,
        "split": split,
        "queries": len(collection.queries),
        "passages": len(collection.passages),
    }
    if not rerank:
        return _write(out, collection, run, {**source, **about})
    first = _write(os.path.join(out, FIRST_STAGE_DIR), collection, run, {**source, **about})
    reranker = inference.restore(rerank, rerank_step)
    reranked = _reranked(reranker, collection, run, rerank_depth, batch_size)
    chance = retrieval_metrics.random_order_ndcg(collection.qrels, run, rerank_depth)
    agreement = _agreement(run, reranked, rerank_depth)
    about |= {
        "reranker": rerank,
        "reranker_step": reranker.step,
        "rerank_depth": rerank_depth,
        "first_stage": source,
        RANDOM_ORDER: chance,
        AGREEMENT: agreement,
    }
    figures = _write(out, collection, reranked, about)
    return {**figures, RANDOM_ORDER: chance, AGREEMENT: agreement, FIRST_STAGE_DIR: first}


# Where evaluate --rerank writes the first stage's run and measures, under OUT.
FIRST_STAGE_DIR = "first_stage"
# evaluate --rerank's bar: the expected nDCG@10 of the first stage's top rerank_depth in a
# random order (retrieval_metrics.random_order_ndcg), in OUT/metrics.json.
RANDOM_ORDER = "ndcg@10_random_order"
# The mean over queries of the Spearman correlation between the first stage's scores and
# the reranker's, over the passages reranked: below 0, the reranker inverts the first
# stage (docs/reranking.md says when: negatives the embedder scores above their
# positives, learned by a model whose pooled [CLS] never judged a pair).
AGREEMENT = "spearman_with_first_stage"


def _agreement(first, reranked, depth) -> float | None:
    """AGREEMENT of two runs over each query's first `depth` passages of `first`; None
    where no query has two passages with distinct scores in both."""
    from scipy import stats

    values = []
    for query, scored in first.items():
        top = retrieval_metrics.ranking(scored)[:depth]
        ours, theirs = [scored[d] for d in top], [reranked[query][d] for d in top]
        if len(set(ours)) > 1 and len(set(theirs)) > 1:
            values.append(stats.spearmanr(ours, theirs).statistic)
    return float(np.mean(values)) if values else None


def _search(workdir, collection, depth, step, batch_size):
    """The embedder's run of the collection, each query's `depth` best: (run, step)."""
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
        collection.query_ids, collection.passage_ids, queries, passages, depth, mesh=mesh
    )
    return run, restored.step


def _write(out, collection, run, about) -> dict[str, float]:
    """OUT/run.trec (each query's passages, best first) and OUT/metrics.json, with the
    number of queries its means are over: those of the run with judgments."""
    figures = retrieval_metrics.evaluate(collection.qrels, run)
    depth = max((len(scored) for scored in run.values()), default=1)
    retrieval_metrics.write_trec_run(os.path.join(out, RUN_FILE), run, depth=depth)
    scored = len(retrieval_metrics.per_query(collection.qrels, run))
    record = {**figures, **about, "queries_scored": scored}
    files.atomic_write_json(os.path.join(out, METRICS_FILE), record)
    return figures


def read_first_stage(path, collection, rerank_depth) -> dict[str, dict[str, float]]:
    """A TREC run file's run, every query and passage known, deep enough for the depth."""
    try:
        run = retrieval_metrics.read_trec_run(path)
    except OSError as error:
        raise UserError(f"--first_stage={path}: cannot read: {error.strerror or error}") from None
    except ValueError as error:
        raise UserError(f"--first_stage: {error}") from None
    if not run:
        raise UserError(f"--first_stage={path}: no lines")
    queries, passages = set(collection.query_ids), set(collection.passage_ids)
    for query, scored in run.items():
        if query not in queries:
            raise UserError(f"--first_stage={path}: query {query!r} is not in the split's queries")
        unknown = next((d for d in scored if d not in passages), None)
        if unknown is not None:
            raise UserError(
                f"--first_stage={path}: passage {unknown!r} of query {query!r} is not in the corpus"
            )
    deepest = max(len(scored) for scored in run.values())
    if rerank_depth > deepest:
        raise UserError(
            f"--rerank_depth={rerank_depth}: above the first stage's depth, {deepest} passages "
            f"a query at most ({path})"
        )
    return run


def _reranked(restored, collection, run, depth, batch_size) -> dict[str, dict[str, float]]:
    """Each query's first `depth` passages of `run`, scored by the restored reranker and
    ranked by it, then the rest of the run's passages in their order, scored below them.
    The pairs of every query are scored together, batched by length."""
    queries = dict(zip(collection.query_ids, collection.queries, strict=True))
    corpus = dict(zip(collection.passage_ids, collection.passages, strict=True))
    ranked = {query: retrieval_metrics.ranking(scored) for query, scored in run.items()}
    pairs = [(query, d) for query, order in ranked.items() for d in order[:depth]]
    reranking_progress = progress.Progress(
        f"reranking {len(run):,} queries' first {depth} ({len(pairs):,} pairs)",
        -(-len(pairs) // batch_size),
        unit="batches",
    )
    values = score_pairs(
        restored, [queries[q] for q, _ in pairs], [corpus[d] for _, d in pairs],
        batch_size=batch_size, progress=reranking_progress,
    )  # fmt: skip
    reranking_progress.finish()
    reranked: dict[str, dict[str, float]] = {}
    for (query, d), value in zip(pairs, values, strict=True):
        reranked.setdefault(query, {})[d] = float(value)
    for query, order in ranked.items():
        # The rest of the first stage's ranking below, in its order: Recall@100 and
        # MAP@100 then compare with the first stage's at any depth.
        lowest = min(reranked[query].values())
        for below, d in enumerate(order[depth:], 1):
            reranked[query][d] = lowest - below
    return reranked


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
