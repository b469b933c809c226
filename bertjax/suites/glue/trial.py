r"""One trial of `bertjax.suites glue run`: bertjax.main's fine-tuning run, then what GLUE asks of
it beyond its own evaluation (predictions.py): MNLI's mismatched dev set and the test
sets' predictions, from the final checkpoint.

    python -m bertjax.suites.glue.trial --config experiments/finetune/glue.py --workdir DIR \
        --config.data.glue_task=rte --config.init_checkpoint=W [--config.KEY=VALUE ...]

The flags are bertjax.main's. Run again after a stop, it resumes the training (or
finds it done) and predicts what is not yet written.
"""

from bertjax import main as main_lib
from bertjax import program

if __name__ == "__main__":
    # bertjax.main's flags; the work (trial_work.py) imports TensorFlow and JAX, so it is
    # imported once they are parsed: --help and a bad flag answer before either starts.
    program.run("bertjax.suites.glue.trial_work:main", main_lib.define_flags)
