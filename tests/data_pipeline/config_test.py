"""data_pipeline.config: DataConfig's checks, each error naming its option; the defaults as a
ConfigDict and back; unknown and missing keys refused, with the closest key suggested."""

import dataclasses
import re

import ml_collections
import pytest

from data_pipeline import config as config_lib
from data_pipeline.config import DataConfig
from data_pipeline.errors import ConfigError, UserError

PROBABILITIES = (
    "masked_lm_prob",
    "mask_token_prob",
    "random_token_prob",
    "short_seq_prob",
    "random_next_prob",
)


def test_the_defaults_are_the_pipelines():
    c = DataConfig()
    assert (c.source, c.tokenizer, c.vocab_file, c.vocab_size) == ("builtin", "wordpiece", "", 4096)
    assert (c.max_seq_length, c.max_predictions_per_seq, c.max_chars_per_word) == (128, 20, 200)
    assert (c.masked_lm_prob, c.mask_token_prob, c.random_token_prob) == (0.15, 0.8, 0.1)
    assert (c.short_seq_prob, c.random_next_prob, c.eval_fraction) == (0.1, 0.5, 0.1)
    assert (c.document_buffer_size, c.shuffle_buffer_size, c.dupe_factor) == (256, 2048, 10)
    assert (c.pack_examples, c.max_sequences_per_row, c.num_workers) == (False, 3, 0)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"source": "web"}, "source='web': must be one of builtin, text, tfds, tfrecord"),
        ({"source": "text"}, "text_files='': source='text' needs at least one glob"),
        ({"source": "text", "text_files": "  "}, "text_files='  ': source='text' needs"),
        ({"source": "tfds"}, "tfds_name='': source='tfds' needs a dataset name"),
        ({"source": "tfrecord"}, "tfrecord_train_files='': source='tfrecord' needs a glob"),
        ({"eval_fraction": 1.0}, r"eval_fraction=1.0: must be in \[0, 1\)"),
        ({"eval_fraction": -0.1}, r"eval_fraction=-0.1: must be in \[0, 1\)"),
        (
            {"tokenizer": "unigram"},
            "tokenizer='unigram': must be one of wordpiece, sentencepiece, bpe",
        ),
        ({"vocab_size": 63}, "vocab_size=63: a learned vocabulary needs at least 64 entries"),
        ({"max_chars_per_word": 0}, "max_chars_per_word=0: must be at least 1"),
        ({"max_seq_length": 4}, r"max_seq_length=4: must be at least 5 \(\[CLS\] A \[SEP\] B"),
        ({"max_predictions_per_seq": 0}, "max_predictions_per_seq=0: must be at least 1"),
        (
            {"max_seq_length": 16, "max_predictions_per_seq": 14},
            "max_predictions_per_seq=14: cannot exceed max_seq_length - 3 = 13 maskable",
        ),
        ({"masked_lm_prob": 0.0}, "masked_lm_prob=0.0: must be above 0"),
        (
            {"mask_token_prob": 0.8, "random_token_prob": 0.3},
            r"random_token_prob=0.3: mask_token_prob \+ random_token_prob = 1.1 > 1",
        ),
        ({"document_buffer_size": 1}, r"document_buffer_size=1: must be at least 2 \(NotNext\)"),
        ({"shuffle_buffer_size": 0}, "shuffle_buffer_size=0: must be at least 1"),
        ({"dupe_factor": 0}, "dupe_factor=0: must be at least 1"),
        ({"num_workers": -1}, r"num_workers=-1: must be 0 \(no worker processes\) or more"),
        ({"max_sequences_per_row": 0}, "max_sequences_per_row=0: must be at least 1"),
    ],
)
def test_each_refusal_names_its_option_and_value(changes, message):
    with pytest.raises(ConfigError, match=rf"^config\.data\.{message}"):
        DataConfig(**changes)


@pytest.mark.parametrize("name", PROBABILITIES)
@pytest.mark.parametrize("value", [-0.01, 1.01])
def test_probabilities_outside_0_to_1_are_refused_by_name(name, value):
    with pytest.raises(
        ConfigError, match=rf"^config\.data\.{name}={value}: must be a probability in \[0, 1\]$"
    ):
        DataConfig(**{name: value})


def test_the_limits_themselves_are_accepted():
    DataConfig(max_seq_length=5, max_predictions_per_seq=2)
    DataConfig(max_seq_length=16, max_predictions_per_seq=13)
    DataConfig(vocab_size=64, eval_fraction=0.0, document_buffer_size=2, num_workers=0)
    DataConfig(masked_lm_prob=1.0, mask_token_prob=0.9, random_token_prob=0.1)
    DataConfig(mask_token_prob=0.0, random_token_prob=0.0, short_seq_prob=0.0)
    DataConfig(source="text", text_files="a.txt")
    DataConfig(source="tfds", tfds_name="wikipedia/20230601.en")
    DataConfig(source="tfrecord", tfrecord_train_files="train-*.tfrecord")


def test_a_vocab_file_lifts_the_minimum_size_of_a_learned_vocabulary():
    assert DataConfig(vocab_file="vocab.txt", vocab_size=10).vocab_size == 10


def test_config_errors_are_user_errors():
    with pytest.raises(UserError) as caught:
        DataConfig(dupe_factor=0)
    assert type(caught.value) is ConfigError
    assert caught.value.EXIT_CODE == 2


def test_a_data_config_is_frozen_and_replace_checks_again():
    c = DataConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.max_seq_length = 64
    shorter = c.replace(max_seq_length=64, max_predictions_per_seq=10)
    assert (shorter.max_seq_length, shorter.max_predictions_per_seq) == (64, 10)
    assert c.max_seq_length == 128
    with pytest.raises(ConfigError, match=r"^config\.data\.max_predictions_per_seq=20: "):
        c.replace(max_seq_length=16)


def test_default_config_holds_every_field_at_its_default():
    d = config_lib.default_config()
    assert isinstance(d, ml_collections.ConfigDict)
    fields = dataclasses.fields(DataConfig)
    assert list(d.keys()) == sorted(f.name for f in fields)
    assert d.to_dict() == {f.name: f.default for f in fields}


def test_default_config_is_a_fresh_copy_each_call():
    first = config_lib.default_config()
    first.max_seq_length = 64
    assert config_lib.default_config().max_seq_length == 128


def test_from_config_of_the_defaults_is_the_default_data_config():
    assert config_lib.from_config(config_lib.default_config()) == DataConfig()


def test_from_config_round_trips_changed_options(data_config):
    data_config.update(max_seq_length=64, max_predictions_per_seq=10, source="text")
    data_config.text_files = "a.txt,b/*.gz"
    c = config_lib.from_config(data_config)
    assert c == DataConfig(
        max_seq_length=64, max_predictions_per_seq=10, source="text", text_files="a.txt,b/*.gz"
    )
    assert config_lib.from_config(config_lib.config_dict(DataConfig)) == DataConfig()
    assert config_lib.from_config(dataclasses.asdict(c)) == c


def test_from_config_of_a_data_config_is_that_config():
    c = DataConfig(max_seq_length=32, max_predictions_per_seq=5)
    assert config_lib.from_config(c) is c


def test_from_config_checks_the_values(data_config):
    data_config.tokenizer = "unigram"
    with pytest.raises(ConfigError, match=r"^config\.data\.tokenizer='unigram'"):
        config_lib.from_config(data_config)


def test_an_unknown_key_is_refused_with_the_closest_known_one(data_config):
    values = data_config.to_dict() | {"max_seq_len": 64}
    with pytest.raises(
        ConfigError,
        match=r"^unknown config key: config\.data\.max_seq_len; "
        r"did you mean config\.data\.max_seq_length\?$",
    ):
        config_lib.from_config(values)


def test_missing_keys_are_named_in_order(data_config):
    values = data_config.to_dict()
    del values["vocab_size"], values["dupe_factor"]
    with pytest.raises(
        ConfigError,
        match=r"^missing data option\(s\): config\.data\.dupe_factor, config\.data\.vocab_size$",
    ):
        config_lib.from_config(values)


def test_known_keys_pass():
    config_lib.check_known_keys(["a", "b"], ["a", "b", "c"], "config")
    config_lib.check_known_keys([], [], "config")


def test_a_key_like_none_lists_the_known_keys_and_every_other_unknown_one():
    with pytest.raises(ConfigError) as caught:
        config_lib.check_known_keys(["zzz", "alpha", "yyy"], ["beta", "alpha"], "config.model")
    assert str(caught.value) == (
        "unknown config key: config.model.yyy; known keys: alpha, beta "
        "(also unknown: config.model.zzz)"
    )


def test_a_key_at_the_wrong_depth_is_found_where_it_belongs():
    elsewhere = ["config.seed", "config.optimizer", "config.optimizer.learning_rate"]
    with pytest.raises(
        ConfigError,
        match=r"^unknown config key: config\.learning_rat; "
        r"did you mean config\.optimizer\.learning_rate\?$",
    ):
        config_lib.check_known_keys(["learning_rat"], ["seed"], "config", elsewhere=elsewhere)


def test_the_wrong_key_itself_and_its_own_keys_are_not_suggested():
    # config.optimizer.warmup holds config.optimizer.warmup.steps: neither is "elsewhere".
    elsewhere = [
        "config.optimizer",
        "config.optimizer.warmup",
        "config.optimizer.warmup.steps",
        "config.schedule.warmup",
    ]
    with pytest.raises(
        ConfigError, match=r"config\.optimizer\.warmup; did you mean config\.schedule\.warmup\?$"
    ):
        config_lib.check_known_keys(
            ["warmup"], ["learning_rate"], "config.optimizer", elsewhere=elsewhere
        )


def test_key_paths_lists_outer_keys_first():
    config = ml_collections.ConfigDict(
        {"seed": 0, "optimizer": {"learning_rate": 1e-4, "schedule": {"warmup": 10}}, "mesh": {}}
    )
    assert config_lib.key_paths(config, "config") == [
        "config.mesh",
        "config.optimizer",
        "config.seed",
        "config.optimizer.learning_rate",
        "config.optimizer.schedule",
        "config.optimizer.schedule.warmup",
    ]
    assert config_lib.key_paths({"b": 1, "a": {"c": 2}}, "x") == ["x.b", "x.a", "x.a.c"]


def test_max_seq_length_must_fit_the_models_positions():
    config_lib.check_max_positions(DataConfig(max_seq_length=128), 128)
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "config.data.max_seq_length=128 is above the model's max_position_embeddings=64"
        ),
    ):
        config_lib.check_max_positions(DataConfig(max_seq_length=128), 64)


def test_a_value_of_the_wrong_type_is_refused_by_name():
    with pytest.raises(
        ConfigError, match=r"^config\.data\.max_seq_length='128': must be of type int"
    ):
        DataConfig(max_seq_length="128")
    with pytest.raises(ConfigError, match=r"^config\.data\.do_lower_case=1: must be of type bool"):
        DataConfig(do_lower_case=1)
    with pytest.raises(
        ConfigError, match=r"^config\.data\.max_seq_length=True: must be of type int"
    ):
        DataConfig(max_seq_length=True)
    assert DataConfig(masked_lm_prob=1).masked_lm_prob == 1  # an int is a float


def test_the_eval_split_masks_at_its_own_rate_or_the_training_one():
    assert DataConfig(masked_lm_prob=0.3).masking_rate("eval") == 0.3  # 0.0: the same
    ours = DataConfig(masked_lm_prob=0.3, max_predictions_per_seq=40, eval_masked_lm_prob=0.15)
    assert (ours.masking_rate("train"), ours.masking_rate("eval")) == (0.3, 0.15)
    with pytest.raises(
        ConfigError, match=r"^config\.data\.eval_masked_lm_prob=1\.5: must be a probability"
    ):
        DataConfig(eval_masked_lm_prob=1.5)


def test_max_predictions_per_seq_must_hold_both_masking_rates():
    config_lib.check_predictions_fit(DataConfig())  # 128 * 0.15 = 19.2 of 20
    # Within rounding: the MLPerf layout, 76 at 512 tokens (76.8 asked).
    config_lib.check_predictions_fit(DataConfig(max_seq_length=512, max_predictions_per_seq=76))
    with pytest.raises(
        ConfigError,
        match=r"^config\.data\.max_predictions_per_seq=20: a 128-token sequence would be masked "
        r"at 0\.156, not config\.data\.masked_lm_prob=0\.3; raise it to at least 38$",
    ):
        config_lib.check_predictions_fit(DataConfig(masked_lm_prob=0.3))
    with pytest.raises(
        ConfigError,
        match=r"^config\.data\.max_predictions_per_seq=20: .*eval_masked_lm_prob=0\.25; .* 32$",
    ):
        config_lib.check_predictions_fit(DataConfig(eval_masked_lm_prob=0.25))
