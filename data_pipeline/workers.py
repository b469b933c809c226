"""Worker processes for the online pretraining stream's Python steps (`config.data.num_workers`).

Two steps of the online stream (pretraining_input.py) are Python: a chunk's sentence
pairs, laid out (and with `pack_examples` packed into rows) from its tokens,
and a batch's masks. Python holds the GIL, so in tf.data's threads these run
on one core at a time however many threads there are, while tokenizing and
batching (TensorFlow ops) spread over them.
With num_workers = N > 0 the two steps run in N processes of their own: the
tf.data thread that needs one sends its inputs to an idle worker and waits,
without the GIL, for the answer.

A step is a pure function of its inputs (a chunk's pairs come from a seed of
(seed, epoch, chunk), a batch's masks from (seed, batch index)), so where it
runs changes nothing: the batches, their stream positions and resuming are the
same for every num_workers.

A worker is `python -m data_pipeline.workers`: it imports NumPy and this
package's pure-Python modules, not TensorFlow, so it starts in well under a
second. The parent writes pickled requests to its stdin and reads pickled
answers from its stdout, one request at a time. A worker lives exactly as long
as its stdin is open: it ends when the pool is closed or its parent exits,
however that happens (kill -9 included), and ignores SIGINT and SIGTERM, which
its parent handles (a Ctrl-C reaches the whole process group). An exception in
a worker is raised again in the parent; a worker that dies is an error naming it.
"""

import contextlib
import dataclasses
import hashlib
import os
import pickle
import queue
import random
import signal
import subprocess
import sys
import threading
import traceback
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, BinaryIO

import numpy as np

from data_pipeline import instances, masking, packing

_PROTOCOL = pickle.HIGHEST_PROTOCOL
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class WorkerError(RuntimeError):
    """A worker process died or could not start."""


def split_documents(
    doc_ids: Sequence[str], sentence_counts: Sequence[int], values: np.ndarray, lengths: np.ndarray
) -> Iterator[tuple[str, list[list[int]]]]:
    """(doc_id, token ids per sentence) per document, from `values` (the tokens of all their
    sentences, tokenized at once) and `lengths` (tokens per sentence); sentences of no tokens go."""
    tokens, ends = values.tolist(), np.cumsum(lengths).tolist()
    lengths = np.asarray(lengths).tolist()
    sentence = 0
    for doc_id, count in zip(doc_ids, np.asarray(sentence_counts).tolist(), strict=True):
        sentences = range(sentence, sentence + count)
        yield doc_id, [tokens[ends[i] - lengths[i] : ends[i]] for i in sentences if lengths[i]]
        sentence += count


@dataclasses.dataclass(frozen=True)
class ChunkInstances:
    """A chunk's tokens -> its instances, laid out [N, L] (or packed rows [R, L]), from the
    `drop`-th on, with their stream positions' chunk fields (pretraining_input.py)."""

    max_seq_length: int
    short_seq_prob: float
    random_next_prob: float
    next_sentence: bool  # False: single segments (instances.create_segments_from_document)
    seed: int
    names: tuple[str, ...]
    spec: masking.MaskingSpec
    position_fields: int
    # pack_examples: rows of at most this many pairs and max_predictions_per_seq predictions.
    max_sequences_per_row: int | None
    max_predictions_per_seq: int

    def __call__(self, doc_ids, counts, values, lengths, header, drop) -> tuple[np.ndarray, ...]:
        documents = split_documents([d.decode() for d in doc_ids], counts, values, lengths)
        epoch, chunk = np.asarray(header)[:2].tolist()
        found = instances.instances_from_chunk(
            list(documents),
            max_seq_length=self.max_seq_length,
            short_seq_prob=self.short_seq_prob,
            random_next_prob=self.random_next_prob,
            rng=random.Random(f"{self.seed}:{epoch}:{chunk}"),
            next_sentence=self.next_sentence,
        )
        spec = self.spec
        laid = instances.pack_instances(
            found, max_seq_length=self.max_seq_length, cls_id=spec.cls_id, sep_id=spec.sep_id
        )
        if self.max_sequences_per_row:
            # A row takes at most max_predictions_per_seq masked positions, each pair's count
            # being the one masking.mask_packed_batch will draw: no pair loses a prediction.
            laid = packing.pack_pairs(
                laid,
                masking.num_to_predict(laid["input_mask"].sum(axis=1), spec),
                max_slots=self.max_sequences_per_row,
                budget=self.max_predictions_per_seq,
                pad_id=spec.pad_id,
                rng=np.random.default_rng([self.seed, epoch, chunk]),
            )
        drop = int(drop)
        laid = {name: laid[name][drop:] for name in self.names}
        count = len(laid["input_ids"])
        positions = np.zeros((count, self.position_fields), np.int64)
        positions[:, 1:-1] = header
        positions[:, -1] = np.arange(drop + 1, drop + 1 + count)
        return (*(laid[name] for name in self.names), positions)


@dataclasses.dataclass(frozen=True)
class BatchMasks:
    """A batch's masked input_ids and masked-LM positions, ids and weights (masking.py)."""

    seed: int
    spec: masking.MaskingSpec
    packed: bool

    OUTPUTS = ("input_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights")

    def __call__(self, index, input_ids, input_mask) -> tuple[np.ndarray, ...]:
        # A batch's masks depend only on the seed and the batch's place in the stream.
        rng = np.random.default_rng([self.seed, int(index)])
        mask = masking.mask_packed_batch if self.packed else masking.mask_batch
        out = mask(input_ids, input_mask, self.spec, rng)
        return tuple(out[name] for name in self.OUTPUTS)


class Pool:
    """Worker processes that run registered steps (name -> picklable callable) on request.

    `register(steps)` returns a key (equal steps, equal key); `run(key, name, *args)`
    runs steps[name](*args) in an idle worker, which is sent the steps the first time
    it needs them. Any thread may call `run`, as many at once as there are workers
    without waiting. A worker found dead fails the call that found it and is replaced.
    """

    def __init__(self, count: int):
        self._lock = threading.Lock()
        self._steps: dict[str, bytes] = {}
        self._workers: list[_Worker] = []
        self._idle: queue.SimpleQueue = queue.SimpleQueue()
        # At exit the system closes the pipes, which ends the workers; no hook needed.
        self._closer = weakref.finalize(self, _close, self._workers)
        self._closer.atexit = False
        self.grow(count)

    @property
    def pids(self) -> list[int]:
        return [worker.process.pid for worker in self._workers]

    def grow(self, count: int) -> None:
        """Starts workers until there are `count`."""
        with self._lock:
            while len(self._workers) < count:
                worker = _Worker()
                self._workers.append(worker)
                self._idle.put(worker)

    def register(self, steps: Mapping[str, Any]) -> str:
        blob = pickle.dumps(dict(steps), _PROTOCOL)
        key = hashlib.sha256(blob).hexdigest()
        with self._lock:
            self._steps[key] = blob
        return key

    def run(self, key: str, name: str, *args):
        worker = self._idle.get()
        try:
            return worker.call(key, self._steps[key], name, args)
        except WorkerError:
            with self._lock:
                self._workers.remove(worker)
                worker = _Worker()
                self._workers.append(worker)
            raise
        finally:
            self._idle.put(worker)

    def close(self) -> None:
        """Ends the workers (each after the request in hand); the pool is then unusable."""
        self._closer()


_shared: Pool | None = None
_shared_lock = threading.Lock()


def shared_pool(count: int) -> Pool:
    """This process's pool, grown to at least `count` workers: every stream of the process
    shares it, so a stream made again (an eval pass) starts no process."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Pool(count)
        _shared.grow(count)
        return _shared


class _Worker:
    def __init__(self):
        path = [_PACKAGE_ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "data_pipeline.workers"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
        )
        self._sent: set[str] = set()  # keys of the steps this worker holds

    def call(self, key: str, blob: bytes, name: str, args: tuple):
        try:
            if key not in self._sent:
                pickle.dump(("steps", key, blob), self.process.stdin, _PROTOCOL)
                self._sent.add(key)
            pickle.dump(("run", key, name, args), self.process.stdin, _PROTOCOL)
            self.process.stdin.flush()
            status, *answer = pickle.load(self.process.stdout)
        except (OSError, EOFError, pickle.UnpicklingError) as e:
            raise self._died() from e
        if status == "error":
            error, trace = answer
            raise error from WorkerError(f"in pipeline worker {self.process.pid}:\n{trace}")
        return answer[0]

    def _died(self) -> WorkerError:
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        return WorkerError(
            f"pipeline worker process {self.process.pid} (config.data.num_workers) ended with "
            f"exit code {code}; its traceback, if it wrote one, is on stderr above"
        )


def _close(workers: list[_Worker]) -> None:
    for worker in workers:
        with contextlib.suppress(OSError):  # a pipe the worker's death already broke
            worker.process.stdin.close()
    for worker in workers:
        try:
            worker.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            worker.process.kill()
            worker.process.wait()
        worker.process.stdout.close()


def _serve(requests: BinaryIO, answers: BinaryIO) -> None:
    """A worker's loop: messages until stdin closes. ("steps", key, blob) registers steps;
    ("run", key, name, args) runs one and answers ("ok", result) or ("error", e, trace)."""
    steps: dict[str, dict] = {}
    while True:
        try:
            message = pickle.load(requests)
        except EOFError:
            return
        if message[0] == "steps":
            steps[message[1]] = pickle.loads(message[2])
            continue
        _, key, name, args = message
        try:
            answer = ("ok", steps[key][name](*args))
        except Exception as e:
            answer = ("error", e, traceback.format_exc())
            try:
                pickle.dumps(e, _PROTOCOL)
            except Exception:
                answer = ("error", RuntimeError(f"{type(e).__name__}: {e}"), answer[2])
        pickle.dump(answer, answers, _PROTOCOL)
        answers.flush()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    channel = sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not corrupt the answers
    _serve(sys.stdin.buffer, channel)
