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

import contextlib
import os
import tempfile
import time

import numpy as np
from absl import app, flags

from data_pipeline import builtin_corpus, cli, create_pretraining_data
from data_pipeline import config as config_lib
from data_pipeline.build_vocab import resolve_vocab_file
from data_pipeline.sentences import split_sentences

FLAGS = flags.FLAGS
ORIGINAL_INSTANCES_PER_SECOND_PER_CORE = 600


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


def online(data, *, batch_size, seconds, cores=None, warmup_batches=20):
    """(sequences/s, tokens/s, cores busy) of the training stream of `data`, on the first
    `cores` CPUs, or on every CPU."""
    everywhere = os.sched_getaffinity(0)
    if cores:
        _hold_to(set(sorted(everywhere)[:cores]))
    try:
        return _measure(data, batch_size, seconds, cores, warmup_batches)
    finally:
        _hold_to(everywhere)


def _measure(data, batch_size, seconds, cores, warmup_batches):
    # Imported here, not at the top: TensorFlow takes seconds, which `--help` and a bad
    # flag should not wait for.
    import tensorflow as tf

    from data_pipeline import pretraining_input

    dataset = pretraining_input.make_pretraining_dataset(
        data, split="train", batch_size=batch_size, seed=0
    )
    if cores:
        options = tf.data.Options()
        if not data.num_workers:  # with workers the pipeline sizes its own pool
            options.threading.private_threadpool_size = cores
        options.threading.max_intra_op_parallelism = 1
        dataset = dataset.with_options(options)
    batches = dataset.as_numpy_iterator()
    # The first batches pay for filling the document and shuffle buffers.
    for _ in range(warmup_batches):
        next(batches)
    sequences = tokens = 0
    start, cpu_start = time.perf_counter(), _cpu_seconds()
    while time.perf_counter() - start < seconds:
        batch = next(batches)
        # A packed row (pack_examples) holds several sequences; input_mask numbers them
        # (an unpacked row's one sequence is 1 on its tokens).
        sequences += int(np.asarray(batch["input_mask"]).max(axis=1).sum())
        tokens += int(np.count_nonzero(batch["input_mask"]))
    elapsed = time.perf_counter() - start
    # Cores kept busy: tf.data's threads, this loop, which reads the batches, and workers.
    busy = (_cpu_seconds() - cpu_start) / elapsed
    return sequences / elapsed, tokens / elapsed, busy


def _hold_to(cpus: set[int]) -> None:
    """This process and its children (pipeline workers), every thread, on `cpus`; threads and
    processes started later inherit it."""
    for pid in (os.getpid(), *_children()):
        with contextlib.suppress(OSError):  # a process that has just ended
            for thread in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(ProcessLookupError):  # a thread that has just ended
                    os.sched_setaffinity(int(thread), cpus)


def _cpu_seconds() -> float:
    """CPU time of this process and of the children it has now (the pipeline's workers)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = time.process_time()
    for fields in _children().values():
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


def _children() -> dict[int, list[str]]:
    """pid -> the fields of /proc/pid/stat after the name (state, ppid, ...) of each child."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:  # a process that has just ended
            continue
        if int(fields[1]) == os.getpid():
            children[int(entry)] = fields
    return children


def corpus_and_sentences():
    """Prints the time to build the built-in corpus and split_sentences' MB/s."""
    builtin_corpus.documents.cache_clear()
    start = time.perf_counter()
    docs = builtin_corpus.documents()
    seconds = time.perf_counter() - start
    sentences = sum(len(doc_sentences) for _, doc_sentences in docs)
    print(f"builtin corpus: {len(docs):,} documents, {sentences:,} sentences in {seconds:.1f}s")
    paragraph = (
        "The committee met on Jan. 5 to review the proposal. Dr. Lee presented version 2.1 "
        "of the plan, e.g. the budget and timeline. Members asked questions! Was it enough? "
        "The vote was postponed until the next meeting.\n\n"
    )
    text = paragraph * 2000  # about 0.5 MB, as tests/data_pipeline/sentences_test.py
    start = time.perf_counter()
    split_sentences(text)
    seconds = time.perf_counter() - start
    print(f"split_sentences: {len(text) / seconds / 1e6:.1f} MB/s ({len(text):,} characters)")


def main(argv):
    del argv  # cli.run refuses positional arguments
    cores = [int(n) for n in FLAGS.cores]
    available = len(os.sched_getaffinity(0))
    if min(cores) < 1 or max(cores) > available:
        raise app.UsageError(
            f"--cores={','.join(FLAGS.cores)}: this process may run on {available} CPUs"
        )
    base = config_lib.from_config(config_lib.default_config()).replace(tokenizer=FLAGS.tokenizer)
    resolve_vocab_file(base)  # learn and cache the vocab before timing anything
    print(f"cpu cores: {os.cpu_count()}, tokenizer: {base.tokenizer}")
    corpus_and_sentences()
    per_core_128 = None
    for length, predictions in ((128, 20), (512, 80)):
        data = base.replace(max_seq_length=length, max_predictions_per_seq=predictions)
        for way, workers in (("threads", False), ("workers", True)):
            first = None
            for n in cores:
                per_second, tokens, busy = online(
                    data.replace(num_workers=n if workers else 0),
                    batch_size=FLAGS.batch_size,
                    seconds=FLAGS.seconds,
                    cores=n,
                )
                first = first or per_second
                print(
                    f"online  length {length:3d}, {n} core(s), {way:7s}: "
                    f"{per_second:9,.0f} sequences/s  {tokens:11,.0f} tokens/s  "
                    f"{per_second / first:.2f}x the first  ({busy:.2f} cores busy, "
                    f"{per_second / busy:,.0f} sequences per core-second)"
                )
                if length == 128 and workers and n == max(cores):
                    per_core_128 = per_second / busy
    if per_core_128:
        need = FLAGS.need_batch / (FLAGS.need_step_ms / 1000)
        supply = per_core_128 * FLAGS.host_cpus
        print(
            f"to supply {FLAGS.need_batch} sequences of 128 every {FLAGS.need_step_ms:g} ms: "
            f"{need:,.0f} sequences/s; at {per_core_128:,.0f} per core-second, "
            f"{need / per_core_128:.1f} cores; {FLAGS.host_cpus} CPUs give {supply:,.0f} "
            f"({supply / need:.1f}x what is needed)"
        )
    if FLAGS.skip_offline:
        return
    with tempfile.TemporaryDirectory() as output_dir:
        result = create_pretraining_data.write_pretraining_data(
            base, output_dir, num_workers=FLAGS.num_workers, seed=0
        )
    per_second = result["instances"] / result["seconds"]
    reference = ORIGINAL_INSTANCES_PER_SECOND_PER_CORE
    print(
        f"offline length 128: {per_second:9,.0f} instances/s with {FLAGS.num_workers} workers "
        f"({result['instances']:,} instances, dupe_factor {base.dupe_factor}, "
        f"{result['seconds']:.1f}s); {per_second / reference:.1f}x the original's "
        f"{reference} instances/s"
    )


def run():
    cli.run(main, define_flags)


if __name__ == "__main__":
    run()
