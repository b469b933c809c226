"""Where training metrics go: the console, a progress bar, TensorBoard and metrics.jsonl.

`metrics.jsonl` has one JSON object per logged point, with at least `step`,
`split` ('train' or 'eval'), `loss`, `mlm_loss`, `mlm_accuracy`, `nsp_loss`,
`nsp_accuracy`, and on train lines `learning_rate`, `steps_per_second`,
`tokens_per_second` (text tokens read, padding not counted),
`model_flops_per_second` and `mfu` (model FLOPs
utilisation, a fraction; bertjax.flops; absent where the devices' peak is
unknown).
"""

import json
import os
import sys
import time

import jax
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from bertjax import workdir as workdir_lib

# What tf.summary.scalar would attach, written without the tensorboard package.
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
).SerializeToString()


class MetricWriter:
    """Writes on process 0 only; the others stay quiet."""

    def __init__(self, workdir: str, *, num_train_steps: int, out=None):
        self.num_train_steps = num_train_steps
        self.out = out or sys.stdout
        self.active = jax.process_index() == 0
        self.progress = self.active and self.out.isatty()
        if self.active:
            tf.io.gfile.makedirs(workdir)
            metrics_file = os.path.join(workdir, workdir_lib.METRICS_FILE)
            # Each flush puts the lines on disk; in Cloud Storage it uploads the whole
            # object again, cheap for a file that grows by one line a log step.
            self._jsonl = tf.io.gfile.GFile(metrics_file, "a")
            self._tensorboard = tf.summary.create_file_writer(
                os.path.join(workdir, workdir_lib.TENSORBOARD_DIR)
            )

    def write(self, step: int, split: str, values: dict) -> None:
        if not self.active:
            return
        record = {"step": step, "split": split, **values}
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        with self._tensorboard.as_default(step=step):
            for name, value in values.items():
                if isinstance(value, int | float):
                    tensor = tf.constant(value, tf.float32)
                    tf.summary.write(f"{split}/{name}", tensor, metadata=_SCALAR_METADATA)
        self._tensorboard.flush()

    def console(self, line: str) -> None:
        if self.active:
            if self.progress:
                self.out.write("\r\033[K")
            print(line, file=self.out, flush=True)

    def progress_bar(self, step: int, started: float, start_step: int) -> None:
        if not self.progress:
            return
        done = step / max(self.num_train_steps, 1)
        width = 30
        filled = int(done * width)
        rate = (step - start_step) / max(time.perf_counter() - started, 1e-9)
        self.out.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {step}/{self.num_train_steps} "
            f"{rate:.2f} steps/s"
        )
        self.out.flush()

    def close(self) -> None:
        if self.active:
            self._jsonl.close()
            self._tensorboard.close()


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"
