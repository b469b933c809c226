"""Where training metrics go: the console, a progress bar, TensorBoard and metrics.jsonl.

`metrics.jsonl` has one JSON object per logged point, with at least `step`,
`split` ('train' or 'eval'), `loss`, `mlm_loss`, `mlm_accuracy`, `nsp_loss`,
`nsp_accuracy` (not for masked LM alone: config.data.next_sentence_prediction
False), and on train lines `learning_rate`, `steps_per_second`,
`tokens_per_second` (text tokens read, padding not counted),
`model_flops_per_second`, `mfu` (model FLOPs
utilisation, a fraction; bertjax.flops; absent where the devices' peak is
unknown), `input_wait_seconds` (per step, waiting for the host pipeline) and
`input_wait_fraction` (of the steps' time).
"""

import contextlib
import json
import os
import struct
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow as tf
from google.protobuf.message import DecodeError
from tensorflow.core.framework import summary_pb2
from tensorflow.core.util import event_pb2

from bertjax import workdir as workdir_lib
from data_pipeline import files
from data_pipeline.progress import format_duration

# What tf.summary.scalar would attach, written without the tensorboard package.
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
).SerializeToString()


class MetricWriter:
    """Writes on process 0 only; the others stay quiet. The history goes on from
    `start_step`, the step of the checkpoint the run starts from (0: none): what was
    logged after it is cut first (`cut_history`)."""

    def __init__(self, workdir: str, *, num_train_steps: int, start_step: int, out=None):
        self.num_train_steps = num_train_steps
        self.out = out or sys.stdout
        self.active = jax.process_index() == 0
        self.progress = self.active and self.out.isatty()
        if self.active:
            tf.io.gfile.makedirs(workdir)
            cut_history(workdir, start_step)
            metrics_file = os.path.join(workdir, workdir_lib.METRICS_FILE)
            # Each flush puts the lines on disk; in Cloud Storage it uploads the whole
            # object again, cheap for a file that grows by one line a log step.
            self._jsonl = tf.io.gfile.GFile(metrics_file, "a")
            self._summaries = _SummaryErrors(workdir)
            with self._summaries:
                self._tensorboard = tf.summary.create_file_writer(
                    os.path.join(workdir, workdir_lib.TENSORBOARD_DIR)
                )

    def write(self, step: int, split: str, values: dict) -> None:
        if not self.active:
            return
        record = {"step": step, "split": split, **values}
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        with self._summaries, self._tensorboard.as_default(step=step):
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
            with self._summaries:
                self._tensorboard.close()


class _SummaryErrors:
    """Turns TensorFlow's failure to write the TensorBoard summaries (several lines: its
    function node, the event file, "Failed to flush 1 events ...") into one OSError line
    naming the workdir, and a full disk as such."""

    def __init__(self, workdir: str):
        self.workdir = workdir

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if not isinstance(error, tf.errors.OpError):
            return False
        first = error.message.strip().splitlines()[0] if error.message.strip() else ""
        reason = first.rsplit(";", 1)[-1].strip() or type(error).__name__
        where = os.path.join(self.workdir, workdir_lib.TENSORBOARD_DIR)
        if "No space left on device" in error.message:
            raise OSError(
                f"{self.workdir}: the disk is full (no space left for the TensorBoard "
                f"summaries in {where}); free some space, then run the same command to resume"
            ) from None
        raise OSError(f"cannot write the TensorBoard summaries in {where}: {reason}") from None


def cut_history(workdir: str, step: int) -> None:
    """Cuts metrics.jsonl and the TensorBoard event files back to the records of steps up
    to `step` (0: none), each atomically: a run killed after its last checkpoint had
    logged the steps its resumption logs again."""
    workdir_lib.cut_metrics(workdir, step)
    pattern = os.path.join(workdir, workdir_lib.TENSORBOARD_DIR, "events.out.tfevents.*")
    for path in tf.io.gfile.glob(pattern):
        _cut_events(path, step)


def _cut_events(path: str, step: int) -> None:
    """An event file (TFRecords of Event protos) cut back to the events of steps up to
    `step`, or removed when no summary is left. A record cut short by a kill ends it."""
    data = files.read_bytes(path)
    kept, points, offset, dropped = [], False, 0, False
    # A record: its length (8 bytes), the length's CRC (4), the Event, the Event's CRC (4).
    while offset + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        end = offset + 12 + length + 4
        if end > len(data):
            break
        try:
            event = event_pb2.Event.FromString(data[offset + 12 : end - 4])
        except DecodeError:
            break
        if event.step <= step:
            kept.append(data[offset:end])
            points = points or event.HasField("summary")
        else:
            dropped = True
        offset = end
    if not points:
        tf.io.gfile.remove(path)
    elif dropped or offset < len(data):
        files.atomic_write(path, b"".join(kept))


class TrainWindow:
    """The steps since the last train line: their metric sums, the text tokens this host
    read (padding not counted), the time they took and the part of it spent waiting for
    input."""

    def __init__(self, step: int, clock=time.perf_counter):
        self.step, self.clock, self.start = step, clock, clock()
        self.sums = None
        self.tokens = 0
        self.flops = 0.0
        self.input_wait = 0.0

    def waited(self, seconds: float) -> None:
        self.input_wait += seconds

    def add(self, sums, tokens: int, flops: float = 0.0) -> None:
        """A step's metric sums, text tokens and model FLOPs (all hosts')."""
        self.sums = sums if self.sums is None else jax.tree.map(jnp.add, self.sums, sums)
        self.tokens += tokens
        self.flops += flops

    @contextlib.contextmanager
    def paused(self):
        """Leaves the time spent in the block (an evaluation) out of the window's rates."""
        started = self.clock()
        try:
            yield
        finally:
            self.start += self.clock() - started

    def rates(self, step: int, *, peak_flops: float | None, hosts: int):
        """steps/s, tokens/s of all `hosts` (each reads as many as this one, give or take
        its padding), model FLOP/s, with a peak MFU, and the input wait per step and as a
        fraction, from the window's start to now."""
        elapsed = max(self.clock() - self.start, 1e-9)
        steps = max(step - self.step, 1)
        steps_per_second = (step - self.step) / elapsed
        rates = {
            "steps_per_second": steps_per_second,
            "tokens_per_second": self.tokens * hosts / elapsed,
            "model_flops_per_second": self.flops / elapsed,
            "input_wait_seconds": self.input_wait / steps,
            "input_wait_fraction": min(self.input_wait / elapsed, 1.0),
        }
        if peak_flops:
            rates["mfu"] = rates["model_flops_per_second"] / peak_flops
        return rates


def real_tokens(host_batch: dict) -> int:
    """The tokens of a batch that are text, not padding (packed or not: input_mask > 0; the
    retrieval task's queries and passages: query_mask and passage_mask)."""
    masks = [name for name in ("input_mask", "query_mask", "passage_mask") if name in host_batch]
    if masks:
        return sum(int(np.count_nonzero(host_batch[name])) for name in masks)
    return int(host_batch["input_ids"].size)


def train_line(step: int, num_steps: int, summary: dict, console) -> str:
    """The console's line for a train summary: loss, the task's `console` metrics
    ((name, label) pairs), learning rate, rates, MFU when known, and the time left."""
    shown = "  ".join(f"{label} {summary[name]:.3f}" for name, label in console)
    mfu = f"  mfu {summary['mfu']:.1%}" if "mfu" in summary else ""
    eta = (num_steps - step) / max(summary["steps_per_second"], 1e-9)
    return (
        f"step {step:>6}/{num_steps}  loss {summary['loss']:.4f}  {shown}  "
        f"lr {summary['learning_rate']:.2e}  {summary['steps_per_second']:.2f} steps/s  "
        f"{summary['tokens_per_second']:,.0f} tokens/s{mfu}  "
        f"eta {format_duration(eta)}"
    )
