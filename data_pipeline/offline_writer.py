"""Writes pretraining instances to sharded TFRecords ahead of training: python -m
data_pipeline.create_pretraining_data's work (its usage says what is written).

Every 30 s on stderr (progress.py): each process, the documents read and instances
written of its corpus shard; this one, the shards done of all, with the time left.
"""

import collections
import concurrent.futures
import dataclasses
import functools
import json
import multiprocessing
import os
import queue
import random
import time
import traceback
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import tensorflow as tf
from absl import logging

from data_pipeline import config as config_lib
from data_pipeline import corpus, files, instances, masking, progress, schema, tfrecords
from data_pipeline import vocab as vocab_lib
from data_pipeline.errors import UserError
from data_pipeline.pretraining_input import masking_spec
from data_pipeline.tokenizer import make_tokenizer
from data_pipeline.vocab_learning import resolve_vocab_file
from data_pipeline.workers import split_documents

# Sentences tokenized per graph call, and calls queued ahead of the consumer.
_SENTENCES_PER_CALL = 2048
_BATCHES_AHEAD = 2
# Instances packed, masked and encoded together, and shuffled before writing
# (the original shuffles all of its instances; a stream can only shuffle blocks).
_WRITE_BLOCK = 4096
# Whether this process takes shards too (tests turn it off to exercise the helpers).
_THIS_PROCESS_WRITES = True


class WriterError(UserError):
    """The output folder cannot be used; the message says why."""


@dataclasses.dataclass(frozen=True)
class _Task:
    split: str
    worker: int
    num_workers: int
    num_shards: int
    seed: int

    def shard_name(self, shard: int) -> str:
        return f"{self.split}-{self.worker:03d}-{shard:03d}.tfrecord"


def write_pretraining_data(
    data_config: Any,
    output_dir: str,
    *,
    num_workers: int = 1,
    num_shards_per_worker: int = 1,
    seed: int = 0,
    overwrite: bool = False,
) -> dict:
    """Writes the train and eval splits to `output_dir`; returns counts and timing.

    The result has `instances` and `documents` (both splits), `seconds` (wall
    time of this call, startup included) and `splits` (each split's metadata).
    Every check (options, corpus, vocabulary, output folder, at least two
    documents per shard) runs before anything is written.
    """
    start = time.perf_counter()
    config = config_lib.from_config(data_config)
    _check_options(config, num_workers, num_shards_per_worker)
    corpus.check_sources(config)
    vocab_file = resolve_vocab_file(config)
    vocab_lib.load_vocab(vocab_file)
    splits = tfrecords.SPLITS if config.eval_fraction > 0 else tfrecords.SPLITS[:1]
    _check_worker_shards(config, splits, num_workers)
    _prepare_output_dir(output_dir, splits, overwrite)

    tasks = [
        _Task(split, worker, num_workers, num_shards_per_worker, _split_seed(config, split, seed))
        for split in splits
        for worker in range(num_workers)
    ]
    results = _write_tasks(tasks, config, vocab_file, output_dir, num_helpers=num_workers - 1)

    summary = {"output_dir": output_dir, "instances": 0, "documents": 0, "splits": {}}
    for split in splits:
        parts = [r for r in results if r["split"] == split]
        task = next(t for t in tasks if t.split == split)
        metadata = _split_metadata(parts, config, task, output_dir, vocab_file)
        files.atomic_write(
            os.path.join(output_dir, f"{split}-metadata.json"), json.dumps(metadata, indent=2)
        )
        if overwrite:
            _remove_stale_shards(output_dir, split, set(metadata["instances_per_shard"]))
        summary["splits"][split] = metadata
        summary["instances"] += metadata["instances"]
        summary["documents"] += metadata["documents"]
    summary["seconds"] = time.perf_counter() - start
    return summary


def _check_options(
    config: config_lib.DataConfig, num_workers: int, num_shards_per_worker: int
) -> None:
    if config.source == "tfrecord":
        raise config_lib.ConfigError(
            "config.data.source='tfrecord' holds finished instances; the writer needs "
            "documents ('builtin', 'text' or 'tfds')"
        )
    if num_workers < 1:
        raise config_lib.ConfigError(f"--num_workers={num_workers}: must be at least 1")
    if num_shards_per_worker < 1:
        raise config_lib.ConfigError(
            f"--num_shards_per_worker={num_shards_per_worker}: must be at least 1"
        )
    config_lib.check_predictions_fit(config)


def _check_worker_shards(
    config: config_lib.DataConfig, splits: Iterable[str], num_workers: int
) -> None:
    """Every corpus shard of every split has at least two documents to pair."""
    for split in splits:
        for worker in range(num_workers):
            corpus.check_two_documents(
                config,
                split=split,
                process_index=worker,
                process_count=num_workers,
                shard="worker",
                hints=["use fewer --num_workers"] if num_workers > 1 else [],
            )


def _write_tasks(
    tasks: list[_Task],
    config: config_lib.DataConfig,
    vocab_file: str,
    output_dir: str,
    *,
    num_helpers: int,
) -> list[dict]:
    """Copies the vocabulary next to the data and writes every task's shards, this
    process and `num_helpers` spawned ones sharing them; returns each task's counts."""
    try:
        with _Helpers(num_helpers) as helpers:
            files.atomic_copy(vocab_file, os.path.join(output_dir, os.path.basename(vocab_file)))
            return helpers.run(tasks, config, vocab_file, output_dir)
    except BaseException:
        # A stopped helper leaves its unfinished files behind; finished shards stay,
        # but without their metadata, so the run reads as incomplete.
        for path in tf.io.gfile.glob(os.path.join(output_dir, ".*.tmp-*")):
            tf.io.gfile.remove(path)
        raise


def _split_metadata(
    parts: list[dict], config: config_lib.DataConfig, task: _Task, output_dir: str, vocab_file: str
) -> dict:
    """`{split}-metadata.json`: the counts of the split's shards (`parts`) and the settings
    (those of `task`, one of the split's)."""
    split = task.split
    stats = corpus.CorpusStats()
    for part in parts:
        stats.merge(corpus.CorpusStats(**part["corpus"]))
    shards = {name: n for part in parts for name, n in part["shards"].items()}
    return {
        "split": split,
        "instances": sum(p["instances"] for p in parts),
        "documents": sum(p["documents"] for p in parts),
        "instances_per_shard": dict(sorted(shards.items())),
        "files": os.path.join(output_dir, f"{split}-*.tfrecord"),
        "passes_per_document": _passes(config, split),
        "seed": task.seed,
        "num_workers": task.num_workers,
        "num_shards_per_worker": task.num_shards,
        "vocab_file": os.path.basename(vocab_file),
        "source_vocab_file": vocab_file,
        "corpus": stats.as_dict(),
        "config": dataclasses.asdict(config),
    }


def _split_seed(config: config_lib.DataConfig, split: str, seed: int) -> int:
    return config.eval_seed if split == "eval" else seed


def _passes(config: config_lib.DataConfig, split: str) -> int:
    return config.dupe_factor if split == "train" else 1


# --------------------------------------------------------------------------- one shard


@functools.cache
def _tokenizer(config: config_lib.DataConfig, vocab_file: str):
    """One tokenizer per process and config: building the lookup tables takes a while."""
    return make_tokenizer(config, vocab_file)


def _write_task(
    task: _Task, config: config_lib.DataConfig, vocab_file: str, output_dir: str
) -> dict:
    """Writes shard `task.worker` of `task.split`; returns its counts."""
    start = time.perf_counter()
    tokenizer = _tokenizer(config, vocab_file)
    vocab = tokenizer.vocab
    spec = masking_spec(config, vocab, task.split)
    seeds = np.random.SeedSequence(
        [task.seed, tfrecords.SPLITS.index(task.split), task.worker, task.num_workers]
    )
    pair_seed, mask_seed, order_seed = (int(s) for s in seeds.generate_state(3))
    stats = corpus.CorpusStats()
    documents = corpus.iter_documents(
        config,
        split=task.split,
        process_index=task.worker,
        process_count=task.num_workers,
        shuffle_seed=order_seed if task.split == "train" else None,
        stats=stats,
    )
    passes = instances.instances_from_stream(
        tokenize_documents(documents, tokenizer),
        max_seq_length=config.max_seq_length,
        short_seq_prob=config.short_seq_prob,
        random_next_prob=config.random_next_prob,
        buffer_size=config.document_buffer_size,
        rng=random.Random(pair_seed),
        passes_per_document=_passes(config, task.split),
        next_sentence=config.next_sentence_prediction,
    )
    names = [task.shard_name(k) for k in range(task.num_shards)]
    temporary = [files.temporary_name(os.path.join(output_dir, name)) for name in names]
    writers = [tf.io.TFRecordWriter(path) for path in temporary]
    rng = np.random.default_rng(mask_seed)
    written = 0
    shard = f"{task.split} corpus shard {task.worker + 1} of {task.num_workers}"
    reading = progress.Progress(f"writing the {shard}", unit="documents read")
    try:
        for block in _blocks(passes, _WRITE_BLOCK):
            for record in encode_instances(block, config, vocab, spec, rng):
                writers[written % task.num_shards].write(record)
                written += 1
            if reading.due():
                reading.done = stats.documents_read - stats.documents_in_other_split
                reading.report(note=f"{written:,} instances written")
        for writer in writers:
            writer.close()
        for path, name in zip(temporary, names, strict=True):
            tf.io.gfile.rename(path, os.path.join(output_dir, name), overwrite=True)
    finally:
        for writer in writers:
            writer.close()
        for path in temporary:
            if tf.io.gfile.exists(path):
                tf.io.gfile.remove(path)
    num_documents = stats.documents_read - stats.documents_in_other_split
    logging.info(
        "Wrote %d %s instances from %d documents (shard %d of %d) in %.1f s, process %d.",
        written,
        task.split,
        num_documents,
        task.worker,
        task.num_workers,
        time.perf_counter() - start,
        os.getpid(),
    )
    return {
        "split": task.split,
        "worker": task.worker,
        "instances": written,
        "documents": num_documents,
        # Records are dealt round-robin: shard k holds records k, k + num_shards, ...
        "shards": {name: len(range(k, written, task.num_shards)) for k, name in enumerate(names)},
        "corpus": stats.as_dict(),
    }


def encode_instances(
    block: list[instances.Instance],
    config: config_lib.DataConfig,
    vocab: vocab_lib.Vocab,
    spec: masking.MaskingSpec,
    rng: np.random.Generator,
) -> list[bytes]:
    """Packs, masks (one draw per instance) and serializes a block, in a shuffled order."""
    packed = instances.pack_instances(
        block, max_seq_length=config.max_seq_length, cls_id=vocab.cls_id, sep_id=vocab.sep_id
    )
    laid = {**packed, **masking.mask_batch(packed["input_ids"], packed["input_mask"], spec, rng)}
    order = rng.permutation(len(block))
    names = schema.features(packed=False, next_sentence=config.next_sentence_prediction)
    features = {name: laid[name][order] for name in names}
    return tfrecords.encode_examples(features)


def tokenize_documents(
    documents: Iterable[corpus.Document], tokenizer
) -> Iterator[tuple[str, list[list[int]]]]:
    """(doc_id, sentences as token ids); sentences that tokenize to nothing go.

    Sentences are tokenized in graph, `_SENTENCES_PER_CALL` at a time, by a
    tf.function traced once per process, on a thread that runs a few batches
    ahead of the caller (TensorFlow releases the GIL while its ops run).
    """
    tokenize = _graph_tokenizer(tokenizer)
    pending = collections.deque()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        for ids, sentences, counts in _document_batches(documents):
            pending.append((ids, counts, pool.submit(tokenize, sentences)))
            if len(pending) > _BATCHES_AHEAD:
                ids, counts, future = pending.popleft()
                yield from split_documents(ids, counts, *future.result())
        for ids, counts, future in pending:
            yield from split_documents(ids, counts, *future.result())


@functools.cache
def _graph_tokenizer(tokenizer):
    """tf.string [N] -> (int32 token ids of all sentences, int32 [N] tokens per sentence)."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize(sentences):
        tokens = tokenizer.tokenize(sentences)
        return tokens.flat_values, tf.cast(tokens.row_lengths(), tf.int32)

    return lambda sentences: tuple(t.numpy() for t in tokenize(tf.constant(sentences)))


def _document_batches(documents: Iterable[corpus.Document]):
    ids, sentences, counts = [], [], []
    for document in documents:
        ids.append(document.doc_id)
        sentences.extend(document.sentences)
        counts.append(len(document.sentences))
        if len(sentences) >= _SENTENCES_PER_CALL:
            yield ids, sentences, counts
            ids, sentences, counts = [], [], []
    if ids:
        yield ids, sentences, counts


def _blocks(passes: Iterable[list[instances.Instance]], size: int) -> Iterator[list]:
    block = []
    for batch in passes:
        block.extend(batch)
        if len(block) >= size:
            yield block
            block = []
    if block:
        yield block


# --------------------------------------------------------------------------- processes


class _Helpers:
    """`count` spawned processes that take shards in turn with this process.

    Shards are handed out by a shared counter: whoever is free takes the next.
    A helper imports TensorFlow (seconds), receives the run's setup, pays its
    one-time costs (tokenizer tables and trace, corpus indexes), and only then
    takes a shard, so a helper that is ready late never holds up the end.
    """

    def __init__(self, count: int):
        context = multiprocessing.get_context("spawn")
        self._next = context.Value("i", 0)
        self._done = context.Queue()
        self._setups = [context.Queue() for _ in range(count)]
        self._processes = [
            context.Process(
                target=_helper_main,
                args=(setup, self._next, self._done),
                name=f"create_pretraining_data-{n + 1}",
                daemon=True,
            )
            for n, setup in enumerate(self._setups)
        ]

    def __enter__(self) -> "_Helpers":
        for process in self._processes:
            process.start()
        return self

    def __exit__(self, *exc_info) -> None:
        # Every result is in (or the run failed): a helper still alive is idle or
        # still importing TensorFlow, and has nothing left to do.
        with self._next.get_lock():
            self._next.value = 1 << 30
        for setup in self._setups:
            # A setup a stopped helper never read must not hold up this process's exit.
            setup.cancel_join_thread()
        for process in self._processes:
            if process.is_alive():
                process.terminate()
            process.join()

    def run(self, tasks: list[_Task], config, vocab_file: str, output_dir: str) -> list[dict]:
        """Every task's result, in task order."""
        for n, setup in enumerate(self._setups):
            setup.put((tasks, config, vocab_file, output_dir, tasks[(n + 1) % len(tasks)]))
        results: dict[int, dict] = {}
        running: dict[int, _Task] = {}  # helper pid -> its task
        # The train split's shards: the eval split's take a small share of the time.
        train = [i for i, task in enumerate(tasks) if task.split == "train"]
        shards = progress.Progress("writing the train split", len(train), unit="corpus shards")
        while _THIS_PROCESS_WRITES or not self._processes:
            while self._collect(results, running, block=False):
                pass
            index = _take(self._next)
            if index >= len(tasks):
                break
            results[index] = _write_task(tasks[index], config, vocab_file, output_dir)
            shards.update(sum(i in results for i in train))
        while len(results) < len(tasks):
            shards.update(sum(i in results for i in train))
            if self._collect(results, running, block=True):
                continue
            for process in self._processes:
                if process.exitcode not in (None, 0) and process.pid in running:
                    task = running[process.pid]
                    raise RuntimeError(
                        f"worker process {process.pid} died (exit code {process.exitcode}) "
                        f"writing shard {task.worker} of the {task.split} split"
                    )
            if all(p.exitcode is not None for p in self._processes) and self._done.empty():
                raise RuntimeError("worker processes exited before finishing their shards")
        return [results[i] for i in range(len(tasks))]

    def _collect(self, results: dict, running: dict, *, block: bool) -> bool:
        """Handles one message from the helpers; False when none came."""
        if not self._processes:
            return False
        try:
            message = self._done.get(timeout=1.0) if block else self._done.get_nowait()
        except queue.Empty:
            return False
        kind, pid, index, payload = message
        if kind == "started":
            running[pid] = payload
        elif kind == "done":
            running.pop(pid, None)
            results[index] = payload
        else:  # "error": payload = (the UserError or None, type name, message, traceback)
            error, name, text, trace = payload
            if error is not None:
                raise error
            raise RuntimeError(f"worker process {pid} failed: {name}: {text}\n{trace}")
        return True


def _take(counter) -> int:
    """The index of the next shard to write (past the end when none is left)."""
    with counter.get_lock():
        index = counter.value
        counter.value += 1
    return index


def _helper_main(setup, counter, done) -> None:
    """A spawned process: after its setup, writes shards until none is left."""
    received = setup.get()
    if received is None:
        return
    tasks, config, vocab_file, output_dir, warm_up = received
    pid = os.getpid()
    try:
        _graph_tokenizer(_tokenizer(config, vocab_file))(["warm up"])
        documents = corpus.iter_documents(
            config,
            split=warm_up.split,
            process_index=warm_up.worker,
            process_count=warm_up.num_workers,
        )
        next(iter(documents), None)
    except Exception:  # the same error shows again, reported, in the first shard
        pass
    while (index := _take(counter)) < len(tasks):
        task = tasks[index]
        done.put(("started", pid, index, task))
        try:
            result = _write_task(task, config, vocab_file, output_dir)
        except Exception as e:
            # Bad input is raised again as itself by the parent; anything else as a bug.
            error = e if isinstance(e, UserError) else None
            trace = traceback.format_exc()
            done.put(("error", pid, index, (error, type(e).__name__, str(e), trace)))
            return
        done.put(("done", pid, index, result))


def _prepare_output_dir(output_dir: str, splits: Iterable[str], overwrite: bool) -> None:
    try:
        if tf.io.gfile.exists(output_dir) and not tf.io.gfile.isdir(output_dir):
            raise WriterError(f"--output_dir={output_dir}: exists and is not a folder")
        tf.io.gfile.makedirs(output_dir)
    except tf.errors.OpError as e:
        raise WriterError(f"--output_dir={output_dir}: cannot create it: {e.message}") from e
    if overwrite:
        return
    for split in splits:
        existing = sorted(
            tf.io.gfile.glob(os.path.join(output_dir, f"{split}-*.tfrecord"))
            + tf.io.gfile.glob(os.path.join(output_dir, f"{split}-metadata.json"))
        )
        if existing:
            raise WriterError(
                f"--output_dir={output_dir} already holds {split} data ({existing[0]}); "
                "pass --overwrite to replace it"
            )


def _remove_stale_shards(output_dir: str, split: str, keep: set[str]) -> None:
    """After an --overwrite run: shards of an earlier run with more workers or shards go."""
    for path in tf.io.gfile.glob(os.path.join(output_dir, f"{split}-*-*.tfrecord")):
        if os.path.basename(path) not in keep:
            tf.io.gfile.remove(path)


def main(args) -> None:
    result = write_pretraining_data(
        args.config.data,
        args.output_dir,
        num_workers=args.num_workers,
        num_shards_per_worker=args.num_shards_per_worker,
        seed=args.config.seed,
        overwrite=args.overwrite,
    )
    for split, metadata in result["splits"].items():
        print(
            f"{split}: {metadata['instances']:,} instances from {metadata['documents']:,} "
            f"documents in {len(metadata['instances_per_shard'])} files {metadata['files']}"
        )
    print(
        f"{result['instances']:,} instances in {result['seconds']:.1f} s "
        f"({result['instances'] / max(result['seconds'], 1e-9):,.0f}/s); "
        f"vocabulary: {os.path.join(result['output_dir'], result['splits']['train']['vocab_file'])}"
    )
