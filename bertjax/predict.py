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
from data_pipeline import files


def predict(workdir: str, input_path: str, output: str = "", *, step=None, batch_size=32) -> str:
    """Writes the predictions for `input_path`; returns where they went."""
    if not files.exists(input_path):
        raise FileNotFoundError(f"--input={input_path}: no such file")
    # Imported here, not at the top: `--help`, a usage error and a missing local --input
    # answer in a fraction of a second instead of after seconds of TensorFlow and JAX imports.
    from bertjax import inference, tasks
    from bertjax.workdir import CheckpointError

    restored = inference.restore(workdir, step=step)
    task = tasks.get(restored.kind, where=f"{workdir}: task.json's kind")
    if task.predict_file is None:
        raise CheckpointError(
            f"--workdir={workdir}: a {task.name} workdir; predict needs a fine-tuned one"
        )
    return task.predict_file(restored, input_path, output, batch_size)


def define_flags() -> None:
    flags.DEFINE_string("workdir", None, "A fine-tuning workdir.", required=True)
    flags.DEFINE_string("input", None, "The examples to predict.", required=True)
    flags.DEFINE_string("output", "", "Where to write; default next to --input.")
    flags.DEFINE_integer("step", None, "Checkpoint step; default the latest.")
    flags.DEFINE_integer("batch_size", 32, "Examples per forward pass.")


def main(argv) -> None:
    del argv
    values = flags.FLAGS
    where = predict(
        values.workdir,
        values.input,
        values.output,
        step=values.step,
        batch_size=values.batch_size,
    )
    print(f"predictions written to {where}")


if __name__ == "__main__":
    program.run(main, define_flags)
