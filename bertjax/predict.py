"""Predictions of a fine-tuned workdir for new examples.

    python -m bertjax.predict --workdir runs/mrpc --input new.tsv [--output out.jsonl]

The input's format follows the task:
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

import argparse
import json
import os
import sys

from bertjax import checkpoint, inference
from data_pipeline import classification, squad


def predict(workdir: str, input_path: str, output: str = "", *, step=None, batch_size=32) -> str:
    """Writes the predictions for `input_path`; returns where they went."""
    if not os.path.exists(input_path):
        raise FileNotFoundError(f"--input={input_path}: no such file")
    restored = inference.restore(workdir, step=step)
    if restored.task is None:
        raise checkpoint.CheckpointError(
            f"--workdir={workdir}: not a fine-tuning workdir (no task.json)"
        )
    kind = restored.task["kind"]
    if kind == "squad":
        output = output or input_path + ".predictions"
        data = squad.read_squad_json(input_path, labelled=False)
        predictions = inference.predict_answers(restored, data, batch_size)
        os.makedirs(output, exist_ok=True)
        squad.write_predictions(predictions, output)
        return output

    output = output or input_path + ".predictions.jsonl"
    if kind == "classification":
        text_a, text_b = classification.read_texts(restored.task["data"], input_path)
        records = []
        for begin in range(0, len(text_a), batch_size):
            records += inference.classify(
                restored,
                text_a[begin : begin + batch_size],
                pairs=text_b[begin : begin + batch_size],
            )
    else:
        text = classification.read_text_file(input_path)
        lines = [line.split() for line in text.splitlines() if line.strip()]
        records = []
        for words in lines:
            tagged = inference.tag(restored, words)
            records.append({"words": words, "tags": [tag for _, tag in tagged]})
    with open(output + ".tmp", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(record) + "\n" for record in records)
    os.replace(output + ".tmp", output)
    return output


def main(argv: list[str] | None = None) -> int:
    # argparse, not absl flags: library code that tests import defines no global flags.
    parser = argparse.ArgumentParser(
        prog="python -m bertjax.predict", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--workdir", required=True, help="A fine-tuning workdir.")
    parser.add_argument("--input", required=True, help="The examples to predict.")
    parser.add_argument("--output", default="", help="Where to write; default next to --input.")
    parser.add_argument("--step", type=int, default=None, help="Checkpoint step; the latest.")
    parser.add_argument("--batch_size", type=int, default=32, help="Examples per forward pass.")
    args = parser.parse_args(argv)
    try:
        where = predict(
            args.workdir, args.input, args.output, step=args.step, batch_size=args.batch_size
        )
    except (
        FileNotFoundError,
        checkpoint.CheckpointError,
        classification.TaskDataError,
    ) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"predictions written to {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
