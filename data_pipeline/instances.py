"""Sentence pairs for next-sentence prediction, as BERT's create_pretraining_data.py.

A document is a list of sentences, each a list of token ids. From one pass
over a document, `create_instances_from_document` cuts chunks of sentences up
to a target length, splits each chunk into segments A and B at a random
sentence boundary, and with probability `random_next_prob` (always, for a
one-sentence chunk) replaces B with a span of another document (NotNext),
putting the unused sentences of the chunk back. The target length, the split
point, the NotNext choice and B's start sentence are drawn in the original's
order and by its rules. Two draws depart from it
(docs/reference.md#sentence-pairs):

- truncation (`truncate_seq_pair`) computes how many tokens each side loses in
  closed form and draws only the front/back split: the same distribution as
  the original's token-by-token coin flips, from a different random stream;
- a NotNext document comes from a window of recent documents (`DocumentRing`:
  the offline writer's `instances_from_stream`) or from the other documents of
  a chunk (the online pipeline's `instances_from_chunk`) and is never the
  current document, where the original draws from the whole corpus, tries up
  to 10 times to avoid the current document and may end on it.

Masked LM alone (`next_sentence=False`: RoBERTa's and ModernBERT's objective) takes
no pairs: `create_segments_from_document` cuts a document's text into single
segments, drawing no other document.

`pack_instances` lays pairs out as `[CLS] A [SEP] B [SEP]`, and single segments as
`[CLS] A [SEP]`, with segment ids and padding. Masking is separate
(data_pipeline.masking) so that it can be redrawn every pass.
"""

import dataclasses
import random
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

from data_pipeline.errors import UserError

Sentence = list[int]
Document = Sequence[Sentence]


@dataclasses.dataclass(frozen=True)
class Instance:
    tokens_a: list[int]
    tokens_b: list[int]  # empty: a single segment (masked LM alone)
    is_random_next: bool


def truncate_seq_pair(
    tokens_a: list[int], tokens_b: list[int], max_num_tokens: int, rng: random.Random
) -> tuple[list[int], list[int]]:
    """Trims the longer side one token at a time, from the front or back with p=0.5.

    The original loops token by token; which side loses a token never depends on
    the random draws (the longer one, B on ties), so the counts are computed in
    closed form and only the front/back choices are drawn: the number taken from
    the front of a side that loses r tokens is Binomial(r, 1/2), the same
    distribution as r fair coin flips.
    """
    len_a, len_b = len(tokens_a), len(tokens_b)
    excess = len_a + len_b - max_num_tokens
    if excess <= 0:
        return tokens_a, tokens_b
    cut_a = cut_b = 0
    # Phase 1: only the longer side loses tokens until both are equally long.
    if len_a > len_b:
        cut_a = min(excess, len_a - len_b)
    else:
        cut_b = min(excess, len_b - len_a)
    rest = excess - cut_a - cut_b
    # Phase 2: equal lengths; B loses first (ties go to B), then they alternate.
    cut_b += (rest + 1) // 2
    cut_a += rest // 2
    return _trim(tokens_a, cut_a, rng), _trim(tokens_b, cut_b, rng)


def _trim(tokens: list[int], count: int, rng: random.Random) -> list[int]:
    if count == 0:
        return tokens
    front = rng.getrandbits(count).bit_count()
    return tokens[front : len(tokens) - (count - front)]


def create_instances_from_document(
    document: Document,
    random_document: Callable[[], Document],
    *,
    max_seq_length: int,
    short_seq_prob: float,
    random_next_prob: float,
    rng: random.Random,
) -> list[Instance]:
    """One pass over `document`; `random_document()` returns a different document."""
    max_num_tokens = max_seq_length - 3
    # Mostly fill the whole sequence; sometimes aim shorter so the model also
    # sees short inputs (fine-tuning tasks are often short).
    short = rng.random() < short_seq_prob
    target_seq_length = rng.randint(2, max_num_tokens) if short else max_num_tokens

    instances = []
    chunk: list[Sentence] = []
    chunk_length = 0
    i = 0
    while i < len(document):
        segment = document[i]
        chunk.append(segment)
        chunk_length += len(segment)
        if i == len(document) - 1 or chunk_length >= target_seq_length:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [token for sentence in chunk[:a_end] for token in sentence]

            if len(chunk) == 1 or rng.random() < random_next_prob:
                is_random_next = True
                target_b_length = target_seq_length - len(tokens_a)
                other = random_document()
                tokens_b = []
                for sentence in other[rng.randint(0, len(other) - 1) :]:
                    tokens_b.extend(sentence)
                    if len(tokens_b) >= target_b_length:
                        break
                # The sentences of the chunk that B did not use go back into
                # the document for the next chunk.
                i -= len(chunk) - a_end
            else:
                is_random_next = False
                tokens_b = [token for sentence in chunk[a_end:] for token in sentence]

            tokens_a, tokens_b = truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
            instances.append(Instance(tokens_a, tokens_b, is_random_next))
            chunk = []
            chunk_length = 0
        i += 1
    return instances


def create_segments_from_document(
    document: Document, *, max_seq_length: int, short_seq_prob: float, rng: random.Random
) -> list[Instance]:
    """One pass over `document` for masked LM alone: its text, sentences joined, cut into
    consecutive segments of a target length (the last one shorter), each one sequence.

    The target is drawn as create_instances_from_document draws it (with
    `short_seq_prob` a random shorter one), of `max_seq_length - 2` tokens:
    `[CLS] A [SEP]`. A sentence may run on into the next segment, so that no
    text is dropped and full-length rows hold no padding.
    """
    max_num_tokens = max_seq_length - 2
    short = rng.random() < short_seq_prob
    target = rng.randint(2, max_num_tokens) if short else max_num_tokens
    tokens = [token for sentence in document for token in sentence]
    return [Instance(tokens[i : i + target], [], False) for i in range(0, len(tokens), target)]


def pack_instances(
    instances: Sequence[Instance], *, max_seq_length: int, cls_id: int, sep_id: int
) -> dict[str, np.ndarray]:
    """`[CLS] A [SEP] B [SEP]` (or `[CLS] A [SEP]` where B is empty) + padding, as int32
    arrays with a leading instance axis."""
    count = len(instances)
    input_ids = np.zeros((count, max_seq_length), np.int32)
    segment_ids = np.zeros((count, max_seq_length), np.int32)
    input_mask = np.zeros((count, max_seq_length), np.int32)
    labels = np.zeros((count,), np.int32)
    for row, instance in enumerate(instances):
        len_a, len_b = len(instance.tokens_a), len(instance.tokens_b)
        tokens_b = [*instance.tokens_b, sep_id] if len_b else []
        length = len_a + 2 + len(tokens_b)
        input_ids[row, :length] = [cls_id, *instance.tokens_a, sep_id, *tokens_b]
        segment_ids[row, len_a + 2 : length] = 1
        input_mask[row, :length] = 1
        labels[row] = int(instance.is_random_next)
    return {
        "input_ids": input_ids,
        "input_mask": input_mask,
        "segment_ids": segment_ids,
        "next_sentence_labels": labels,
    }


class NotNextError(UserError):
    """The stream cannot supply a NotNext segment from another document."""


class DocumentRing:
    """The last `capacity` documents seen, to draw NotNext segments from.

    The original draws from the whole corpus in memory; a streaming pipeline
    draws from a bounded window of it instead.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._ids: list[str] = []
        self._documents: list[Document] = []
        self._next = 0

    def add(self, doc_id: str, document: Document) -> None:
        if len(self._documents) < self.capacity:
            self._ids.append(doc_id)
            self._documents.append(document)
        else:
            self._ids[self._next] = doc_id
            self._documents[self._next] = document
            self._next = (self._next + 1) % self.capacity

    def sample_other(self, doc_id: str, rng: random.Random) -> Document:
        """A uniformly random held document whose id differs from `doc_id`."""
        # Rejection sampling: cheap while the window holds many documents.
        for _ in range(16):
            index = rng.randrange(len(self._documents))
            if self._ids[index] != doc_id:
                return self._documents[index]
        others = [i for i, other in enumerate(self._ids) if other != doc_id]
        if not others:
            raise NotNextError(
                f"no document other than {doc_id!r} to draw a NotNext segment from: "
                "next-sentence prediction needs a corpus of at least two documents"
            )
        return self._documents[rng.choice(others)]


def instances_from_stream(
    documents: Iterable[tuple[str, Document]],
    *,
    max_seq_length: int,
    short_seq_prob: float,
    random_next_prob: float,
    buffer_size: int,
    rng: random.Random,
    passes_per_document: int = 1,
    next_sentence: bool = True,
) -> Iterator[list[Instance]]:
    """Instances from a stream of `(doc_id, document)`, one list per document pass.

    Documents wait in a buffer of `buffer_size` and leave it in random order,
    which shuffles the document order; the same window supplies NotNext
    segments. `passes_per_document` > 1 is the offline writer's `dupe_factor`:
    independent passes over each document, as the original's outer loop.
    `next_sentence=False`: single segments (create_segments_from_document).
    """
    ring = DocumentRing(buffer_size)
    waiting: list[tuple[str, Document]] = []

    def passes(doc_id: str, document: Document) -> Iterator[list[Instance]]:
        for _ in range(passes_per_document):
            yield _document_pass(
                document,
                lambda: ring.sample_other(doc_id, rng),
                next_sentence=next_sentence,
                max_seq_length=max_seq_length,
                short_seq_prob=short_seq_prob,
                random_next_prob=random_next_prob,
                rng=rng,
            )

    for doc_id, document in documents:
        if not document:
            continue
        ring.add(doc_id, document)
        waiting.append((doc_id, document))
        if len(waiting) >= buffer_size:
            yield from passes(*_pop_random(waiting, rng))
    while waiting:
        yield from passes(*_pop_random(waiting, rng))


def instances_from_chunk(
    documents: Sequence[tuple[str, Document]],
    *,
    max_seq_length: int,
    short_seq_prob: float,
    random_next_prob: float,
    rng: random.Random,
    next_sentence: bool = True,
) -> list[Instance]:
    """One pass over each of `documents` (NotNext segments from the others), shuffled;
    `next_sentence=False`: single segments (create_segments_from_document).

    The online pipeline's unit of work: a chunk depends on nothing before it,
    so a stream can restart at any chunk (data_pipeline.pretraining_input).
    """
    documents = [(doc_id, document) for doc_id, document in documents if document]
    ring = DocumentRing(len(documents))
    for doc_id, document in documents:
        ring.add(doc_id, document)
    out = []
    for doc_id, document in documents:
        out += _document_pass(
            document,
            lambda doc_id=doc_id: ring.sample_other(doc_id, rng),
            next_sentence=next_sentence,
            max_seq_length=max_seq_length,
            short_seq_prob=short_seq_prob,
            random_next_prob=random_next_prob,
            rng=rng,
        )
    rng.shuffle(out)
    return out


def _document_pass(
    document: Document,
    random_document: Callable[[], Document],
    *,
    next_sentence: bool,
    max_seq_length: int,
    short_seq_prob: float,
    random_next_prob: float,
    rng: random.Random,
) -> list[Instance]:
    """Sentence pairs of one pass over `document`, or its single segments."""
    if not next_sentence:
        return create_segments_from_document(
            document, max_seq_length=max_seq_length, short_seq_prob=short_seq_prob, rng=rng
        )
    return create_instances_from_document(
        document,
        random_document,
        max_seq_length=max_seq_length,
        short_seq_prob=short_seq_prob,
        random_next_prob=random_next_prob,
        rng=rng,
    )


def _pop_random(items: list, rng: random.Random):
    index = rng.randrange(len(items))
    items[index], items[-1] = items[-1], items[index]
    return items.pop()
