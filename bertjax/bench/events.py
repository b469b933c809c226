r"""What the event log and the input-wait timing add to a train step.

    python -m bertjax.bench.events --config experiments/pretrain/tiny_cpu.py \
        [--steps 20] [--repeats 20000]

Times, with the training loop's own objects (metrics.TrainWindow, events.StepTimes
writing a real events.jsonl in a temporary directory), what the loop does per step
for them: two clock reads around the batch fetch and their sums, and the check
whether a `steps` event is due (the first step, or 10 s since the last); and what it does per logged step (config.log_every_steps): one `steps` event
written and flushed. It prints these beside the median time of the config's train
step (bertjax.bench.throughput's measurement, synthetic batches) and the added
share of step time at the config's log_every_steps and at 1 (a line every step).
"""

import os
import statistics
import tempfile
import time

from absl import flags
from ml_collections import config_flags

from bertjax import program

FLAGS = flags.FLAGS


def define_flags() -> None:
    config_flags.DEFINE_config_file("config", None, "Experiment config file.", lock_config=True)
    flags.DEFINE_integer("steps", 20, "Timed train steps, for the step time.")
    flags.DEFINE_integer("repeats", 20000, "Timed repeats of each instrumentation call.")
    flags.mark_flags_as_required(["config"])


def per_call_seconds(call, repeats: int) -> float:
    """The median over 5 rounds of `call`'s mean time in `repeats` calls."""
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for i in range(repeats):
            call(i)
        rounds.append((time.perf_counter() - started) / repeats)
    return statistics.median(rounds)


def instrumentation_seconds(workdir: str, repeats: int) -> dict:
    """Seconds per step and per logged step of what the loop does for the event log and
    the input wait."""
    from bertjax import events, metrics

    log = events.EventLog(workdir)
    log.start(0)
    window = metrics.TrainWindow(0)
    # A window never 10 s old here: what every step pays is the check.
    times = events.StepTimes(log, 0, peak_flops=1e12)

    def per_step(step):
        waiting = time.perf_counter()
        # (the loop's next(train_batches) is here)
        seconds = time.perf_counter() - waiting
        window.waited(seconds)
        times.waited(seconds)
        times.stepped(step, 1e9)

    def per_log_line(step):
        times.flush(step + 1)  # a steps event written and flushed

    result = {
        "per_step_s": per_call_seconds(per_step, repeats),
        "per_log_line_s": per_call_seconds(per_log_line, max(repeats // 20, 100)),
    }
    log.close()
    return result


def main(argv):
    del argv  # cli.run refuses positional arguments
    from bertjax.bench import throughput

    config = FLAGS.config
    with tempfile.TemporaryDirectory() as workdir:
        step = throughput.measure(config, workdir, FLAGS.steps)["step_time_s"]
        cost = instrumentation_seconds(os.path.join(workdir, "events"), FLAGS.repeats)
    print(
        f"train step (median)     {step * 1000:.1f} ms  ({config.model.preset or 'config'} model)"
    )
    print(f"per step                {cost['per_step_s'] * 1e6:.2f} us  (input wait, event due?)")
    print(
        f"per logged step         {cost['per_log_line_s'] * 1e6:.1f} us  (a steps event, flushed)"
    )
    for every in sorted({config.log_every_steps, 1}, reverse=True):
        added = cost["per_step_s"] + cost["per_log_line_s"] / every
        print(f"log_every_steps={every:<5}  +{added / step:.4%} of step time")


if __name__ == "__main__":
    program.run(main, define_flags)
