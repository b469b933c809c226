"""The work of `python -m bertjax.suites.glue.trial` (trial.py), imported once its flags are
parsed: bertjax.main's fine-tuning run, then the dev scores and test predictions GLUE asks of
it beyond the run's own evaluation (predictions.py)."""

import jax

from bertjax import experiment
from bertjax.suites.glue import predictions


def main(args):
    experiment.main(args)
    config = args.config
    results = predictions.write(args.workdir, config.data.to_dict(), config.eval_batch_size)
    if jax.process_index() == 0:
        for split, values in results["dev"].items():
            shown = "  ".join(f"{name} {value:.4f}" for name, value in values.items())
            print(f"{config.data.glue_task} {split}: {shown}")
        for name, written in results["test"].items():
            print(f"test predictions: {name} ({written['examples']} examples)")
