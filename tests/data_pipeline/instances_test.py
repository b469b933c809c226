"""NSP pair construction against the rules of the original create_pretraining_data.py."""

import random

import numpy as np
import pytest

from data_pipeline import instances

CLS, SEP = 2, 3


def reference_truncate(tokens_a, tokens_b, max_num_tokens, rng):
    """The original's token-by-token loop, kept here as the oracle for the lengths."""
    tokens_a, tokens_b = list(tokens_a), list(tokens_b)
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        trunc = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del trunc[0]
        else:
            trunc.pop()
    return tokens_a, tokens_b


def synthetic_corpus(num_documents, seed=0, max_sentence_length=40):
    """Documents whose tokens encode (document, sentence, position), so provenance is checkable."""
    rng = random.Random(seed)
    corpus = []
    for d in range(num_documents):
        sentences = []
        for s in range(rng.randint(1, 30)):
            length = rng.randint(1, max_sentence_length)
            sentences.append([100_000 * (d + 1) + 1000 * s + t for t in range(length)])
        corpus.append((f"doc{d}", sentences))
    return corpus


def document_of(token):
    return token // 100_000 - 1


@pytest.mark.parametrize(
    "len_a,len_b,limit",
    [
        (1, 1, 2),
        (10, 3, 5),
        (3, 10, 5),
        (7, 7, 5),
        (8, 7, 5),
        (100, 1, 2),
        (1, 100, 2),
        (50, 60, 61),
    ],
)
def test_truncate_matches_reference_lengths_and_keeps_contiguous_spans(len_a, len_b, limit):
    a, b = list(range(len_a)), list(range(1000, 1000 + len_b))
    out_a, out_b = instances.truncate_seq_pair(a, b, limit, random.Random(0))
    ref_a, ref_b = reference_truncate(a, b, limit, random.Random(0))
    assert (len(out_a), len(out_b)) == (len(ref_a), len(ref_b))
    assert len(out_a) >= 1 and len(out_b) >= 1
    # What remains is a contiguous span of the original.
    for out, src in ((out_a, a), (out_b, b)):
        start = src.index(out[0])
        assert out == src[start : start + len(out)]


def test_truncate_front_back_choice_is_a_fair_coin():
    rng = random.Random(1)
    fronts = []
    for _ in range(2000):
        out_a, _ = instances.truncate_seq_pair(list(range(40)), [0], 21, rng)
        fronts.append(out_a[0])  # tokens removed from the front
    # 20 tokens are cut from A; the front share is Binomial(20, 1/2): mean 10.
    assert np.mean(fronts) == pytest.approx(10, abs=0.3)
    assert np.var(fronts) == pytest.approx(5, rel=0.2)


def make_instances(corpus, max_seq_length=128, seed=0, **kwargs):
    options = dict(short_seq_prob=0.1, random_next_prob=0.5, buffer_size=50)
    options.update(kwargs)
    out = []
    for batch in instances.instances_from_stream(
        corpus, max_seq_length=max_seq_length, rng=random.Random(seed), **options
    ):
        out.extend(batch)
    return out


def test_next_sentence_statistics_and_provenance():
    corpus = synthetic_corpus(800)
    made = make_instances(corpus)
    assert len(made) > 3000
    random_next = np.array([i.is_random_next for i in made])
    # Forced NotNext for one-sentence chunks pushes the share a little over 1/2.
    assert 0.48 < random_next.mean() < 0.62
    for instance in made:
        assert instance.tokens_a and instance.tokens_b
        assert len(instance.tokens_a) + len(instance.tokens_b) <= 125
        doc_a = {document_of(t) for t in instance.tokens_a}
        doc_b = {document_of(t) for t in instance.tokens_b}
        assert len(doc_a) == 1 and len(doc_b) == 1
        if instance.is_random_next:
            assert doc_a != doc_b, "NotNext must come from a different document"
        else:
            assert doc_a == doc_b
            # IsNext: B continues A in the document (B's first token follows A's last sentence).
            assert min(instance.tokens_b) > max(instance.tokens_a)


def test_about_ten_percent_of_document_passes_aim_short():
    # Long documents of short sentences: a pass aiming at full length yields
    # chunks of >= 125 tokens except at the document's end.
    rng = random.Random(3)
    corpus = [
        (f"d{d}", [[rng.randrange(10, 1000) for _ in range(5)] for _ in range(200)])
        for d in range(300)
    ]
    short = []
    for batch in instances.instances_from_stream(
        corpus,
        max_seq_length=128,
        short_seq_prob=0.1,
        random_next_prob=0.0,
        buffer_size=10,
        rng=random.Random(0),
    ):
        # The first chunk of a pass shows its target length.
        first = batch[0]
        short.append(len(first.tokens_a) + len(first.tokens_b) < 120)
    assert np.mean(short) == pytest.approx(0.1, abs=0.03)


def test_unused_segments_are_put_back():
    # With NotNext, the chunk's sentences after a_end are reused: every
    # sentence of a document appears in some A (or IsNext B). Documents are
    # short enough that truncation never cuts a sentence away.
    corpus = synthetic_corpus(60, seed=5, max_sentence_length=5)
    used = set()
    for instance in make_instances(corpus, max_seq_length=512, short_seq_prob=0.0):
        used.update(t // 1000 for t in instance.tokens_a)
        if not instance.is_random_next:
            used.update(t // 1000 for t in instance.tokens_b)
    every = {t // 1000 for _, doc in corpus for sentence in doc for t in sentence}
    assert used == every


def test_deterministic_for_a_seed():
    corpus = synthetic_corpus(50)
    first = make_instances(corpus, seed=7)
    assert first == make_instances(corpus, seed=7)
    assert first != make_instances(corpus, seed=8)


def test_a_chunk_pairs_within_itself_and_is_shuffled():
    corpus = synthetic_corpus(8, seed=2) + [("empty", [])]

    def chunk(seed):
        options = dict(max_seq_length=128, short_seq_prob=0.1, random_next_prob=0.5)
        return instances.instances_from_chunk(corpus, rng=random.Random(seed), **options)

    made = chunk(0)
    assert made == chunk(0) and made != chunk(1)
    assert any(i.is_random_next for i in made) and not all(i.is_random_next for i in made)
    for instance in made:
        doc_a = {document_of(t) for t in instance.tokens_a}
        doc_b = {document_of(t) for t in instance.tokens_b}
        assert (doc_a != doc_b) == instance.is_random_next
    # Shuffled: the documents' instances are interleaved, not one document after another.
    order = [document_of(i.tokens_a[0]) for i in made]
    assert order != sorted(order)
    # The smallest chunk: two documents, each the other's NotNext source.
    two = instances.instances_from_chunk(
        corpus[:2], max_seq_length=64, short_seq_prob=0, random_next_prob=1, rng=random.Random(0)
    )
    assert two and all(document_of(i.tokens_b[0]) == 1 - document_of(i.tokens_a[0]) for i in two)


def test_single_document_stream_cannot_make_not_next():
    with pytest.raises(instances.NotNextError, match="at least two documents"):
        make_instances([("only", [[1, 2, 3]])])


def test_pack_layout():
    packed = instances.pack_instances(
        [instances.Instance([5, 6], [7], True), instances.Instance([8], [9, 10, 11], False)],
        max_seq_length=8,
        cls_id=CLS,
        sep_id=SEP,
    )
    np.testing.assert_array_equal(
        packed["input_ids"], [[CLS, 5, 6, SEP, 7, SEP, 0, 0], [CLS, 8, SEP, 9, 10, 11, SEP, 0]]
    )
    np.testing.assert_array_equal(
        packed["segment_ids"], [[0, 0, 0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1, 1, 0]]
    )
    np.testing.assert_array_equal(
        packed["input_mask"], [[1, 1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1, 0]]
    )
    np.testing.assert_array_equal(packed["next_sentence_labels"], [1, 0])


def test_masked_lm_alone_cuts_a_document_into_consecutive_segments():
    document = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]
    # max_seq_length 6: 4 tokens between [CLS] and [SEP], across sentence boundaries.
    made = instances.create_segments_from_document(
        document, max_seq_length=6, short_seq_prob=0.0, rng=random.Random(0)
    )
    assert made == [
        instances.Instance([1, 2, 3, 4], [], False),
        instances.Instance([5, 6, 7, 8], [], False),
        instances.Instance([9, 10], [], False),
    ]
    laid = instances.pack_instances(made, max_seq_length=6, cls_id=101, sep_id=102)
    np.testing.assert_array_equal(
        laid["input_ids"],
        [[101, 1, 2, 3, 4, 102], [101, 5, 6, 7, 8, 102], [101, 9, 10, 102, 0, 0]],
    )
    np.testing.assert_array_equal(laid["input_mask"][2], [1, 1, 1, 1, 0, 0])
    assert not laid["segment_ids"].any()


def test_masked_lm_alone_draws_no_other_document():
    documents = [("a", [[1, 2], [3]]), ("b", [[4, 5, 6]])]
    chunk = instances.instances_from_chunk(
        documents,
        max_seq_length=16,
        short_seq_prob=0.0,
        random_next_prob=1.0,  # unused: every pair would be NotNext
        rng=random.Random(0),
        next_sentence=False,
    )
    assert sorted(i.tokens_a for i in chunk) == [[1, 2, 3], [4, 5, 6]]
    assert all(i.tokens_b == [] and not i.is_random_next for i in chunk)
    # A one-document stream has nothing to pair with, and needs nothing.
    [one] = instances.instances_from_stream(
        [("a", [[1, 2], [3]])],
        max_seq_length=16,
        short_seq_prob=0.0,
        random_next_prob=0.5,
        buffer_size=4,
        rng=random.Random(0),
        next_sentence=False,
    )
    assert one == [instances.Instance([1, 2, 3], [], False)]
