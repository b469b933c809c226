r"""One trial of `bertjax.suites glue run`: bertjax.main's fine-tuning run, then what GLUE asks of
it beyond its own evaluation (predictions.py): MNLI's mismatched dev set and the test
sets' predictions, from the final checkpoint.

    python -m bertjax.suites.glue.trial --config experiments/finetune/glue.py --workdir DIR \
        --config.data.glue_task=rte --config.init_checkpoint=W [--config.KEY=VALUE ...]

The flags are bertjax.main's. Run again after a stop, it resumes the training (or
finds it done) and predicts what is not yet written.
"""

import jax

from bertjax import experiment, program
from bertjax import main as main_lib
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


if __name__ == "__main__":
    # An internal program (the suite starts it), so its imports need not wait for the flags.
    program.run("bertjax.suites.glue.trial:main", main_lib.define_flags)
