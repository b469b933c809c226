"""bertjax.metrics: the throughput window, the console's train line and the metric writer."""

import json

import jax.numpy as jnp
import numpy as np
import tensorflow as tf

from bertjax import metrics


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_window_adds_sums_and_tokens_and_gives_rates():
    clock = FakeClock()
    window = metrics.TrainWindow(10, clock=clock)
    assert window.sums is None
    window.add({"loss_sum": jnp.float32(2.0)}, tokens=300, flops=0.5e9)
    window.add({"loss_sum": jnp.float32(4.0)}, tokens=200, flops=1.5e9)
    window.waited(0.25)
    window.waited(0.25)
    clock.now += 2.0  # two steps in two seconds, half a second of it waiting for input
    rates = window.rates(12, peak_flops=4e9, hosts=2)
    assert float(window.sums["loss_sum"]) == 6.0
    assert rates == {
        "steps_per_second": 1.0,
        "tokens_per_second": 500.0,  # 250 a second on this host, as many on the other
        "model_flops_per_second": 1e9,
        "mfu": 0.25,
        "input_wait_seconds": 0.25,
        "input_wait_fraction": 0.25,
    }


def test_time_in_a_paused_block_is_left_out_of_the_rates():
    clock = FakeClock()
    window = metrics.TrainWindow(0, clock=clock)
    clock.now += 1.0  # a step
    with window.paused():
        clock.now += 30.0  # an evaluation
    clock.now += 1.0  # another step
    rates = window.rates(2, peak_flops=None, hosts=1)
    assert rates["steps_per_second"] == 1.0


def test_window_without_a_peak_reports_no_mfu():
    clock = FakeClock()
    window = metrics.TrainWindow(0, clock=clock)
    window.add({"loss_sum": jnp.float32(1.0)}, tokens=1, flops=8.0)
    clock.now += 4.0
    rates = window.rates(1, peak_flops=None, hosts=1)
    assert "mfu" not in rates and rates["model_flops_per_second"] == 2.0


def test_real_tokens_counts_text_not_padding():
    mask = np.array([[1, 1, 0], [1, 2, 2]], np.int32)  # a padded row; a packed one
    assert metrics.real_tokens({"input_ids": np.ones((2, 3)), "input_mask": mask}) == 5
    assert metrics.real_tokens({"input_ids": np.ones((2, 3))}) == 6


def test_train_line():
    summary = {
        "loss": 2.5,
        "mlm_accuracy": 0.25,
        "learning_rate": 1e-4,
        "steps_per_second": 2.0,
        "tokens_per_second": 12345.6,
        "mfu": 0.123,
    }
    line = metrics.train_line(10, 130, summary, (("mlm_accuracy", "mlm_acc"),))
    assert line == (
        "step     10/130  loss 2.5000  mlm_acc 0.250  lr 1.00e-04  2.00 steps/s  "
        "12,346 tokens/s  mfu 12.3%  eta 1:00"
    )
    del summary["mfu"]
    assert "mfu" not in metrics.train_line(10, 130, summary, ())


def test_writer_appends_json_lines(tmp_path):
    writer = metrics.MetricWriter(str(tmp_path), num_train_steps=2, start_step=0)
    writer.write(1, "train", {"loss": 1.5, "mfu": 0.1})
    writer.write(2, "eval", {"loss": 1.25, "kind": "text"})
    writer.close()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines == [
        {"step": 1, "split": "train", "loss": 1.5, "mfu": 0.1},
        {"step": 2, "split": "eval", "loss": 1.25, "kind": "text"},
    ]
    assert any((tmp_path / "tensorboard").iterdir())


def history(workdir) -> tuple[list, list]:
    """(step, loss) of metrics.jsonl's records and of TensorBoard's train/loss points."""
    with open(workdir / "metrics.jsonl", encoding="utf-8") as f:
        lines = [(record["step"], record["loss"]) for record in map(json.loads, f)]
    points = [
        (event.step, float(tf.make_ndarray(value.tensor)))
        for path in (workdir / "tensorboard").iterdir()
        for event in tf.compat.v1.train.summary_iterator(str(path))
        for value in event.summary.value
        if value.tag == "train/loss"
    ]
    return lines, sorted(points)


def test_a_resumed_writer_cuts_the_history_back_to_its_checkpoint(tmp_path):
    killed = metrics.MetricWriter(str(tmp_path), num_train_steps=6, start_step=0)
    for step in range(1, 6):
        killed.write(step, "train", {"loss": 1.0})
    killed.close()
    (events,) = (tmp_path / "tensorboard").iterdir()
    with open(events, "ab") as f:  # a record a kill cut short
        f.write(b"\x40\x00\x00\x00\x00\x00\x00\x00\x00\x00")
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 6, "split": "tr')

    resumed = metrics.MetricWriter(str(tmp_path), num_train_steps=6, start_step=3)
    for step in range(4, 7):
        resumed.write(step, "train", {"loss": 0.5})
    resumed.close()
    expected = [(1, 1.0), (2, 1.0), (3, 1.0), (4, 0.5), (5, 0.5), (6, 0.5)]
    assert history(tmp_path) == (expected, expected)
    assert not [p for p in (tmp_path / "tensorboard").iterdir() if p.name.startswith(".")]

    # Started again without a checkpoint: both histories start empty.
    metrics.MetricWriter(str(tmp_path), num_train_steps=6, start_step=0).close()
    assert history(tmp_path) == ([], [])
