"""The offline TFRecords and the online pipeline draw from the same distribution."""

import pytest

from data_pipeline import batch_statistics, offline_writer, pretraining_input
from data_pipeline.vocab import load_vocab

SEQUENCES = 3072


def summary_of(dataset, vocab, batches):
    stats = batch_statistics.BatchStatistics(128, 20)
    for batch in dataset.take(batches).as_numpy_iterator():
        stats.update(batch, vocab)
    return stats.summary()


@pytest.mark.slow
def test_offline_and_online_statistics_agree(tmp_path, data_config, bert_tokenizer_json):
    data_config.update(vocab_file=bert_tokenizer_json, dupe_factor=2, shuffle_buffer_size=2000)
    vocab = load_vocab(bert_tokenizer_json)
    online = summary_of(
        pretraining_input.make_pretraining_dataset(
            data_config, split="train", batch_size=64, seed=0
        ),
        vocab,
        SEQUENCES // 64,
    )
    out = tmp_path / "records"
    offline_writer.write_pretraining_data(data_config, str(out), num_workers=1, seed=0)
    data_config.update(
        source="tfrecord",
        tfrecord_train_files=str(out / "train-*.tfrecord"),
        tfrecord_eval_files=str(out / "eval-*.tfrecord"),
    )
    offline = summary_of(
        pretraining_input.make_pretraining_dataset(
            data_config, split="train", batch_size=64, seed=0
        ),
        vocab,
        SEQUENCES // 64,
    )
    assert online["sequences"] == offline["sequences"] == SEQUENCES
    for key, tolerance in [
        ("length_mean", 4.0),
        ("share_full_length", 0.05),
        ("share_short", 0.04),
        ("share_not_next", 0.05),
        ("predictions_per_sequence", 0.6),
        ("share_tokens_predicted", 0.005),
        ("share_mask_token", 0.02),
        ("share_random_token", 0.015),
        ("share_unchanged", 0.015),
        ("share_padding", 0.04),
    ]:
        assert online[key] == pytest.approx(offline[key], abs=tolerance), key
    assert online["specials_predicted"] == offline["specials_predicted"] == 0
