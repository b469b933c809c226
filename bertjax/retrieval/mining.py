"""Hard negatives from an embedder's own ranking: `python -m bertjax.retrieval mine`.

For each query of the split with a relevant passage, the embedder ranks the whole
corpus; the negatives are drawn from the ranks in `rank_range` (1 is the best), never
a passage the qrels judge relevant to the query, and, with a margin, never one scored
too close to the query's relevant passages (above the lowest of their cosines less
`margin`, or times 1 - `relative_margin`; a margin of 0 drops those scored above it):
an unlabelled positive is more likely there. `sampling` 'top' keeps the best ranked of
what is left, 'random' draws them with `seed`. The output is JSON lines, one per query,
best ranked first:

    {"query_id": "q1", "negatives": ["d7", "d3"], "scores": [0.71, 0.69]}

`scores` are the embedder's cosines. With a reranker (`scorer`), each line also holds
its scores of the negatives and of the relevant passages ("scorer_scores",
"scorer_positives"): what a distilled student learns from.

Memory is bounded by a piece of the corpus, not the corpus: it is embedded and
searched `chunk` passages at a time, each query keeping its best `last rank` passages
so far (search.top_k's score matrix is never more than a chunk wide).
"""

import dataclasses
import json

import numpy as np

from bertjax import inference, search, tasks
from bertjax import workdir as workdir_lib
from bertjax.tasks import reranking
from data_pipeline import files, progress
from data_pipeline.errors import UserError
from data_pipeline.finetune import retrieval_input

SAMPLINGS = ("top", "random")


@dataclasses.dataclass(frozen=True)
class Options:
    rank_range: tuple[int, int] = (1, 50)  # ranks A to B, both kept, 1 the best
    num_negatives: int = 7
    # A negative's cosine at most the positive's - margin, or the positive's * (1 -
    # relative_margin); None: no bound (0 bounds it by the positive's own).
    margin: float | None = None
    relative_margin: float | None = None
    sampling: str = "top"
    seed: int = 0
    chunk: int = 65536  # passages embedded and searched at a time

    def __post_init__(self):
        first, last = self.rank_range
        if not 1 <= first <= last:
            raise UserError(f"--rank_range={first}:{last}: ranks A:B with 1 <= A <= B")
        if self.num_negatives < 1:
            raise UserError(f"--num_negatives={self.num_negatives}: at least 1")
        if self.margin is not None and self.relative_margin is not None:
            raise UserError("--margin and --relative_margin: give one of them")
        if self.margin is not None and self.margin < 0:
            raise UserError(f"--margin={self.margin}: at least 0")
        if self.relative_margin is not None and not 0 <= self.relative_margin < 1:
            raise UserError(f"--relative_margin={self.relative_margin}: from 0, below 1")
        if self.sampling not in SAMPLINGS:
            raise UserError(f"--sampling={self.sampling!r}: one of {', '.join(SAMPLINGS)}")
        if self.chunk < 1:
            raise UserError(f"--chunk={self.chunk}: at least 1")


def parse_rank_range(text: str) -> tuple[int, int]:
    try:
        first, last = (int(part) for part in text.split(":"))
    except ValueError:
        raise UserError(f"--rank_range={text!r}: ranks A:B, such as 3:50") from None
    return first, last


def require_kind(workdir: str, flag: str, *, reranker: bool) -> None:
    """A reranker's workdir where one is wanted, and an embedder's (any other) elsewhere:
    from task.json, before anything loads."""
    kind, _ = workdir_lib.read_task(workdir)
    reranks = tasks.get(kind, where=f"{flag}={workdir}: task").reranks
    if reranker and not reranks:
        raise UserError(f"{flag}={workdir}: a {kind} workdir; this takes a reranking workdir")
    if not reranker and reranks:
        raise UserError(
            f"{flag}={workdir}: a reranking workdir scores pairs; this takes an embedder "
            "(any other workdir)"
        )


def mine(
    workdir: str,
    collection: retrieval_input.Collection,
    out: str,
    options: Options = Options(),
    *,
    scorer: str = "",
    step=None,
    batch_size: int = 64,
) -> dict:
    """Writes OUT (JSON lines, the module docstring's) for the collection's judged queries
    (retrieval_input.load_collection); returns counts for the summary."""
    require_kind(workdir, "--workdir", reranker=False)
    if scorer:
        require_kind(scorer, "--scorer", reranker=True)
    if files.isdir(out):
        raise UserError(f"--out={out}: a directory; give the file to write")
    relevant = {
        q: [d for d, score in judged.items() if score > 0] for q, judged in collection.qrels.items()
    }
    query_ids = [q for q in collection.query_ids if relevant.get(q)]
    if not query_ids:
        raise UserError(f"{collection.source}: no query of the split has a relevant passage")
    restored = inference.restore(workdir, step)
    texts = dict(zip(collection.query_ids, collection.queries, strict=True))
    passages = collection.passages
    chunks = range(0, len(passages), options.chunk)
    mining = progress.Progress(
        f"embedding {len(query_ids):,} queries, then embedding and searching "
        f"{len(passages):,} passages",
        -(-len(query_ids) // batch_size)
        + sum(-(-len(passages[begin : begin + options.chunk]) // batch_size) for begin in chunks),
        unit="batches",
    )
    queries = inference.embed(
        restored, [texts[q] for q in query_ids], batch_size=batch_size, progress=mining
    )
    passage_index = {d: i for i, d in enumerate(collection.passage_ids)}
    positives = [[passage_index[d] for d in relevant[q]] for q in query_ids]
    # The relevant passages' cosines bound the negatives only with a margin: their vectors
    # are kept as their chunks go by.
    bounded = options.margin is not None or options.relative_margin is not None
    best, where, kept_vectors = _search_in_chunks(
        restored, passages, queries, options, mining, batch_size,
        keep=np.unique([i for judged in positives for i in judged]) if bounded else np.zeros(0),
    )  # fmt: skip
    mining.finish()
    positive_floor = np.zeros(len(query_ids), np.float32)
    if bounded:
        positive_floor = _positive_floor(queries, positives, kept_vectors)
    rng = np.random.default_rng(options.seed)
    lines, short = [], 0
    for row, query in enumerate(query_ids):
        kept = _negatives(
            best[row], where[row], set(positives[row]), positive_floor[row], options, rng
        )
        short += len(kept) < options.num_negatives
        line = {
            "query_id": query,
            "negatives": [collection.passage_ids[i] for i, _ in kept],
            "scores": [round(float(s), 6) for _, s in kept],
        }
        lines.append(line)
    if scorer:
        _add_scorer_scores(scorer, lines, texts, collection, relevant, batch_size)
    files.atomic_write(out, "".join(json.dumps(line) + "\n" for line in lines))
    return {"queries": len(lines), "short": short, "passages": len(collection.passages)}


def _search_in_chunks(restored, passages, queries, options, mining, batch_size, keep):
    """Each query's best `last rank` passages over the corpus, a chunk at a time: scores
    float32 and corpus indices int, [Nq, K], best first, and {corpus index: vector} of
    the passages in `keep` (sorted corpus indices). `mining` counts the batches."""
    depth = options.rank_range[1]
    best = np.full((len(queries), 0), -np.inf, np.float32)
    where = np.zeros((len(queries), 0), np.int64)
    kept = {}
    for begin in range(0, len(passages), options.chunk):
        vectors = inference.embed(
            restored, passages[begin : begin + options.chunk], batch_size=batch_size,
            progress=mining,
        )  # fmt: skip
        here = keep[(keep >= begin) & (keep < begin + len(vectors))]
        kept |= {int(i): vectors[i - begin] for i in here}
        scores, indices = search.top_k(queries, vectors, depth)
        best = np.concatenate([best, scores], axis=1)
        where = np.concatenate([where, indices + begin], axis=1)
        # Best first; equal scores keep the earlier passage first, as one search would.
        order = np.lexsort((where, -best), axis=-1)[:, :depth]
        best = np.take_along_axis(best, order, axis=1)
        where = np.take_along_axis(where, order, axis=1)
    return best, where, kept


def _positive_floor(queries, positives, vectors) -> np.ndarray:
    """Each query's lowest cosine to one of its relevant passages (`positives`, corpus
    indices), from their `vectors` {corpus index: vector}: float32 [Nq]."""
    query_units = search.unit(queries)
    return np.asarray(
        [
            min(float(query_units[q] @ search.unit(vectors[i])) for i in judged)
            for q, judged in enumerate(positives)
        ],
        np.float32,
    )


def _negatives(scores, indices, relevant: set, floor: float, options: Options, rng):
    """(corpus index, cosine) of a query's negatives, best ranked first."""
    first, last = options.rank_range
    ceiling = np.inf
    if options.margin is not None:
        ceiling = floor - options.margin
    elif options.relative_margin is not None:
        ceiling = floor * (1 - options.relative_margin)
    candidates = [
        (int(i), float(s))
        for i, s in zip(indices[first - 1 : last], scores[first - 1 : last], strict=True)
        if int(i) not in relevant and s <= ceiling
    ]
    if options.sampling == "random" and len(candidates) > options.num_negatives:
        picked = sorted(rng.choice(len(candidates), options.num_negatives, replace=False))
        return [candidates[k] for k in picked]
    return candidates[: options.num_negatives]


def _add_scorer_scores(scorer, lines, texts, collection, relevant, batch_size) -> None:
    """Each line's reranker scores of its negatives and its query's relevant passages, the
    pairs of every line scored together, batched by length."""
    restored = inference.restore(scorer)
    corpus = dict(zip(collection.passage_ids, collection.passages, strict=True))
    pairs = [
        (line["query_id"], d)
        for line in lines
        for d in [*relevant[line["query_id"]], *line["negatives"]]
    ]
    scoring = progress.Progress(
        f"scoring {len(pairs):,} pairs with the reranker", -(-len(pairs) // batch_size),
        unit="batches",
    )  # fmt: skip
    scores = reranking.score_pairs(
        restored, [texts[q] for q, _ in pairs], [corpus[d] for _, d in pairs],
        batch_size=batch_size, progress=scoring,
    )  # fmt: skip
    scoring.finish()
    at = 0
    for line in lines:
        positives = relevant[line["query_id"]]
        count = len(positives) + len(line["negatives"])
        values = [round(float(s), 6) for s in scores[at : at + count]]
        at += count
        line["scorer_positives"] = dict(zip(positives, values, strict=False))
        line["scorer_scores"] = values[len(positives) :]
