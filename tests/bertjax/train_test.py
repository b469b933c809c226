"""The pretraining loop end to end: learning, exact resume, phase 2, accumulation, bad configs."""

import copy
import functools
import json
import os
import re
import shutil

import jax
import numpy as np
import pytest

from bertjax import checkpoint, goodput, sharding, train
from bertjax.tasks import pretraining
from data_pipeline import config as data_config_lib
from data_pipeline import make_pretraining_dataset, pretraining_input, streams

pytestmark = pytest.mark.integration

# The loop is tested here, sharding in sharding_test.py and multihost_test.py: these runs
# use one device (on 2 cores, conftest's 8 fake devices' collectives cost twice the CPU
# time), except test_resume_continues_exactly, which resumes a run sharded over two.
ONE_DEVICE = jax.devices()[:1]
TWO_DEVICES = jax.devices()[:2]


@pytest.fixture
def config(make_small_config):
    return make_small_config()


@pytest.fixture(scope="module")
def finished_run(make_small_config, tmp_path_factory) -> str:
    """The workdir of make_small_config's 8 steps on one device, to the end, without
    evaluation (its tests read none) and with the last step's checkpoint alone: read it
    only."""
    config = make_small_config()
    config.eval_every_steps = config.checkpoint_every_steps = 0
    workdir = str(tmp_path_factory.mktemp("finished"))
    train.train_and_evaluate(config, workdir, devices=ONE_DEVICE)
    return workdir


@pytest.fixture(scope="module")
def paused_run(make_small_config, tmp_path_factory) -> str:
    """The workdir of make_small_config's run on one device stopped after step 4, as a
    preempted one (its checkpoint, that step's), without evaluation (its tests read
    none): copy it (copied_to) to resume it."""
    config = make_small_config()
    config.eval_every_steps = config.checkpoint_every_steps = 0
    workdir = str(tmp_path_factory.mktemp("paused"))
    train.train_and_evaluate(config, workdir, stop_after=4, devices=ONE_DEVICE)
    return workdir


def copied_to(folder, workdir: str) -> str:
    shutil.copytree(workdir, folder, ignore=shutil.ignore_patterns(".lock"), dirs_exist_ok=True)
    return str(folder)


def read_metrics(workdir):
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def final_params(workdir, config):
    run = train.build_run(config, workdir, devices=ONE_DEVICE)
    manager = checkpoint.make_manager(workdir, max_to_keep=5)
    state, _ = checkpoint.restore(manager, manager.latest_step(), run.abstract_state)
    manager.close()
    return jax.tree.map(np.asarray, state.params)


def test_resume_continues_exactly(tmp_path, config, caplog, monkeypatch):
    pipelines = []  # the input pipelines each run makes, by split

    def counted(data_config, split, **kwargs):
        pipelines.append(split)
        return make_pretraining_dataset(data_config, split=split, **kwargs)

    monkeypatch.setattr(pretraining, "make_pretraining_dataset", counted)
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    train.train_and_evaluate(config, straight, devices=TWO_DEVICES)
    # Two evaluations (steps 4 and 8) and the eval-split check read one eval pipeline.
    assert sorted(pipelines) == ["eval", "train"]
    # As a task whose stream records no positions: the resumed run replays the stream.
    with monkeypatch.context() as patch:
        patch.setattr(train, "_gather_positions", lambda position, how: None)
        train.train_and_evaluate(config, resumed, stop_after=4, devices=TWO_DEVICES)
    assert checkpoint.latest_step(resumed) == 4
    train.train_and_evaluate(config, resumed, devices=TWO_DEVICES)
    assert "the checkpoint of step 4 has no input positions" in caplog.text

    a, b = final_params(straight, config), final_params(resumed, config)
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(x, y), a, b)
    lines_a = [m for m in read_metrics(straight) if m["split"] == "train"]
    lines_b = [m for m in read_metrics(resumed) if m["split"] == "train"]
    assert [m["step"] for m in lines_a] == [m["step"] for m in lines_b] == [2, 4, 6, 8]
    for x, y in zip(lines_a, lines_b, strict=True):
        for key in (
            "loss",
            "mlm_loss",
            "mlm_accuracy",
            "nsp_loss",
            "nsp_accuracy",
            "learning_rate",
        ):
            assert x[key] == y[key], (x["step"], key)
    evals = [m for m in read_metrics(straight) if m["split"] == "eval"]
    assert [m["step"] for m in evals] == [4, 8]
    # The workdir describes the run on its own.
    for name in ("config.json", "model_config.json", "vocab.txt"):
        assert os.path.exists(os.path.join(straight, name))


def test_a_packed_run_resumes_exactly(tmp_path, config):
    # Rows of up to 3 sentence pairs; the checkpoint's stream position counts rows.
    config.data.pack_examples = True
    config.data.short_seq_prob = 1.0  # pairs short enough to share rows
    config.num_train_steps = 4
    config.eval_every_steps = 0
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    train.train_and_evaluate(config, straight, devices=ONE_DEVICE)
    train.train_and_evaluate(config, resumed, stop_after=2, devices=ONE_DEVICE)
    train.train_and_evaluate(config, resumed, devices=ONE_DEVICE)
    # The first process stopped where it was asked, before the run's last step.
    stops = [e["reason"] for e in goodput.read_events(resumed) if e["event"] == "stop"]
    assert stops == ["paused", "done"]
    a, b = final_params(straight, config), final_params(resumed, config)
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(x, y), a, b)
    lines_a, lines_b = read_metrics(straight), read_metrics(resumed)
    assert [(m["step"], m["split"], m["loss"]) for m in lines_a] == [
        (m["step"], m["split"], m["loss"]) for m in lines_b
    ]
    assert [m["step"] for m in lines_a] == [2, 4]


def test_a_resume_refuses_positions_that_mean_something_else(
    tmp_path, config, monkeypatch, paused_run
):
    # A checkpoint keeps its stream positions with their format version, the names of
    # their fields and the config the streams were made from: positions that mean
    # something else stop the run in one line, before it trains, never read as they were.
    config.eval_every_steps = 0
    workdir = copied_to(tmp_path, paused_run)
    fields = pretraining_input.POSITION_FIELDS
    counts = f"count ({', '.join(fields)}), this run's stream counts"
    edited = copy.deepcopy(config)
    edited.data.document_buffer_size = 16  # config.json edited too: the same-run check passes
    changes = [
        ((pretraining_input, "POSITION_FIELDS", (*fields[:-1], "rows")), config, counts),
        ((pretraining_input, "POSITION_FIELDS", (*fields, "packed_rows")), config, counts),
        ((streams, "POSITIONS_VERSION", 3), config, "are of format 2, this bertjax reads format 3"),
        (None, edited, "config.data.document_buffer_size=32, this run's with 16"),
    ]
    saved = tmp_path / "config.json"
    original = saved.read_text()
    for patch, run_config, message in changes:
        saved.write_text(run_config.to_json_best_effort())
        with monkeypatch.context() as m:
            if patch:
                m.setattr(*patch)
            with pytest.raises(streams.PositionError) as refused:
                train.train_and_evaluate(run_config, workdir, devices=ONE_DEVICE)
        line = str(refused.value)
        assert line.startswith(f"{workdir}: checkpoint 4: its stream positions "), line
        assert message in line and "\n" not in line, line
    saved.write_text(original)
    # Nothing trained, nothing moved aside: the run goes on as it would have.
    assert checkpoint.latest_step(workdir) == 4
    assert not (tmp_path / "damaged_checkpoints").exists()
    train.train_and_evaluate(config, workdir, devices=ONE_DEVICE)
    assert [m["step"] for m in read_metrics(workdir) if m["split"] == "train"] == [2, 4, 6, 8]


def test_a_resume_refuses_positions_into_files_that_changed(tmp_path, config):
    # A text position is a file's index in the sorted glob and an offset in it: a file
    # added under the same glob (or one grown) would resume at another place, unsaid.
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("a", "c"):
        documents = (
            f"Document {d} of {name} begins here.\nIt has a second sentence.\n" for d in range(40)
        )
        (corpus / f"{name}.txt").write_text("\n".join(documents))
    config.data.source, config.data.text_files = "text", str(corpus / "*.txt")
    config.eval_every_steps = 0
    workdir = str(tmp_path / "run")
    train.train_and_evaluate(config, workdir, stop_after=2, devices=ONE_DEVICE)
    (corpus / "b.txt").write_text("A new document.\nIt sorts between the others.\n")
    with pytest.raises(streams.PositionError) as refused:
        train.train_and_evaluate(config, workdir, devices=ONE_DEVICE)
    line = str(refused.value)
    assert line.startswith(f"{workdir}: checkpoint 2: its stream positions are of streams over ")
    assert "over 2 files" in line and "this run's over 3" in line and "\n" not in line
    (corpus / "b.txt").unlink()
    train.train_and_evaluate(config, workdir, devices=ONE_DEVICE)  # as it was: it resumes
    assert [m["step"] for m in read_metrics(workdir) if m["split"] == "train"] == [2, 4, 6, 8]


def test_loss_goes_down(tmp_path, config):
    config.num_train_steps = 20  # the loss falls by about 1.9 (by 2.5 in 40 steps)
    config.log_every_steps = 5
    config.eval_every_steps = 0
    config.checkpoint_every_steps = 0  # the last step's alone (a save takes a second)
    config.optimizer.learning_rate = 3e-3
    config.optimizer.warmup_steps = 5
    train.train_and_evaluate(config, str(tmp_path), devices=ONE_DEVICE)
    losses = [m["loss"] for m in read_metrics(str(tmp_path)) if m["split"] == "train"]
    assert losses[-1] < losses[0] - 1.0


def test_gradient_accumulation_equals_the_full_batch(config, tmp_path):
    # Without dropout, two microbatches of 4 give the update of one batch of 8.
    config.model.hidden_dropout_prob = 0.0
    config.model.attention_probs_dropout_prob = 0.0
    results = []
    for microbatches in (1, 2):
        config.optimizer.num_microbatches = microbatches
        run = train.build_run(config, str(tmp_path / f"m{microbatches}"), devices=ONE_DEVICE)
        with jax.set_mesh(run.mesh):
            state = train.create_state(run)
            step, _ = train.jit_steps(run)
            batches = run.setup.data.train(batch_size=8, process_index=0, process_count=1, seed=0)
            for host_batch in batches.take(2).as_numpy_iterator():
                state, sums = step(
                    state, sharding.make_global_batch(host_batch, run.mesh), jax.random.key(0)
                )
            results.append((jax.tree.map(np.asarray, state.params), float(sums["mlm_loss_sum"])))
    (p1, loss1), (p2, loss2) = results
    assert loss1 == pytest.approx(loss2, rel=1e-5)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=2e-4, atol=2e-6), p1, p2)


def test_phase_two_starts_from_another_runs_parameters(tmp_path, config, finished_run):
    phase1 = finished_run
    config.init_checkpoint = phase1
    config.num_train_steps = 2
    config.log_every_steps = 1
    config.eval_every_steps = 0
    config.optimizer.warmup_steps = 1
    run = train.build_run(config, str(tmp_path / "phase2"), devices=ONE_DEVICE)
    with jax.set_mesh(run.mesh):
        state = train.create_state(run)
    expected = final_params(phase1, config)
    jax.tree.map(
        lambda x, y: np.testing.assert_array_equal(np.asarray(x), y), state.params, expected
    )
    assert int(state.step) == 0


@pytest.mark.parametrize(
    "change,error,match",
    [
        ({"unknown_key": 1}, data_config_lib.ConfigError, "config.unknown_key"),
        ({"data.max_seq_length": 128}, data_config_lib.ConfigError, "max_position_embeddings"),
        ({"model.vocab_size": 1000}, data_config_lib.ConfigError, "config.model.vocab_size"),
        ({"train_batch_size": 12}, sharding.MeshError, "config.train_batch_size=12"),
        ({"mesh.data": 3}, sharding.MeshError, "config.mesh"),
        ({"model.hidden_sizes": 3}, ValueError, "config.model.hidden_sizes"),
        ({"optimizer.beta1": 0.9}, data_config_lib.ConfigError, "config.optimizer.beta1"),
    ],
)
def test_bad_config_is_refused_before_compiling(tmp_path, config, change, error, match):
    [(key, value)] = change.items()
    target = config
    *parents, leaf = key.split(".")
    for parent in parents:
        target = target[parent]
    with target.ignore_type():
        target.unlock()
        target[leaf] = value
    with pytest.raises(error, match=match):
        train.build_run(config, str(tmp_path))


def test_workdir_of_another_model_is_refused(config, finished_run):
    config.model.hidden_size = 32
    with pytest.raises(checkpoint.CheckpointError, match="hidden_size"):
        train.build_run(config, finished_run, devices=ONE_DEVICE)


def test_non_finite_loss_stops_without_a_checkpoint(tmp_path, config):
    config.eval_every_steps = 0  # not read: no check of the eval split before the steps
    config.optimizer.learning_rate = 1e30
    config.optimizer.max_grad_norm = 0.0
    config.num_train_steps = 6
    with pytest.raises(train.TrainingError, match="non-finite loss .* step"):
        train.train_and_evaluate(config, str(tmp_path), devices=ONE_DEVICE)
    assert checkpoint.latest_step(str(tmp_path)) in (None, 0)


def test_multi_host_eval_needs_a_fixed_number_of_steps(tmp_path, config, monkeypatch):
    # A second host cannot exist here; only its count matters to this check.
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    config.num_eval_steps = 0
    with pytest.raises(data_config_lib.ConfigError, match="config.num_eval_steps=0"):
        train.build_run(config, str(tmp_path))


def _changed(config, key: str, value):
    changed = copy.deepcopy(config)
    *parents, leaf = key.split(".")
    target = changed
    for parent in parents:
        target = target[parent]
    target[leaf] = value
    return changed


def test_a_resume_must_be_the_same_run(tmp_path, config, paused_run):
    # As the paused run: no evaluation is read here, nor a checkpoint before the last.
    config.eval_every_steps = config.checkpoint_every_steps = 0
    workdir = copied_to(tmp_path, paused_run)
    for key, value, shown in [
        ("seed", 1, "seed 0 -> 1"),
        ("data.max_seq_length", 32, "data.max_seq_length 64 -> 32"),
        ("num_train_steps", 6, "num_train_steps 8 -> 6"),
    ]:
        with pytest.raises(checkpoint.CheckpointError, match=re.escape(shown)):
            train.train_and_evaluate(_changed(config, key, value), workdir, devices=ONE_DEVICE)

    # Without the saved config, nothing can tell the same run: refused, whatever it asks.
    os.rename(tmp_path / "config.json", tmp_path / "saved.json")
    with pytest.raises(checkpoint.CheckpointError, match="config.json: missing, though"):
        train.train_and_evaluate(
            _changed(config, "num_train_steps", 2), workdir, devices=ONE_DEVICE
        )
    os.rename(tmp_path / "saved.json", tmp_path / "config.json")

    # Longer, logging at another cadence, with worker processes: the same run goes on.
    longer = _changed(_changed(config, "num_train_steps", 10), "log_every_steps", 5)
    longer = _changed(longer, "data.num_workers", 1)
    train.train_and_evaluate(longer, workdir, devices=ONE_DEVICE)
    assert checkpoint.latest_step(workdir) == 10
    assert [m["step"] for m in read_metrics(workdir) if m["split"] == "train"] == [2, 4, 5, 10]

    # A step folder that is not a checkpoint (a save or a deletion cut short) is moved
    # aside, never deleted, by the run that holds the workdir.
    stray = tmp_path / "checkpoints" / "999"
    stray.mkdir()
    (stray / "partial").write_text("x")
    train.train_and_evaluate(longer, workdir, devices=ONE_DEVICE)
    assert not stray.exists()
    assert (tmp_path / "damaged_checkpoints" / "999" / "partial").read_text() == "x"
    assert checkpoint.latest_step(workdir) == 10


def test_non_finite_hyperparameters_are_refused(tmp_path, config):
    config.optimizer.learning_rate = float("inf")
    with pytest.raises(data_config_lib.ConfigError, match="learning_rate=inf: must be a finite"):
        train.train_and_evaluate(config, str(tmp_path), devices=ONE_DEVICE)
    config.optimizer.learning_rate = 1e-3
    config.data.masked_lm_prob = float("nan")
    with pytest.raises(data_config_lib.ConfigError, match="masked_lm_prob=nan: must be a finite"):
        train.train_and_evaluate(config, str(tmp_path), devices=ONE_DEVICE)


def test_non_finite_parameters_are_never_saved(tmp_path, config):
    # Finite as a Python float, infinite as the float32 the update is computed in:
    # the loss of step 1 (before the update) is finite, the parameters after it are not.
    config.eval_every_steps = 0  # not read: no check of the eval split before the step
    config.optimizer.learning_rate = 3.5e38
    config.optimizer.warmup_steps = 0
    config.optimizer.max_grad_norm = 0.0
    config.num_train_steps = 1
    with pytest.raises(train.TrainingError, match="non-finite parameters after step 1; not saved"):
        train.train_and_evaluate(config, str(tmp_path), devices=ONE_DEVICE)
    assert checkpoint.latest_step(str(tmp_path)) is None


def test_an_eval_split_too_small_for_one_batch_fails_before_the_first_step(tmp_path, config):
    config.eval_batch_size = 8192
    with pytest.raises(data_config_lib.ConfigError, match="eval split gives no batch of"):
        train.train_and_evaluate(config, str(tmp_path), devices=ONE_DEVICE)
    assert not (tmp_path / "metrics.jsonl").exists()


# ModernBERT's block (docs/modern-encoders.md): layer 0 global, layer 1 local.
MODERN_BLOCK = dict(
    norm_placement="pre", use_bias=False, feed_forward="geglu", position_embedding="rotary",
    local_rope_theta=500.0, type_vocab_size=0, pooler="norm", global_attention_every=2,
    local_attention_window=6,
)  # fmt: skip


def embedder_step(block: dict, rows: int = 16, passage_length: int = 8):
    """A small embedder's (forward, loss_of_outputs, params, batch) on `rows` random
    pairs, a positive and a hard negative each."""
    from bertjax import losses
    from bertjax.embedding import BertForEmbedding, Pooling
    from bertjax.model import BertConfig

    sizes = dict(
        vocab_size=61, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=48, max_position_embeddings=40, type_vocab_size=2,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    config = BertConfig.from_dict({**sizes, **block})
    module = BertForEmbedding(config, Pooling(normalize=True), passages=2)
    rng = np.random.default_rng(0)
    batch = {
        "query_ids": rng.integers(1, 61, (rows, 6), dtype=np.int32),
        "query_mask": np.ones((rows, 6), np.int32),
        "passage_ids": rng.integers(1, 61, (rows, 2 * passage_length), dtype=np.int32),
        "passage_mask": np.ones((rows, 2 * passage_length), np.int32),
        "query_key": np.arange(rows, dtype=np.int32),
        "passage_keys": np.arange(2 * rows, dtype=np.int32).reshape(rows, 2),
        "example_weight": np.ones(rows, np.float32),
    }
    names = ("query_ids", "query_mask", "passage_ids", "passage_mask")
    # Compiled, from one row (op by op, 256 pairs took 5 s of CPU): the parameters' shapes
    # do not depend on the batch's.
    init = jax.jit(functools.partial(module.init, deterministic=True))
    params = init(jax.random.key(0), *(batch[n][:1] for n in names))["params"]

    def forward(params, microbatch, dropout_rng):
        inputs = (microbatch[n] for n in names)
        return module.apply(
            {"params": params}, *inputs, deterministic=False, rngs={"dropout": dropout_rng}
        )

    def loss_of_outputs(outputs, microbatch):
        sums = losses.in_batch_negatives_sums(outputs, microbatch, scale=20.0)
        return sums["loss_sum"] / rows, sums

    return forward, loss_of_outputs, params, batch


# BERT's layers are all alike: one compiles in 60% of the time of two. ModernBERT's
# alternate (layer 0 global, without its attention norm; layer 1 local): two.
@pytest.mark.parametrize(
    "block", [{"num_hidden_layers": 1}, MODERN_BLOCK], ids=["bert", "modernbert"]
)
def test_cached_gradients_of_a_whole_batch_loss_are_the_whole_batchs(block):
    # GradCache: four microbatches give the gradient of the in-batch negatives loss over
    # all 16 pairs, not the sum of four losses over 4 pairs each; for both blocks.
    forward, loss_of_outputs, params, batch = embedder_step(block)

    def loss(params, batch, rng):
        return loss_of_outputs(forward(params, batch, rng), batch)

    def gradients(params, batch, key):  # one program: a quarter less CPU than three
        whole = jax.grad(lambda p: loss(p, batch, key)[0])(params)
        cached, sums = train.cached_gradients(forward, loss_of_outputs, params, batch, key, 4)
        separate, _ = train.accumulate_gradients(loss, params, batch, key, 4)
        return whole, cached, sums, separate

    whole, cached, sums, separate = jax.jit(gradients)(params, batch, jax.random.key(1))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5), cached, whole)
    assert float(sums["weight"]) == 16
    differences = jax.tree.leaves(
        jax.tree.map(lambda a, b: float(abs(a - b).max()), separate, whole)
    )
    assert max(differences) > 1e-3


def test_cached_gradients_keep_one_microbatchs_activations_alive():
    # The point of GradCache: compiled for 256 pairs, 8 microbatches need a fraction of
    # the temporaries of one (XLA's own count, on this CPU), the gradient the same.
    # One layer, as above: a microbatch's activations against the whole batch's are counted.
    one_layer = {"num_hidden_layers": 1}
    forward, loss_of_outputs, params, batch = embedder_step(one_layer, rows=256, passage_length=32)
    key = jax.random.key(1)
    temporaries = {}
    for microbatches in (1, 8):
        if microbatches == 1:

            def step(params, batch, rng):
                def loss(p):
                    return loss_of_outputs(forward(p, batch, rng), batch)

                return jax.grad(loss, has_aux=True)(params)
        else:
            step = functools.partial(
                train.cached_gradients, forward, loss_of_outputs, num_microbatches=microbatches
            )
        compiled = jax.jit(step).lower(params, batch, key).compile()
        temporaries[microbatches] = compiled.memory_analysis().temp_size_in_bytes
    assert temporaries[8] < temporaries[1] / 3


def test_every_microbatch_is_spread_over_all_the_data_parallel_devices():
    # A batch sharded over 8 devices in blocks of rows: each of its 4 microbatches keeps
    # 2 rows on every device (contiguous pieces would put each on 2 devices, the other 6
    # idle), and joining them gives back the batch in its order.
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
    batch = jax.device_put(
        np.arange(64, dtype=np.int32).reshape(64, 1), NamedSharding(mesh, PartitionSpec("data"))
    )
    pieces = jax.jit(train.split_microbatches, static_argnums=1)(batch, 4)
    assert pieces.shape == (4, 16, 1)
    for m in range(4):
        piece = pieces[m]
        rows_on_device = {s.device: np.asarray(s.data).ravel() for s in piece.addressable_shards}
        assert len(rows_on_device) == 8
        for rows in rows_on_device.values():
            assert len(rows) == 2 and np.all(rows % 4 == m)
    np.testing.assert_array_equal(train.join_microbatches(pieces), np.asarray(batch))
