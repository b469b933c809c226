"""Predictions of a fine-tuned workdir for new examples.

    python -m bertjax.predict --workdir runs/mrpc --input new.tsv [--output out.jsonl]

The input's format follows the task (its module's `predict_file`):
  classification  a TSV, CSV or JSONL file with the task's text columns (as in
                  training; a label column is not needed) -> JSON lines
                  {"label": ..., "probabilities": {...}} or {"score": ...}
  tagging         plain text, one sentence per line, words split at whitespace
                  -> JSON lines {"words": [...], "tags": [...]}
  squad           a SQuAD JSON file (answers not needed) -> a directory with
                  predictions.json, nbest_predictions.json (and null_odds.json for 2.0)

The default output sits next to the input: FILE.predictions.jsonl, or the
directory FILE.predictions/ for SQuAD.
"""

from absl import flags

from bertjax import program


def define_flags() -> None:
    flags.DEFINE_string("workdir", None, "A fine-tuning workdir.", required=True)
    flags.DEFINE_string("input", None, "The examples to predict.", required=True)
    flags.DEFINE_string("output", "", "Where to write; default next to --input.")
    flags.DEFINE_integer("step", None, "Checkpoint step; default the latest.")
    flags.DEFINE_integer("batch_size", 32, "Examples per forward pass.")


if __name__ == "__main__":
    program.run("bertjax.predictions:main", define_flags)
