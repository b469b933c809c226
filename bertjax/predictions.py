"""Predictions of a fine-tuned workdir for new examples (python -m bertjax.predict: its usage
says what each task's input and output are).
"""

from bertjax import inference, tasks
from bertjax.workdir import CheckpointError
from data_pipeline import files


def predict(workdir: str, input_path: str, output: str = "", *, step=None, batch_size=32) -> str:
    """Writes the predictions for `input_path`; returns where they went."""
    if not files.exists(input_path):
        raise FileNotFoundError(f"--input={input_path}: no such file")
    restored = inference.restore(workdir, step=step)
    task = tasks.get(restored.kind, where=f"{workdir}: task.json's kind")
    if task.predict_file is None:
        raise CheckpointError(
            f"--workdir={workdir}: a {task.name} workdir; predict needs a fine-tuned one"
        )
    return task.predict_file(restored, input_path, output, batch_size)


def main(args) -> None:
    where = predict(
        args.workdir,
        args.input,
        args.output,
        step=args.step,
        batch_size=args.batch_size,
    )
    print(f"predictions written to {where}")
