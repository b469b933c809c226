"""experiments/pretrain/*.py: every config loads, passes the trainer's checks, and documents itself.

Nothing here reads data or touches the network: the placeholder paths of the
TPU configs are replaced by the released vocab and a local directory where the
trainer's own checks need a file.
"""

import dataclasses
import importlib
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn
from support import REPO

from bertjax import model as model_lib
from bertjax import optim, sharding, train
from bertjax import workdir as workdir_lib
from bertjax.convert import config_json
from bertjax.tasks import pretraining
from bertjax.tpu import slices
from data_pipeline import config as data_config_lib

CONFIG_DIR = REPO / "experiments" / "pretrain"
NAMES = sorted(p.stem for p in CONFIG_DIR.glob("*.py") if p.stem != "__init__")
PHASE2_NAMES = [name for name in NAMES if name.endswith("_phase2") and name.startswith("bert_")]
MODERN_NAMES = [name for name in NAMES if name.startswith("modernbert_")]

# docs/reference.md#model-sizes: (L, H, A, intermediate) and the published encoder
# parameter count (embeddings and pooler included, vocab 30,522, 512 positions).
PUBLISHED = {
    "base": ((12, 768, 12, 3072), 109_482_240),
    "large": ((24, 1024, 16, 4096), 335_141_888),
}
TURC_SIZES = {
    "tiny": (2, 128, 2, 512),
    "mini": (4, 256, 4, 1024),
    "small": (4, 512, 8, 2048),
    "medium": (8, 512, 8, 2048),
}


def load(name: str):
    return importlib.import_module(f"experiments.pretrain.{name}")


def test_the_configs_are_found():
    assert {"tiny_cpu", "bert_base", "bert_base_phase2", "bert_large", "bert_large_phase2"} <= set(
        NAMES
    )


@pytest.mark.parametrize("name", NAMES)
def test_config_passes_every_check(name):
    config = load(name).get_config()
    pretraining.check_config(config)
    model_config = model_lib.from_config(config.model)
    data = data_config_lib.from_config(config.data)
    optimizer = optim.from_config(config.optimizer)

    data_config_lib.check_max_positions(data, model_config.max_position_embeddings)
    assert data.max_seq_length <= model_config.max_position_embeddings
    assert config.train_batch_size % optimizer.num_microbatches == 0
    assert optimizer.warmup_steps <= config.num_train_steps
    optim.learning_rate_schedule(optimizer, config.num_train_steps)
    if data.vocab_file == "":
        # A learned vocabulary: the model follows its size.
        assert model_config.vocab_size == data.vocab_size
    for key in ("eval_every_steps", "checkpoint_every_steps", "log_every_steps"):
        assert config[key] <= config.num_train_steps, key


# Devices of the hardware each docstring names (v4: one device per chip; v3: per
# core); every config must also run on one device and on the tests' eight.
DEVICE_COUNTS = {
    "bert_base": (16, 32),  # v4-32, or v3-32
    "bert_large": (64, 128),  # v4-128, or v3-128
    "bert_small": (4,),  # v4-8
    "bert_mini": (4,),  # v4-8
    "modernbert_base": (64,),  # v5p-128
    "modernbert_large": (64,),  # v5p-128
}


def device_counts(name: str):
    return sorted({1, 8, *DEVICE_COUNTS.get(name.removesuffix("_phase2"), ())})


@pytest.mark.parametrize(
    "name, device_count", [(name, n) for name in NAMES for n in device_counts(name)]
)
def test_batches_split_over_the_mesh(name, device_count):
    config = load(name).get_config()
    shape = sharding.mesh_shape(config.mesh, device_count)
    parallel = shape["data"] * shape["fsdp"]
    microbatch = config.train_batch_size // config.optimizer.num_microbatches
    for size in (config.train_batch_size, config.eval_batch_size, microbatch):
        assert size % parallel == 0


@pytest.mark.parametrize("name", NAMES)
def test_docstring_opens_with_the_command_and_the_hardware(name):
    doc = load(name).__doc__
    assert doc, f"{name}.py has no docstring"
    lines = [line.strip() for line in doc.strip().splitlines()]
    # A one-line title, a blank line, then the command.
    assert lines[1] == ""
    assert lines[2].startswith("python -m "), lines[2]
    assert f"--config experiments/pretrain/{name}.py" in lines[2]
    assert "Hardware:" in doc
    assert "Expected" in doc


@pytest.mark.parametrize("name", PHASE2_NAMES)
def test_phase2_continues_phase1_at_length_512(name):
    config = load(name).get_config()
    phase1 = load(name.removesuffix("_phase2")).get_config()
    assert config.init_checkpoint
    assert config.data.max_seq_length == 512
    assert 76 <= config.data.max_predictions_per_seq <= 80
    assert phase1.init_checkpoint == ""
    assert phase1.data.max_seq_length == 128
    assert phase1.data.max_predictions_per_seq == 20
    # The paper's 1,000,000 steps, 90% at length 128.
    assert phase1.num_train_steps + config.num_train_steps == 1_000_000
    assert config.num_train_steps == 100_000
    # Parameters carry over only between equal shapes.
    assert model_lib.from_config(config.model) == model_lib.from_config(phase1.model)
    assert config.data.vocab_file == phase1.data.vocab_file


@pytest.mark.parametrize("name", ["bert_base", "bert_large"])
def test_phase1_is_the_paper_recipe(name):
    config = load(name).get_config()
    assert config.train_batch_size == 256
    assert config.num_train_steps == 900_000
    assert config.data.vocab_size == 30522
    assert config.data.do_lower_case
    assert config.model.dtype == "bfloat16"
    assert optim.from_config(config.optimizer) == optim.OptimizerConfig(
        name="adamw",
        learning_rate=1e-4,
        warmup_steps=10_000,
        b1=0.9,
        b2=0.999,
        eps=1e-6,
        weight_decay=0.01,
        max_grad_norm=1.0,
        num_microbatches=1,
        skip_non_finite_steps=0,
    )


def size_of(model_config):
    return (
        model_config.num_hidden_layers,
        model_config.hidden_size,
        model_config.num_attention_heads,
        model_config.intermediate_size,
    )


@pytest.mark.parametrize("name", NAMES)
def test_preset_resolves_to_its_published_size(name):
    config = load(name).get_config()
    model_config = model_lib.from_config(config.model)
    preset = config.model.preset
    expected = PUBLISHED[preset][0] if preset in PUBLISHED else TURC_SIZES[preset]
    if name.startswith("modernbert_"):
        expected = MODERN_SIZES[name.removesuffix("_phase2")]
    assert size_of(model_config) == expected


@pytest.mark.parametrize("name", ["bert_base", "bert_large"])
def test_encoder_parameter_count_is_published(name):
    config = load(name).get_config()
    model_config = model_lib.from_config(config.model)
    ids = jnp.zeros((1, 8), jnp.int32)
    shapes = jax.eval_shape(
        lambda: model_lib.BertModel(model_config).init(
            jax.random.key(0), ids, ids, ids, deterministic=True
        )
    )["params"]
    count = sum(math.prod(x.shape) for x in jax.tree.leaves(nn.unbox(shapes)))
    assert count == PUBLISHED[config.model.preset][1]
    assert np.dtype(model_config.param_dtype) == np.float32


@pytest.mark.parametrize("name", NAMES)
def test_platform(name):
    # The paper's configs are for TPUs; a TPU VM whose TPU did not start must not train on CPU.
    expected = "any" if name.endswith("tiny_cpu") else "tpu"
    assert load(name).get_config().platform == expected


@pytest.mark.parametrize("name", [name for name in NAMES if not name.endswith("tiny_cpu")])
def test_trainer_builds_the_run(name, bert_tokenizer_json, tmp_path):
    """build_run's every check (platform, vocab size, mesh, shardings) on the 8 chips of a
    v5e-8 (the TPU compiler's devices, no TPU needed); compiles nothing.

    A phase-2 config's init_checkpoint becomes a directory holding its phase 1's
    model config, so the trainer's same-shapes check runs too.
    """
    config = load(name).get_config()
    # ModernBERT's configs read a BPE tokenizer.json; its vocabulary is not what is built here.
    config.data.tokenizer = "wordpiece"
    config.data.vocab_file = bert_tokenizer_json
    config.data.vocab_size = 30522
    if config.init_checkpoint:
        phase1 = load(name.removesuffix("_phase2")).get_config()
        phase1.data.tokenizer = "wordpiece"
        phase1.data.vocab_size = 30522
        init_dir = tmp_path / "phase1"
        workdir_lib.write_run_description(
            str(init_dir),
            phase1,
            model_lib.from_config(phase1.model),
            bert_tokenizer_json,
            kind=pretraining.TASK.name,
            description=pretraining.describe(phase1.data).to_json(),
        )
        config.init_checkpoint = str(init_dir)
    devices = slices.parse("v5e-8").compile_devices()
    run = train.build_run(config, str(tmp_path / "workdir"), devices=devices)
    assert run.mesh.devices.size == 8
    assert run.setup.model.config.vocab_size == 30522
    assert run.setup.model.inputs["input_ids"] == config.data.max_seq_length


def test_the_model_config_lists_every_bertconfig_field():
    # A locked config takes --config.model.FIELD=VALUE only for the fields it lists.
    from experiments.pretrain import tiny_cpu

    listed = set(tiny_cpu.get_model_config("tiny", 100)) - {"preset"}
    assert listed == {f.name for f in dataclasses.fields(model_lib.BertConfig)}


# Warner et al. 2024, Table 4: (layers, hidden, heads, intermediate), GeGLU's half of Wi.
MODERN_SIZES = {
    "modernbert_base": (22, 768, 12, 1152),
    "modernbert_large": (28, 1024, 16, 2624),
    "modernbert_tiny_cpu": (4, 128, 2, 256),
}


@pytest.mark.parametrize("name", MODERN_NAMES)
def test_modern_configs_are_modernberts_block_and_objective(name):
    config = load(name).get_config()
    model_config = model_lib.from_config(config.model)
    assert config_json.hf_family(model_config) == "modernbert"
    assert (model_config.global_attention_every, model_config.local_attention_window) == (
        3,
        128,
    ) or (name.endswith("tiny_cpu"))
    data = data_config_lib.from_config(config.data)
    assert not data.next_sentence_prediction
    assert (data.masked_lm_prob, data.masking_rate("eval")) == (0.3, 0.15)
    assert data.pack_examples
    optimizer = optim.from_config(config.optimizer)
    assert (optimizer.name, optimizer.schedule, optimizer.decay_shape) == (
        "stable_adamw",
        "warmup_stable_decay",
        "1-sqrt",
    )
    if name in ("modernbert_base", "modernbert_large"):
        # Phase 1: 1,719 billion tokens at length 1,024, the global RoPE base 10,000, no decay.
        tokens = config.num_train_steps * config.train_batch_size * data.max_seq_length
        assert abs(tokens - 1.719e12) / 1.719e12 < 1e-3
        assert model_config.rope_theta == 10_000.0 and optimizer.decay_steps == 0
        # The paper's weight decay of 1e-5 per step at the peak rate.
        assert optimizer.weight_decay * optimizer.learning_rate == pytest.approx(1e-5)
        assert optimizer.learning_rate == {"modernbert_base": 8e-4, "modernbert_large": 5e-4}[name]
    if name.endswith("_phase2"):
        # Phases 2 and 3: 300 billion tokens at 8,192, the last 50 billion decaying.
        assert data.max_seq_length == 8192 and model_config.rope_theta == 160_000.0
        assert model_config.local_rope_theta == 10_000.0
        steps_tokens = config.train_batch_size * data.max_seq_length
        assert abs(config.num_train_steps * steps_tokens - 3e11) / 3e11 < 1e-3
        assert abs(optimizer.decay_steps * steps_tokens - 5e10) / 5e10 < 1e-3
        assert optimizer.warmup_steps == 0 and config.init_checkpoint
        phase1 = load(name.removesuffix("_phase2")).get_config()
        assert model_lib.from_config(config.model) == dataclasses.replace(
            model_lib.from_config(phase1.model), rope_theta=160_000.0
        )
