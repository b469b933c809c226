"""Throughput of the host pipeline on the built-in corpus.

    python -m data_pipeline.benchmark [--seconds 20] [--batch_size 256] [--skip_offline]

Prints sequences/s and tokens/s of the online pipeline at lengths 128 and 512,
and instances/s of the offline writer against the original single-process
create_pretraining_data.py (about 600 instances/s per core on this machine).
"""

import os
import tempfile
import time

from absl import app, flags, logging

from data_pipeline import config as config_lib
from data_pipeline import create_pretraining_data, pretraining
from data_pipeline.build_vocab import resolve_vocab_file
from experiments.pretrain import tiny_cpu

_SECONDS = flags.DEFINE_float("seconds", 20.0, "Measured time per online setting.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 256, "Sequences per batch.")
_WORKERS = flags.DEFINE_integer("num_workers", os.cpu_count() or 1, "Offline writer processes.")
_SKIP_OFFLINE = flags.DEFINE_bool("skip_offline", False, "Only measure the online pipeline.")

ORIGINAL_INSTANCES_PER_SECOND_PER_CORE = 600


def online(data, *, batch_size, seconds, warmup_batches=20):
    dataset = pretraining.make_pretraining_dataset(
        data, split="train", batch_size=batch_size, seed=0
    )
    batches = dataset.as_numpy_iterator()
    # The first batches pay for filling the document and shuffle buffers.
    for _ in range(warmup_batches):
        next(batches)
    sequences = tokens = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        batch = next(batches)
        sequences += batch["input_mask"].shape[0]
        tokens += int(batch["input_mask"].sum())
    elapsed = time.perf_counter() - start
    return sequences / elapsed, tokens / elapsed


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)
    base = config_lib.from_config(tiny_cpu.get_data_config())
    resolve_vocab_file(base)  # learn and cache the vocab before timing anything
    print(f"cpu cores: {os.cpu_count()}")
    for length, predictions in ((128, 20), (512, 80)):
        data = base.replace(max_seq_length=length, max_predictions_per_seq=predictions)
        per_second, tokens = online(data, batch_size=_BATCH_SIZE.value, seconds=_SECONDS.value)
        print(
            f"online  length {length:3d}: {per_second:9,.0f} sequences/s  {tokens:11,.0f} tokens/s"
        )
    if _SKIP_OFFLINE.value:
        return
    with tempfile.TemporaryDirectory() as output_dir:
        result = create_pretraining_data.write_pretraining_data(
            base, output_dir, num_workers=_WORKERS.value, seed=0
        )
    per_second = result["instances"] / result["seconds"]
    reference = ORIGINAL_INSTANCES_PER_SECOND_PER_CORE
    print(
        f"offline length 128: {per_second:9,.0f} instances/s with {_WORKERS.value} workers "
        f"({result['instances']:,} instances, dupe_factor {base.dupe_factor}, "
        f"{result['seconds']:.1f}s); {per_second / reference:.1f}x the original's "
        f"{reference} instances/s"
    )


def run():
    app.run(main)


if __name__ == "__main__":
    run()
