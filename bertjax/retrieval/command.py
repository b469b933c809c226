r"""Scores an embedder (retrieval on a BEIR collection, or STS correlation), and mines hard
negatives with it for a reranker.

    python -m bertjax.retrieval evaluate --workdir W --data_dir BEIR_DIR --split test --out OUT \
        [--rerank RERANKER [--rerank_depth 100] [--rerank_step N] [--first_stage RUN.trec]]
    python -m bertjax.retrieval sts --workdir W --file sts.tsv
    python -m bertjax.retrieval mine --workdir W --data_dir BEIR_DIR --split train \
        --out negatives.jsonl [--rank_range 3:50] [--num_negatives 7] [--margin M]

W is any workdir but a reranker's (imported, pretrained or fine-tuned); it embeds as
bertjax.embed does.
`evaluate` embeds the split's queries and the whole corpus, searches exactly on the
devices (the corpus split over all of them), and writes OUT/run.trec (each query's top
100, the TREC run format) and OUT/metrics.json (nDCG@10, MRR@10, Recall@100, MAP@100 as
trec_eval computes them from run.trec, averaged over the judged queries). With --rerank,
each query's first --rerank_depth passages (of W's search, or of --first_stage, any
system's TREC run file, in place of --workdir) are scored by the reranker (its latest
checkpoint, or --rerank_step's) and ranked by it: OUT holds the reranked run.trec and
metrics.json, OUT/first_stage/ the first stage's. `sts` prints
the Spearman correlation between the cosine of each pair's vectors and its score (a TSV,
CSV or JSONL file with columns sentence1, sentence2 and score). `mine` writes each
query of the split that has a relevant passage, with negatives from W's ranking of the
corpus (ranks --rank_range, never a passage judged relevant, none scored within a
margin of the query's relevant passages), as the reranking task reads them
(--config.data.negatives_file): bertjax/retrieval/mining.py says how.
"""

from absl import flags

COMMANDS = ("evaluate", "sts", "mine")
# The retrieval input's options (data_pipeline/finetune/retrieval_input.py) that
# evaluate's flags set, by the flag: its errors name the flag a person typed.
EVALUATE_OPTIONS = {"--data_dir": "beir_dir", "--split": "eval_split"}


def define_flags() -> None:
    flags.DEFINE_string("workdir", "", "The embedder: any bertjax workdir but a reranker's.")
    flags.DEFINE_string("data_dir", "", "evaluate, mine: a BEIR-layout directory.")
    flags.DEFINE_string(
        "split", None, "evaluate (default test), mine (required): the qrels split, qrels/SPLIT.tsv."
    )
    flags.DEFINE_string(
        "out", "", "evaluate: where run.trec and metrics.json go; mine: the file to write."
    )
    flags.DEFINE_string("file", "", "sts: the scored pairs.")
    flags.DEFINE_integer("step", None, "Checkpoint step; default the latest.")
    flags.DEFINE_integer("batch_size", 64, "Texts per forward pass.")
    flags.DEFINE_string("rank_range", "1:50", "mine: the ranks A:B negatives come from (1: best).")
    flags.DEFINE_integer("num_negatives", 7, "mine: negatives per query, at most.")
    flags.DEFINE_float(
        "margin", None, "mine: a negative's cosine at most the positive's - this; unset: any."
    )
    flags.DEFINE_float(
        "relative_margin", None, "mine: a negative's cosine at most the positive's x (1 - this)."
    )
    flags.DEFINE_enum("sampling", "top", ["top", "random"], "mine: the best ranked, or at random.")
    flags.DEFINE_integer("seed", 0, "mine: the seed of --sampling=random.")
    flags.DEFINE_integer("chunk", 65536, "mine: passages embedded and searched at a time.")
    flags.DEFINE_string("scorer", "", "mine: a reranking workdir whose scores are written too.")
    flags.DEFINE_string(
        "rerank", "", "evaluate: a reranking workdir that reorders the first stage."
    )
    flags.DEFINE_integer(
        "rerank_depth", None, "evaluate --rerank: the first stage's passages reranked; default 100."
    )
    flags.DEFINE_integer(
        "rerank_step",
        None,
        "evaluate --rerank: the reranker's checkpoint step; default its latest.",
    )
    flags.DEFINE_string(
        "first_stage", "", "evaluate --rerank: a TREC run file to rerank instead of --workdir's."
    )
