"""Scores an embedder: retrieval on a BEIR collection, or STS correlation.

    python -m bertjax.retrieval evaluate --workdir W --data_dir BEIR_DIR --split test --out OUT
    python -m bertjax.retrieval sts --workdir W --file sts.tsv

W is any workdir (imported, pretrained or fine-tuned); it embeds as bertjax.embed does.
`evaluate` embeds the split's queries and the whole corpus, searches exactly on the
devices (the corpus split over all of them), and writes OUT/run.trec (each query's top
100, the TREC run format) and OUT/metrics.json (nDCG@10, MRR@10, Recall@100, MAP@100 as
trec_eval computes them from run.trec, averaged over the judged queries). `sts` prints
the Spearman correlation between the cosine of each pair's vectors and its score (a TSV,
CSV or JSONL file with columns sentence1, sentence2 and score).
"""

from absl import flags

COMMANDS = ("evaluate", "sts")
# The retrieval input's options (data_pipeline/finetune/retrieval_input.py) that
# evaluate's flags set, by the flag: its errors name the flag a person typed.
EVALUATE_OPTIONS = {"--data_dir": "beir_dir", "--split": "eval_split"}


def define_flags() -> None:
    flags.DEFINE_string("workdir", None, "The embedder: any bertjax workdir.", required=True)
    flags.DEFINE_string("data_dir", "", "evaluate: a BEIR-layout directory.")
    flags.DEFINE_string("split", "test", "evaluate: the qrels split (qrels/SPLIT.tsv).")
    flags.DEFINE_string("out", "", "evaluate: where run.trec and metrics.json go.")
    flags.DEFINE_string("file", "", "sts: the scored pairs.")
    flags.DEFINE_integer("step", None, "Checkpoint step; default the latest.")
    flags.DEFINE_integer("batch_size", 64, "Texts per forward pass.")
