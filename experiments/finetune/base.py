"""Shared by all fine-tuning experiments: the paper's recipe (docs/reference.md#fine-tuning-recipe).

Not an experiment by itself; classify.py, glue.py, ner.py and squad.py build on
it. The paper's grid (A.3) is batch {16, 32}, learning rate {5e-5, 3e-5, 2e-5},
epochs {2, 3, 4}, dropout 0.1; these defaults (batch 32, lr 2e-5, 3 epochs) are
one point of it. The warmup over the first 10% of steps, then linear decay, is
not in the paper's grid: it is the original code's warmup_proportion=0.1
(run_classifier.py, run_squad.py).
"""

import ml_collections


def get_model_config() -> ml_collections.ConfigDict:
    """The BertConfig fields a fine-tuning run may set; None keeps the checkpoint's value."""
    model = ml_collections.ConfigDict()
    # Dropout on the head's input and inside BERT, as the paper fine-tunes.
    model.hidden_dropout_prob = 0.1
    model.attention_probs_dropout_prob = 0.1
    for field, field_type in (
        ("dtype", str),  # compute dtype: float32 or bfloat16
        ("scan_layers", bool),  # any checkpoint layout is converted
        ("remat_policy", str),  # none, full, or a jax.checkpoint_policies name
        # xla (the default, whatever the checkpoint trained with), cudnn on GPU or splash
        # on TPU; the kernels need attention_probs_dropout_prob=0 (bertjax/attention.py).
        ("attention_implementation", str),
    ):
        model[field] = ml_collections.FieldReference(None, field_type=field_type)
    return model


def get_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    # 'classification', 'tagging' or 'squad'; config.data is that kind's data config.
    config.task = ""
    config.seed = 0
    config.num_train_epochs = 3.0
    config.train_batch_size = 32  # global, over all hosts
    config.eval_batch_size = 32
    # Besides the end of every epoch and of training.
    config.checkpoint_every_steps = 0
    config.checkpoints_to_keep = 1
    config.log_every_steps = 50
    # The devices this config is meant for: tpu, gpu, cpu or any. A run that finds
    # another kind stops before compiling (a TPU VM whose libtpu failed to load
    # would otherwise train on its CPU).
    config.platform = "any"
    # JAX's persistent compilation cache, so a restarted run does not compile
    # again: a path or gs:// URL, 'off', or '' for the one JAX_COMPILATION_CACHE_DIR
    # names, else WORKDIR/compilation_cache.
    config.compilation_cache_dir = ""
    # On SIGTERM or Ctrl-C: the longest wait for the checkpoint of the step in hand.
    config.preemption_save_seconds = 25.0
    # A pretraining workdir or `python -m bertjax.convert import` output: architecture,
    # vocabulary, tokenizer settings and the parameters of bert/.
    config.init_checkpoint = ""
    # Use init_checkpoint's architecture and vocabulary but not its parameters
    # (the from-scratch baseline that shows what pretraining brings).
    config.random_init = False
    # A trace of steps 'A,B' (jax.profiler) in WORKDIR/profile/, for TensorBoard's
    # profile plugin; hosts: 'first' (process 0) or 'all'. '' traces nothing.
    config.profile = ml_collections.ConfigDict({"steps": "", "hosts": "first"})
    # Warn once when the steps wait for the host pipeline more than this fraction of
    # their time (0: never); the wait is logged either way (input_wait_fraction).
    config.input_wait_warning = 0.2
    # Hooks of your own after each step, by import path: ('package.module:factory', ...),
    # each factory(session) -> bertjax.hooks.Hook (docs/pretraining.md#hooks).
    config.hooks = ()
    config.mesh = ml_collections.ConfigDict({"data": -1, "fsdp": 1, "tensor": 1})
    config.model = get_model_config()

    config.optimizer = ml_collections.ConfigDict()
    config.optimizer.name = "adamw"  # adamw, lamb or stable_adamw (StableAdamW, as ModernBERT)
    config.optimizer.learning_rate = 2e-5
    # Linear warmup over this share of the steps, then linear decay to 0
    # (run_classifier.py's and run_squad.py's warmup_proportion).
    config.optimizer.warmup_proportion = 0.1
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
