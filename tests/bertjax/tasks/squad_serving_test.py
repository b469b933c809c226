"""A SavedModel reader's graph against the host pipeline: its windows are
squad_input.make_features' rows, and its answer text is squad.final_text's. (The whole
SavedModel against bertjax.answer: tests/bertjax/convert/savedmodel_test.py.)"""

import numpy as np
import pytest
import tensorflow as tf

from bertjax.tasks import squad, squad_serving
from data_pipeline.finetune import squad_config, squad_input

QUESTIONS = ["Who built the Great Wall of China, and when?", "", "中文?"]
CONTEXTS = [
    "The Great Wall (1848). was built over many centuries\tby several dynasties. " * 4,
    "control\x00chars\x07and\u200bzero\u00a0width spaces \x00 end, Café résumé naïve",
    "",
]


def test_the_windows_are_the_host_pipelines_rows(tokenizer):
    config = squad_config.SquadConfig(max_seq_length=24, doc_stride=5, max_query_length=6)
    examples = tuple(
        squad_input.SquadExample(f"q{i}", question, context, answers=(), is_impossible=False)
        for i, (question, context) in enumerate(zip(QUESTIONS, CONTEXTS, strict=True))
    )
    # The host pipeline refuses a context without tokens; the graph gives it one row.
    host = squad_input.make_features(squad_input.SquadData("t", examples[:2]), tokenizer, config)
    texts = {"question": tf.constant(QUESTIONS), "context": tf.constant(CONTEXTS)}
    graph = squad_serving._windows(tokenizer, texts, config, 24)
    rows = host.num_features
    assert rows > 10  # many windows of the long context
    example = graph["example"].numpy()
    np.testing.assert_array_equal(example[:rows], host.example_index)
    assert example[rows:].tolist() == [2]
    for name in ("input_ids", "input_mask", "segment_ids", "max_context"):
        np.testing.assert_array_equal(graph[name].numpy()[:rows], getattr(host, name), name)
    for name, host_name in (
        ("start", "doc_start"),
        ("offset", "doc_offset"),
        ("size", "doc_length"),
    ):
        np.testing.assert_array_equal(graph[name].numpy()[:rows], getattr(host, host_name))
    words = graph["words"].to_list()[1]
    assert [w.decode() for w in words] == list(host.documents[1].words)  # NULs kept


@pytest.mark.parametrize("version_2", [False, True])
@pytest.mark.parametrize(
    "questions, contexts",
    [([], []), ([""], [""]), (["Who?", "When?"], ["", " \t "])],
    ids=["no question", "one empty", "contexts without a word"],
)
def test_an_empty_batch_and_contexts_without_a_word_answer_nothing(
    tokenizer, version_2, questions, contexts
):
    config = squad_config.SquadConfig(
        max_seq_length=24, doc_stride=5, max_query_length=6, version_2_with_negative=version_2
    )
    texts = {
        "question": tf.constant(questions, tf.string),
        "context": tf.constant(contexts, tf.string),
    }
    features = squad_serving._windows(tokenizer, texts, config, 24)
    rows = tf.shape(features["input_ids"])[0]
    logits = [tf.random.stateless_normal([rows, 24], [0, i]) for i in (0, 1)]
    answers = squad_serving._answers(logits, features, tokenizer, config)
    assert answers["answer"].numpy().tolist() == [b""] * len(questions)
    assert answers["score"].shape == [len(questions)] and answers["score"].dtype == tf.float32


@pytest.mark.parametrize(
    "predicted, original, tokenized",
    [
        ("1848", "(1848).", "( 1848 ) ."),
        ("cafe resume", "Café résumé:", "cafe resume :"),
        ("great wall", "The Great Wall", "the great wall"),
        ("ss", "Straße", "strasse"),  # lengths differ: the whole words
        ("nowhere", "The Great Wall", "the great wall"),  # not found: the whole words
        ("", "The Great Wall", "the great wall"),
        ("中文", "说中文。", "说 中 文 。"),
    ],
)
def test_the_answer_text_is_final_texts(predicted, original, tokenized):
    graph = squad_serving._final_text(
        tf.constant(predicted), tf.constant(original), tf.constant(tokenized)
    )
    assert graph.numpy().decode() == squad.final_text(predicted, original, tokenized)


def test_a_question_longer_than_its_window_leaves_no_room_is_refused():
    config = squad_config.SquadConfig(max_seq_length=24, doc_stride=5, max_query_length=6)
    squad_serving.check_room(10, config)  # one piece
    with pytest.raises(ValueError, match="9 tokens leave no room for the context"):
        squad_serving.check_room(9, config)
