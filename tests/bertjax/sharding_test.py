"""The same training on 8 fake CPU devices under several meshes as on one device."""

import jax
import numpy as np
import pytest
from flax import linen as nn
from support import SMALL_VOCAB_SIZE

from bertjax import model as model_lib
from bertjax import sharding, train
from data_pipeline import make_pretraining_dataset
from experiments.pretrain import tiny_cpu

STEPS = 3


def test_mesh_shape_fills_one_axis_and_checks_the_product():
    assert sharding.mesh_shape({"data": -1, "fsdp": 2, "tensor": 1}, 8) == {
        "data": 4,
        "fsdp": 2,
        "tensor": 1,
    }
    assert sharding.mesh_shape({"tensor": 2}, 2) == {"data": 1, "fsdp": 1, "tensor": 2}
    with pytest.raises(sharding.MeshError, match="multiply to 4, but there are 8 devices"):
        sharding.mesh_shape({"data": 4, "fsdp": 1, "tensor": 1}, 8)
    with pytest.raises(sharding.MeshError, match="only one axis may be -1"):
        sharding.mesh_shape({"data": -1, "fsdp": -1}, 8)
    with pytest.raises(sharding.MeshError, match="config.mesh.pipeline"):
        sharding.mesh_shape({"pipeline": 2}, 8)
    with pytest.raises(sharding.MeshError, match="do not divide"):
        sharding.mesh_shape({"data": -1, "tensor": 3}, 8)


def test_batches_and_the_tensor_axis_checked_from_sizes_alone():
    """What bertjax.tpu.launch checks of a slice it has not started."""
    shape = {"data": 4, "fsdp": 2, "tensor": 2}
    sharding.check_batch_split(16, shape, 2, option="config.train_batch_size")
    with pytest.raises(
        sharding.MeshError, match=r"=12 is not divisible by the data-parallel size 8"
    ):
        sharding.check_batch_split(12, shape, 2, option="config.train_batch_size")
    with pytest.raises(sharding.MeshError, match="=8 is not divisible by the 16 processes"):
        sharding.check_batch_split(8, {"data": 8, "fsdp": 1, "tensor": 1}, 16, option="x")
    sharding.check_tensor_within_host({"tensor": 2}, shape, 4)
    with pytest.raises(sharding.MeshError, match=r"the tensor axis \(2\) would span hosts"):
        sharding.check_tensor_within_host({"tensor": 2}, shape, 1)
    with pytest.raises(sharding.MeshError, match="must be a multiple of the 8 slices"):
        sharding.check_slices(shape, 8)


def test_rules_name_exactly_the_models_logical_axes():
    assert sorted(name for name, _ in sharding.RULES) == sorted(model_lib.LOGICAL_AXES)


@pytest.fixture(scope="module")
def setup(small_vocab_file):
    config = tiny_cpu.get_config()
    config.train_batch_size = 8
    config.eval_batch_size = 8
    # A tenth of bert-base-uncased's vocabulary: the 8-device steps compile in half the time.
    config.data.vocab_file = small_vocab_file
    config.data.vocab_size = SMALL_VOCAB_SIZE
    config.data.max_seq_length = 32
    config.data.max_predictions_per_seq = 5
    config.data.document_buffer_size = 16
    config.data.shuffle_buffer_size = 16
    config.model.hidden_size = 64
    config.model.num_attention_heads = 4
    config.model.intermediate_size = 128
    config.model.max_position_embeddings = 32
    # With dropout, so the per-device random bits must agree with one device's too.
    config.model.hidden_dropout_prob = 0.1
    config.model.attention_probs_dropout_prob = 0.1
    config.optimizer.warmup_steps = 1
    config.optimizer.learning_rate = 1e-2
    batches = list(
        make_pretraining_dataset(config.data, split="train", batch_size=8, seed=0)
        .take(STEPS)
        .as_numpy_iterator()
    )
    return config, batches


def run_steps(config, batches, mesh, devices, tmp_path):
    config = config.copy_and_resolve_references()
    config.mesh = mesh
    run = train.build_run(config, str(tmp_path), devices=devices)
    with jax.set_mesh(run.mesh), nn.logical_axis_rules(sharding.RULES):
        state = train.create_state(run)
        step, _ = train.jit_steps(run)
        losses = []
        for batch in batches:
            state, sums = step(
                state, sharding.make_global_batch(batch, run.mesh), jax.random.key(1)
            )
            losses.append(float(sums["mlm_loss_sum"]) + float(sums["nsp_loss_sum"]))
    return state, losses


@pytest.fixture(scope="module")
def one_device(setup, tmp_path_factory):
    """The reference every mesh is compared with: the same steps on one device (read only)."""
    config, batches = setup
    one = {"data": 1, "fsdp": 1, "tensor": 1}
    return run_steps(config, batches, one, jax.devices()[:1], tmp_path_factory.mktemp("one"))


@pytest.mark.integration
@pytest.mark.parametrize(
    "mesh",
    [
        {"data": 8, "fsdp": 1, "tensor": 1},
        {"data": 2, "fsdp": 2, "tensor": 2},
        {"data": 1, "fsdp": 8, "tensor": 1},
        {"data": 4, "fsdp": 1, "tensor": 2},
    ],
    ids=["data8", "data2-fsdp2-tensor2", "fsdp8", "data4-tensor2"],
)
def test_sharded_training_matches_one_device(setup, one_device, mesh, tmp_path):
    assert jax.device_count() == 8
    config, batches = setup
    reference, reference_losses = one_device
    state, losses = run_steps(config, batches, mesh, jax.devices(), tmp_path)
    np.testing.assert_allclose(losses, reference_losses, rtol=2e-5)
    jax.tree.map(
        lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-4, atol=2e-5),
        state.params,
        reference.params,
    )
    # Large parameters really are split when the mesh asks for it.
    table = state.params["bert"]["embeddings"]["word_embeddings"]["embedding"]
    shard = table.sharding.shard_shape(table.shape)
    split = mesh["fsdp"] * mesh["tensor"]
    assert shard[0] * shard[1] * split == table.shape[0] * table.shape[1]
    kernel = max(jax.tree.leaves(state.params["bert"]["encoder"]), key=lambda x: x.size)
    if split > 1:
        assert kernel.sharding.shard_shape(kernel.shape) != kernel.shape


def test_a_mesh_that_cannot_split_the_vocabulary_is_refused(setup, bert_tokenizer_json, tmp_path):
    config, _ = setup
    config = config.copy_and_resolve_references()
    config.data.vocab_file = bert_tokenizer_json
    config.data.vocab_size = config.model.vocab_size = 30522
    config.mesh = {"data": 2, "fsdp": 1, "tensor": 4}
    # 30,522 word pieces do not split 4 ways.
    with pytest.raises(
        sharding.MeshError, match="word_embeddings/embedding has a dimension of 30522"
    ):
        train.build_run(config, str(tmp_path))


def test_the_platform_a_step_is_built_for():
    # bertjax.tpu.aot traces TPU steps on this CPU: the mesh in context says what a step is for.
    assert sharding.target_platform() == "cpu"


def test_a_tpu_mesh_in_context_builds_for_tpu(tpu_mesh_in_context):
    assert sharding.target_platform() == "tpu"
