"""Throughput of the host pipeline on the built-in corpus: python -m data_pipeline.benchmark's work
(its usage says what is measured).
"""

import contextlib
import os
import tempfile
import time

import numpy as np
import tensorflow as tf
from absl import app

from data_pipeline import builtin_corpus, offline_writer, pretraining_input
from data_pipeline import config as config_lib
from data_pipeline.sentences import split_sentences
from data_pipeline.vocab_learning import resolve_vocab_file

ORIGINAL_INSTANCES_PER_SECOND_PER_CORE = 600


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
    """Prints the time to parse the built-in corpus and split_sentences' MB/s."""
    start = time.perf_counter()
    docs = builtin_corpus.parse_documents()  # not the cached file: the parsing is timed
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


def main(args):
    cores = [int(n) for n in args.cores]
    available = len(os.sched_getaffinity(0))
    if min(cores) < 1 or max(cores) > available:
        raise app.UsageError(
            f"--cores={','.join(args.cores)}: this process may run on {available} CPUs"
        )
    base = config_lib.from_config(config_lib.default_config()).replace(tokenizer=args.tokenizer)
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
                    batch_size=args.batch_size,
                    seconds=args.seconds,
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
        need = args.need_batch / (args.need_step_ms / 1000)
        supply = per_core_128 * args.host_cpus
        print(
            f"to supply {args.need_batch} sequences of 128 every {args.need_step_ms:g} ms: "
            f"{need:,.0f} sequences/s; at {per_core_128:,.0f} per core-second, "
            f"{need / per_core_128:.1f} cores; {args.host_cpus} CPUs give {supply:,.0f} "
            f"({supply / need:.1f}x what is needed)"
        )
    if args.skip_offline:
        return
    with tempfile.TemporaryDirectory() as output_dir:
        result = offline_writer.write_pretraining_data(
            base, output_dir, num_workers=args.num_workers, seed=0
        )
    per_second = result["instances"] / result["seconds"]
    reference = ORIGINAL_INSTANCES_PER_SECOND_PER_CORE
    print(
        f"offline length 128: {per_second:9,.0f} instances/s with {args.num_workers} workers "
        f"({result['instances']:,} instances, dupe_factor {base.dupe_factor}, "
        f"{result['seconds']:.1f}s); {per_second / reference:.1f}x the original's "
        f"{reference} instances/s"
    )
