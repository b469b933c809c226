"""What a trial of `bertjax.suites glue run` adds to its fine-tuning run, from the run's final
checkpoint: the scores of the dev sets the run itself does not evaluate (MNLI's
mismatched one), and predictions for the task's test sets in the files the GLUE server
takes (submission.py), the MNLI run also predicting the diagnostic set (AX).

They go into the trial's workdir: WORKDIR/glue/results.json (the step they come from,
the dev scores, the test files with their example counts) and WORKDIR/glue/test/*.tsv.
A trial stopped while predicting predicts again when it resumes; results.json, written
last, says that everything before it is there.
"""

import json
import os

from bertjax.suites.glue import submission
from data_pipeline import files, progress
from data_pipeline.errors import UserError
from data_pipeline.finetune import classification_config, classification_input, glue_files

RESULTS_FILE = os.path.join("glue", "results.json")
TEST_DIR = os.path.join("glue", "test")
# The dev splits a task is scored on besides the run's own evaluation (split by file name).
OTHER_DEV = {"mnli": ("dev_mismatched",)}


def test_sets(task: str) -> list[tuple[str, str]]:
    """The (task, split) of each test set the run of `task` predicts."""
    own = [key for key in submission.FILES if key[0] == task]
    return own + ([("ax", "diagnostic")] if task == "mnli" else [])


def read(workdir: str) -> dict | None:
    """The trial's results.json, or None before it is written."""
    path = os.path.join(workdir, RESULTS_FILE)
    if not files.exists(path):
        return None
    try:
        return json.loads(files.read_bytes(path))
    except json.JSONDecodeError as error:
        raise UserError(f"{path}: not valid JSON ({error})") from None


def write(workdir: str, data_config: dict, batch_size: int) -> dict:
    """Scores the other dev splits and predicts the test sets of the task of
    `data_config` (a GLUE classification config) from the latest checkpoint; returns
    what results.json holds. Done once a checkpoint: a second call reads it back."""
    # Imported here: the GLUE suite imports this module, and answers --help and a
    # bad data directory before TensorFlow and JAX load.
    from bertjax import checkpoint, inference
    from bertjax.tasks import classification, scores

    step = checkpoint.latest_step(workdir)
    done = read(workdir)
    if done is not None and done.get("step") == step:
        return done
    restored = inference.restore(workdir)
    task = data_config["glue_task"]
    source = (data_config["glue_dir"], data_config["tfds_data_dir"])
    metrics = classification_config.GLUE_TASKS[task].metrics
    sets = [(task, split) for split in OTHER_DEV.get(task, ())] + test_sets(task)
    examples = {key: classification_input.read_glue_split(*source, *key) for key in sets}
    predicting = progress.Progress(
        "predicting " + ", ".join(f"{name} {split}" for name, split in sets),
        sum(-(-len(data.text_a) // batch_size) for data in examples.values()),
        unit="batches",
    )
    guesses = {
        key: classification.predicted(
            restored, data.text_a, data.text_b, batch_size, progress=predicting
        )
        for key, data in examples.items()
    }
    predicting.finish()
    dev = {
        split: {
            name: float(
                scores.get_metric(name).fn(examples[task, split].labels, guesses[task, split])
            )
            for name in metrics
        }
        for split in OTHER_DEV.get(task, ())
    }
    test = {}
    for key in test_sets(task):
        data = examples[key]
        path = submission.write(os.path.join(workdir, TEST_DIR), *key, data.index, guesses[key])
        test[os.path.basename(path)] = {"examples": len(data.index), "source": data.source}
    results = {"step": restored.step, "task": task, "dev": dev, "test": test}
    files.atomic_write_json(os.path.join(workdir, RESULTS_FILE), results)
    return results


def data_splits(task: str) -> list[tuple[str, str]]:
    """Every (task, split) a trial of `task` reads: training, dev and test."""
    dev = [s for s in glue_files.LAYOUTS[task].splits if s.startswith("dev")]
    return [(task, "train")] + [(task, s) for s in dev] + test_sets(task)
