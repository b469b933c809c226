"""BERT-Tiny pretraining on the built-in corpus, on a laptop CPU: the run of `make demo`.

    python -m bertjax.main --config experiments/pretrain/tiny_cpu.py --workdir demo_out \
        --fill_mask_examples 5

Hardware: any CPU; 2 cores suffice. Time: 8 min 48 s on 2 cores (3,000 steps of
32 x 128 tokens at about 6 steps/s; `make demo` from a fresh clone, install
included, 10 min 52 s), plus a few seconds to learn the 4,096-entry vocabulary the
first time. Expected result (the README's, from the same run): held-out MLM
accuracy 0.167 against 0.052 for always guessing the most frequent token, NSP
accuracy 0.786 against 0.594.

The data side alone: `python -m data_pipeline.inspect_batches --config experiments/pretrain/tiny_cpu.py`.
"""

import ml_collections

from data_pipeline import config as data_config_lib


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
        ("attention_implementation", str),  # xla; cudnn (GPU) or splash (TPU): no attention dropout
        ("trim_last_layer", bool),  # last layer at the heads' positions only (the default)
        # The block (docs/modern-encoders.md); the presets are BERT's.
        ("norm_placement", str),  # post (BERT) or pre (with a final LayerNorm)
        ("use_bias", bool),  # biases of dense layers and LayerNorms
        ("feed_forward", str),  # mlp or geglu
        ("position_embedding", str),  # learned or rotary
        ("rope_theta", float),  # rotary base of global layers
        ("local_rope_theta", float),  # and of local ones
        ("global_attention_every", int),  # layer i is global when i % this == 0
        ("local_attention_window", int),  # local layers see keys up to this // 2 away
        ("pooler", str),  # tanh (BERT) or norm (dense, activation, LayerNorm)
        ("scale_output_init", bool),  # output projections start at std / sqrt(2 layers)
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
    # The devices this config is meant for: tpu, gpu, cpu or any. A run that finds
    # another kind stops before compiling (a TPU VM whose libtpu failed to load
    # would otherwise train on its CPU).
    config.platform = "any"
    # JAX's persistent compilation cache, so a restarted run does not compile
    # again: a path or gs:// URL, 'off', or '' for the one JAX_COMPILATION_CACHE_DIR
    # names, else WORKDIR/compilation_cache.
    config.compilation_cache_dir = ""
    # On SIGTERM or Ctrl-C: the longest wait for the checkpoint of the step in
    # hand (spot and preemptible VMs get 30 s between SIGTERM and the end).
    config.preemption_save_seconds = 25.0
    # Another run's workdir to take the parameters from (phase 2), or ''.
    config.init_checkpoint = ""
    # A trace of steps 'A,B' (jax.profiler) in WORKDIR/profile/, for TensorBoard's
    # profile plugin; hosts: 'first' (process 0) or 'all'. '' traces nothing.
    config.profile = ml_collections.ConfigDict({"steps": "", "hosts": "first"})
    # Warn once when the steps wait for the host pipeline more than this fraction of
    # their time (0: never); the wait is logged either way (input_wait_fraction).
    config.input_wait_warning = 0.2
    # Hooks of your own after each step, by import path: ('package.module:factory', ...),
    # each factory(session) -> bertjax.hooks.Hook (docs/pretraining.md#hooks).
    config.hooks = ()
    # Mesh axis sizes; one may be -1 (the remaining devices).
    config.mesh = ml_collections.ConfigDict({"data": -1, "fsdp": 1, "tensor": 1})

    # The pipeline's defaults (data_pipeline/config.py documents every option): the
    # built-in corpus, a learned 4,096-entry uncased WordPiece vocabulary, 128 tokens.
    config.data = data_config_lib.default_config()

    # vocab_size follows config.data.vocab_size unless set on its own.
    config.model = get_model_config("tiny", config.data.get_ref("vocab_size"))
    # No dropout: a short run on a small corpus learns faster without it.
    config.model.hidden_dropout_prob = 0.0
    config.model.attention_probs_dropout_prob = 0.0

    config.optimizer = ml_collections.ConfigDict()
    config.optimizer.name = "adamw"  # adamw, lamb or stable_adamw (StableAdamW, as ModernBERT)
    config.optimizer.learning_rate = 2e-3
    config.optimizer.warmup_steps = 100
    config.optimizer.b1 = 0.9
    config.optimizer.b2 = 0.999
    config.optimizer.eps = 1e-6
    config.optimizer.weight_decay = 0.01
    config.optimizer.max_grad_norm = 1.0
    config.optimizer.num_microbatches = 1
    # Steps in a row whose gradients are not finite that are skipped (parameters
    # unchanged) before the run stops; 0 stops it at the first.
    config.optimizer.skip_non_finite_steps = 0
    # 'linear' (BERT's: warmup, then down to 0 at the last step) or 'warmup_stable_decay'
    # (warmup, the peak held, then down to 0 over the last decay_steps in decay_shape:
    # linear, 1-sqrt as ModernBERT, or cosine). bertjax/optim.py.
    config.optimizer.schedule = "linear"
    config.optimizer.decay_steps = 0
    config.optimizer.decay_shape = "linear"
    return config


def get_hyper(hyper):
    """Peak learning rate x warmup, 6 runs of `make demo`'s length (about an hour on 2 cores
    with --parallel 2; `python -m bertjax.sweep run --config experiments/pretrain/tiny_cpu.py
    --sweep_dir runs/tiny_sweep --parallel 2`)."""
    return hyper.product(
        [
            hyper.sweep("config.optimizer.learning_rate", [1e-3, 2e-3, 4e-3]),
            hyper.sweep("config.optimizer.warmup_steps", [100, 300]),
        ]
    )
