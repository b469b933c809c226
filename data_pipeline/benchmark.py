"""Throughput of the host pipeline on the built-in corpus.

    python -m data_pipeline.benchmark [--seconds 20] [--batch_size 256] [--cores 1,2]
        [--skip_offline] [--tokenizer wordpiece|sentencepiece|bpe]

Prints the time to build the built-in corpus and split_sentences' MB/s, then
sequences/s and tokens/s of the online pipeline at lengths 128 and 512 on each
number of cores in --cores, and instances/s of the offline writer against the
original single-process create_pretraining_data.py (about 600 instances/s per
core on this machine). Every figure uses a vocabulary of the default size learned
for --tokenizer (config.data.tokenizer) from the built-in corpus.

On n cores means the process, every thread of it and the processes it starts
are held to the machine's first n CPUs (Linux's sched_setaffinity), in two
ways: with the stream's Python steps in tf.data's threads
(config.data.num_workers = 0, a pool of n threads) and in n worker processes
(num_workers = n, data_pipeline/workers.py, with the pool the pipeline gives
itself then: a thread per core and one per worker). Each line gives the speedup over
the first core count of its way, the cores the process kept busy (its CPU
time, workers' included, over the wall time) and the sequences per core-second.

After the online figures (before the offline writer's), what a TPU host must
supply: the sequences/s of --need_batch every --need_step_ms (by default
BERT-Large phase 1 on a v5p-8, one host, at the roofline step time
`bertjax.tpu.aot` prints for it), against the measured rate per
core-second at length 128 (with workers on the most cores measured) times
--host_cpus (a v5p TPU VM's 208 vCPUs, from the Cloud TPU documentation's v5p
page), a linear extrapolation.
"""

import os

from absl import flags

from data_pipeline import cli
from data_pipeline import config as config_lib


def define_flags() -> None:
    flags.DEFINE_float("seconds", 20.0, "Measured time per online setting.")
    flags.DEFINE_integer("batch_size", 256, "Sequences per batch.")
    flags.DEFINE_integer("num_workers", os.cpu_count() or 1, "Offline writer processes.")
    flags.DEFINE_bool("skip_offline", False, "Only measure the online pipeline.")
    flags.DEFINE_enum(
        "tokenizer", "wordpiece", list(config_lib.TOKENIZERS), "config.data.tokenizer to measure."
    )
    flags.DEFINE_list("cores", ["1", "2"], "Core counts to measure the online pipeline on.")
    flags.DEFINE_integer("need_batch", 256, "Sequences per step of the run to supply.")
    flags.DEFINE_float("need_step_ms", 37.0, "Its step time (ms).")
    flags.DEFINE_integer("host_cpus", 208, "CPUs of the host that must supply it.")


def run() -> None:
    cli.run("data_pipeline.throughput:main", define_flags)


if __name__ == "__main__":
    run()
