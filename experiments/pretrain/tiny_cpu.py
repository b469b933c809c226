"""BERT-Tiny pretraining on the built-in corpus, on a laptop CPU: the run of `make demo`.

    python -m bertjax.main --config experiments/pretrain/tiny_cpu.py --workdir demo_out \
        --fill_mask_examples 5

Hardware: any CPU; 2 cores suffice. Time: about 11 minutes on 2 cores
(3,000 steps of 32 x 128 tokens at about 5 steps/s), plus a few seconds to
learn the 4,096-entry vocabulary the first time. Expected result: held-out MLM
accuracy about 0.165 against 0.053 for always guessing the most frequent token,
NSP accuracy about 0.72 against 0.56.

The data side alone: `python -m data_pipeline.inspect --config experiments/pretrain/tiny_cpu.py`.
"""

import ml_collections


def get_data_config() -> ml_collections.ConfigDict:
    """The complete host-pipeline config; every field is read by data_pipeline.DataConfig."""
    data = ml_collections.ConfigDict()
    # Where documents come from: 'builtin' (Python's own docs), 'text', 'tfds' or 'tfrecord'.
    data.source = "builtin"
    # source='text': comma-separated globs of files in the original BERT format (.gz ok).
    data.text_files = ""
    # source='tfds': dataset name with config/version, e.g. 'wikipedia/20230601.en'.
    data.tfds_name = ""
    # source='tfds': the TFDS split that holds the documents (held-out docs are carved from it).
    data.tfds_split = "train"
    # source='tfds': TFDS data_dir, a local path or gs://...; '' uses the TFDS default.
    data.tfds_data_dir = ""
    # source='tfds': the feature holding a document's text.
    data.tfds_text_field = "text"
    # source='tfrecord': comma-separated globs of offline training instances.
    data.tfrecord_train_files = ""
    # source='tfrecord': comma-separated globs of offline evaluation instances.
    data.tfrecord_eval_files = ""
    # Share of documents (by a hash of their text) held out for evaluation.
    data.eval_fraction = 0.1
    # 'wordpiece' (BERT's) or 'sentencepiece'.
    data.tokenizer = "wordpiece"
    # vocab.txt or tokenizer.json (wordpiece), or a .model file (sentencepiece); '' learns one.
    data.vocab_file = ""
    # Size of the vocabulary learned when vocab_file is ''.
    data.vocab_size = 4096
    # Where learned vocabularies are cached; '' means $XDG_CACHE_HOME/bertjax.
    data.vocab_cache_dir = ""
    # Uncased model: lowercase and strip accents before WordPiece.
    data.do_lower_case = True
    # A word longer than this many characters becomes [UNK] (BERT: 200).
    data.max_chars_per_word = 200
    # Tokens per sequence, [CLS] and both [SEP] included.
    data.max_seq_length = 128
    # Masked positions per sequence, padded with weight 0 (BERT: 20 at 128, 80 at 512).
    data.max_predictions_per_seq = 20
    # Share of tokens to predict.
    data.masked_lm_prob = 0.15
    # Of the predicted tokens: share replaced by [MASK].
    data.mask_token_prob = 0.8
    # Of the predicted tokens: share replaced by a random non-special token (the rest stay).
    data.random_token_prob = 0.1
    # Mask whole words (a token and its ## pieces) instead of single pieces.
    data.whole_word_mask = False
    # Probability that a document pass aims at a random shorter length.
    data.short_seq_prob = 0.1
    # Probability that segment B comes from another document (NotNext).
    data.random_next_prob = 0.5
    # Documents held in memory to draw NotNext segments and to shuffle document order.
    data.document_buffer_size = 256
    # Instances shuffled together before batching.
    data.shuffle_buffer_size = 2048
    # Offline writer: masked copies of each document pass (BERT: 10).
    data.dupe_factor = 10
    # Seed of the fixed evaluation masking, so an eval set is identical across runs.
    data.eval_seed = 1234
    return data


def get_model_config(preset: str, vocab_size) -> ml_collections.ConfigDict:
    """`preset` plus every BertConfig field, None meaning the preset's value.

    Listing the fields lets any of them be overridden on the command line
    (`--config.model.num_hidden_layers=4`) although the config is locked.
    """
    model = ml_collections.ConfigDict()
    # One of tiny, mini, small, medium, base, large.
    model.preset = preset
    model.vocab_size = vocab_size
    for field, field_type in (
        ("hidden_size", int),
        ("num_hidden_layers", int),
        ("num_attention_heads", int),
        ("intermediate_size", int),
        ("hidden_act", str),  # gelu_tanh (the original), gelu (exact erf) or relu
        ("hidden_dropout_prob", float),
        ("attention_probs_dropout_prob", float),
        ("max_position_embeddings", int),
        ("type_vocab_size", int),
        ("initializer_range", float),
        ("layer_norm_eps", float),
        ("dtype", str),  # compute dtype: float32 or bfloat16
        ("param_dtype", str),
        ("scan_layers", bool),  # one nn.scan over the layers: faster compiles
        ("remat_policy", str),  # none, full, or a jax.checkpoint_policies name
        ("attention_implementation", str),  # xla, or cudnn on GPU
    ):
        model[field] = ml_collections.FieldReference(None, field_type=field_type)
    return model


def get_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    config.seed = 0
    config.num_train_steps = 3000
    config.train_batch_size = 32  # global, over all hosts
    config.eval_batch_size = 32
    config.num_eval_steps = 0  # 0: the whole held-out split
    config.eval_every_steps = 1000
    config.checkpoint_every_steps = 1000
    config.checkpoints_to_keep = 2
    config.log_every_steps = 100
    # Another run's workdir to take the parameters from (phase 2), or ''.
    config.init_checkpoint = ""
    # Mesh axis sizes; one may be -1 (the remaining devices).
    config.mesh = ml_collections.ConfigDict({"data": -1, "fsdp": 1, "tensor": 1})

    config.data = get_data_config()

    # vocab_size follows config.data.vocab_size unless set on its own.
    config.model = get_model_config("tiny", config.data.get_ref("vocab_size"))
    # No dropout: a short run on a small corpus learns faster without it.
    config.model.hidden_dropout_prob = 0.0
    config.model.attention_probs_dropout_prob = 0.0

    config.optimizer = ml_collections.ConfigDict()
    config.optimizer.name = "adamw"
    config.optimizer.learning_rate = 2e-3
    config.optimizer.warmup_steps = 100
    config.optimizer.b1 = 0.9
    config.optimizer.b2 = 0.999
    config.optimizer.eps = 1e-6
    config.optimizer.weight_decay = 0.01
    config.optimizer.max_grad_norm = 1.0
    config.optimizer.num_microbatches = 1
    return config
