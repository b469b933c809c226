"""Embedding distillation: the losses against their definitions, the teacher in the step
against its outputs given with the batch, a teacher that never changes, and the
refusals of a teacher that cannot teach."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support import init_workdir
from support.beir_files import write_beir

from bertjax import flops, losses, train
from bertjax import workdir as workdir_lib
from bertjax.convert import shrink
from bertjax.tasks import retrieval
from data_pipeline.errors import ConfigError
from experiments.distill import minilm_l3


def batch_of(rows: int, width: int, *, padding: int = 0) -> dict:
    """Distinct texts, the last `padding` rows padding."""
    weights = np.ones(rows, np.float32)
    weights[rows - padding :] = 0
    return {
        "query_key": jnp.arange(rows),
        "passage_keys": jnp.arange(rows * width).reshape(rows, width) + 100,
        "example_weight": jnp.asarray(weights),
    }


def vectors(seed: int, rows: int, width: int, dim: int):
    rng = np.random.default_rng(seed)
    return (
        jnp.asarray(rng.normal(size=(rows, dim)), jnp.float32),
        jnp.asarray(rng.normal(size=(rows, width, dim)), jnp.float32),
    )


def test_mse_is_the_mean_squared_difference_over_every_text():
    student, teacher = vectors(0, 4, 2, 8), vectors(1, 4, 2, 8)
    batch = {**batch_of(4, 2), "teacher": teacher}
    sums = losses.embedding_distillation_sums(student, batch, loss="mse", scale=20.0)
    texts = [np.concatenate([s[0][:, None], s[1]], axis=1) for s in (student, teacher)]
    # sentence-transformers' MSELoss: torch's MSELoss over the batch's vectors.
    want = np.mean(np.square(texts[0] - texts[1]))
    np.testing.assert_allclose(sums["distill_sum"] / 4, want, rtol=1e-6)
    np.testing.assert_allclose(sums["loss_sum"], sums["distill_sum"])  # in_batch_weight 0


def test_kl_is_the_divergence_of_the_students_ranking_of_the_batch_from_the_teachers():
    rows, width, scale = 4, 2, 20.0
    student, teacher = vectors(0, rows, width, 8), vectors(1, rows, width, 6)
    batch = {**batch_of(rows, width, padding=1), "teacher": teacher}
    sums = losses.embedding_distillation_sums(
        student, batch, loss="kl", scale=scale, distill_weight=2.0, in_batch_weight=0.5
    )

    def probs(queries, passages, query):
        q = np.asarray(queries[query]) / np.linalg.norm(queries[query])
        c = np.asarray(passages).reshape(rows * width, -1)[: (rows - 1) * width]  # no padding
        c = c / np.linalg.norm(c, axis=-1, keepdims=True)
        e = np.exp(scale * c @ q - np.max(scale * c @ q))
        return e / e.sum()

    want = 0.0
    for query in range(rows - 1):
        p, s = probs(*teacher, query), probs(*student, query)
        want += np.sum(p * np.log(p / s))
    np.testing.assert_allclose(sums["distill_sum"], want, rtol=1e-4)
    in_batch = losses.in_batch_negatives_sums(student, batch, scale=scale)
    np.testing.assert_allclose(sums["loss_sum"], 2.0 * want + 0.5 * in_batch["loss_sum"], rtol=1e-4)
    assert sums["correct"] == in_batch["correct"]


@pytest.mark.parametrize("loss", ["mse", "kl"])
def test_a_student_equal_to_its_teacher_has_nothing_to_learn_and_finite_gradients(loss):
    student = vectors(0, 4, 2, 8)
    batch = {**batch_of(4, 2, padding=1), "teacher": student}

    def distill(outputs):
        sums = losses.embedding_distillation_sums(outputs, batch, loss=loss, scale=20.0)
        return sums["loss_sum"]

    assert float(distill(student)) == pytest.approx(0.0, abs=1e-6)
    grads = jax.grad(distill)(vectors(2, 4, 2, 8))
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in grads)
    assert float(distill(vectors(2, 4, 2, 8))) > 0.01


def test_margin_mse_is_the_squared_error_of_the_students_margins_against_the_teachers():
    rows, width, scale = 3, 3, 20.0
    student = vectors(0, rows, width, 8)
    margins = jnp.asarray(np.random.default_rng(1).normal(size=(rows, width - 1)), jnp.float32)
    batch = {**batch_of(rows, width, padding=1), "teacher_margins": margins}

    @jax.jit
    def distill(outputs, batch):
        sums = losses.embedding_distillation_sums(
            outputs, batch, loss="margin_mse", scale=1.0, margin_scale=scale
        )
        return sums["distill_sum"]

    q, p = (np.asarray(x) for x in student)
    cos = np.einsum("bh,bph->bp", q, p) / (
        np.linalg.norm(q, axis=-1)[:, None] * np.linalg.norm(p, axis=-1)
    )
    # sentence-transformers' MarginMSELoss: the MSE of (pos - neg) against the labels,
    # here of margin_scale x cosine, over the rows that are not padding.
    ours = scale * (cos[:, :1] - cos[:, 1:])
    want = np.mean(np.square(ours - np.asarray(margins))[: rows - 1], axis=1).sum()
    np.testing.assert_allclose(distill(student, batch), want, rtol=1e-5)
    # Margins equal to the student's own: nothing to learn, finite gradients.
    batch["teacher_margins"] = jnp.asarray(ours, jnp.float32)
    assert float(distill(student, batch)) == pytest.approx(0.0, abs=1e-4)
    grads = jax.jit(jax.grad(distill))(student, batch)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in grads)


def distill_config(tmp_path, student: str, teacher: str, loss: str = "kl"):
    config = minilm_l3.get_config()
    config.init_checkpoint, config.distill.teacher = student, teacher
    config.data.beir_dir = str(write_beir(tmp_path / "beir"))
    config.data.max_query_length, config.data.max_seq_length = 16, 32
    config.train_batch_size = config.eval_batch_size = 8
    config.loss.name = loss
    return config


def first_batch(run) -> dict:
    """The run's first training batch of 8 rows, on the host."""
    batches = run.setup.data.train(batch_size=8, process_index=0, process_count=1, seed=0)
    return jax.tree.map(np.asarray, next(iter(batches.as_numpy_iterator())))


def distill_sums(run, batch, *, steps: int) -> tuple[list[float], dict]:
    """The teacher's loss at each of `steps` steps on `batch` from the run's first state,
    and the last step's sums."""
    step, _ = train.jit_steps(run)
    state, rng = train.create_state(run), jax.random.key(0)
    distilled = []
    for _ in range(steps):
        state, sums = step(state, batch, rng)
        distilled.append(float(sums["distill_sum"]))
    return distilled, sums


@pytest.mark.slow  # a student shrunk, two train steps compiled: 15 s of CPU
def test_the_teacher_in_the_step_equals_its_outputs_given_and_is_never_updated(
    pretrained_workdir, tmp_path
):
    # kl: the teacher's vectors reach the loss as mse's do (the losses' own tests above).
    student = str(tmp_path / "student")
    shrink.shrink(pretrained_workdir, student, "1")
    config = distill_config(tmp_path, student, pretrained_workdir, "kl")
    run = train.build_run(config, str(tmp_path / "w"), devices=jax.devices()[:2])
    batch = first_batch(run)
    step, _ = train.jit_steps(run)
    rng = jax.random.key(0)

    state = train.create_state(run)
    start = jax.device_get(state)
    # The teacher's parameters are its workdir's, in its own (scan) layout.
    assert "layer" in start.teacher["bert"]["encoder"]
    given = jax.device_get(
        train.teacher_outputs(run.setup, state.teacher, batch, num_microbatches=1)
    )
    in_step, sums = step(state, batch, rng)
    from_batch, given_sums = step(train.create_state(run), {**batch, "teacher": given}, rng)

    for name in ("loss_sum", "distill_sum", "in_batch_sum"):
        np.testing.assert_allclose(sums[name], given_sums[name], rtol=1e-5)
    assert float(sums["distill_sum"]) > 0
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7),
        jax.device_get(in_step.params),
        jax.device_get(from_batch.params),
    )
    jax.tree.map(np.testing.assert_array_equal, jax.device_get(in_step.teacher), start.teacher)
    # The step's FLOPs count the teacher's forward pass (the MFU's work), not its backward.
    task, inputs, description = retrieval.TASK, run.setup.model.inputs, run.setup.description
    student_row = task.forward_flops(run.setup.model.config, inputs, description)
    teacher_row = task.forward_flops(run.setup.teacher.module.config, inputs, description)
    assert teacher_row > student_row  # two layers against one
    assert flops.flops_per_step(task, run.setup, 8) == 8 * (3 * student_row + teacher_row)
    moved = jax.tree.map(
        lambda a, b: bool(np.any(a != b)), jax.device_get(in_step.params), start.params
    )
    assert any(jax.tree.leaves(moved))


@pytest.mark.slow  # two runs built, the teacher and two steps compiled: 25 s of CPU
def test_a_cached_teachers_outputs_equal_the_teacher_in_the_step(pretrained_workdir, tmp_path):
    student = str(tmp_path / "student")
    shrink.shrink(pretrained_workdir, student, "1")
    config = distill_config(tmp_path, student, pretrained_workdir, "kl")
    in_step = train.build_run(config, str(tmp_path / "a"), devices=jax.devices()[:2])
    config.distill.cache = str(tmp_path / "cache")
    cached = train.build_run(config, str(tmp_path / "b"), devices=jax.devices()[:2])
    cache = cached.setup.teacher_cache
    assert cached.setup.teacher is None and not cache.complete
    train.fill_teacher_cache(cached)
    assert cache.complete
    queries, passages = cache.read()
    assert queries.shape == (30, 64) and passages.shape == (30, 1, 64)

    batch, stored = first_batch(in_step), first_batch(cached)
    state = train.create_state(in_step)
    computed = train.teacher_outputs(in_step.setup, state.teacher, batch, num_microbatches=1)
    for ours, theirs in zip(stored["teacher"], jax.device_get(computed), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)
    rng = jax.random.key(0)
    _, in_step_sums = train.jit_steps(in_step)[0](state, batch, rng)
    features = {name: stored[name] for name in cached.setup.objective.features}
    _, cached_sums = train.jit_steps(cached)[0](train.create_state(cached), features, rng)
    np.testing.assert_allclose(cached_sums["loss_sum"], in_step_sums["loss_sum"], rtol=1e-4)
    # The step's FLOPs no longer count the teacher: it does not run there.
    assert flops.flops_per_step(retrieval.TASK, cached.setup, 8) < flops.flops_per_step(
        retrieval.TASK, in_step.setup, 8
    )

    # Another teacher's cache, or one of other rows, is refused before anything compiles.
    config.distill.teacher = student
    with pytest.raises(ConfigError, match="cache=.*: made by another teacher than"):
        retrieval.setup(config, str(tmp_path / "c"))
    config.distill.teacher, config.data.max_seq_length = pretrained_workdir, 16
    with pytest.raises(ConfigError, match="made for other training texts or lengths"):
        retrieval.setup(config, str(tmp_path / "c"))


@pytest.mark.slow  # a train step compiled: 10 s of CPU
def test_margin_mse_reads_the_mined_margins_and_the_student_learns_them(
    pretrained_workdir, tmp_path
):
    config = distill_config(tmp_path, pretrained_workdir, "", "margin_mse")
    # Each training query's two next passages as negatives, the positive 0.5 and 0.25
    # above them by the scorer: margins a student of cosines can reach.
    lines = [
        {"query_id": f"q{i}", "negatives": [f"d{i + 1}", f"d{i + 2}"],
         "scorer_scores": [0.0, 0.25], "scorer_positives": {f"d{i}": 0.5}}
        for i in range(30)
    ]  # fmt: skip
    mined_file = tmp_path / "mined.jsonl"
    mined_file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    config.data.negatives_file, config.data.num_negatives = str(mined_file), 2
    config.loss.in_batch_weight, config.optimizer.learning_rate = 0.0, 1e-3
    config.num_train_epochs = 8  # 32 steps: the rate still high at the eighth
    run = train.build_run(config, str(tmp_path / "w"), devices=jax.devices()[:2])
    assert run.setup.teacher is None  # the margins come with the data
    batch = first_batch(run)
    np.testing.assert_array_equal(batch["teacher_margins"], [[0.5, 0.25]] * 8)
    assert run.setup.model.inputs["passage_ids"] == 3 * 32  # the positive and 2 negatives
    distilled, _ = distill_sums(run, batch, steps=8)
    assert distilled[-1] < 0.5 * distilled[0], distilled


@pytest.mark.slow  # a train step compiled: 12 s of CPU
def test_mse_over_texts_without_pairs_learns_the_teachers_vectors(pretrained_workdir, tmp_path):
    student = str(tmp_path / "student")
    shrink.shrink(pretrained_workdir, student, "1")
    config = distill_config(tmp_path, student, pretrained_workdir, "mse")
    config.data.texts, config.loss.in_batch_weight = "collection", 0.0
    config.embedding.normalize = False  # as the teacher's (a pretraining workdir's mean)
    # Dropout's noise would be most of the squared differences of this small model.
    config.model.hidden_dropout_prob = config.model.attention_probs_dropout_prob = 0.0
    config.num_train_epochs = 8  # 40 steps: the rate still high at the eighth
    run = train.build_run(config, str(tmp_path / "w"), devices=jax.devices()[:2])
    # Both slots hold texts cut as passages are (32 tokens), one passage a row.
    assert run.setup.model.inputs["query_ids"] == run.setup.model.inputs["passage_ids"] == 32
    assert run.setup.objective.console == (("distill_loss", "distill"),)
    batch = first_batch(run)
    distilled, sums = distill_sums(run, batch, steps=16)
    assert float(sums["loss_sum"]) == distilled[-1]  # the teacher's loss alone
    assert distilled[-1] < 0.5 * distilled[0], distilled


def test_texts_without_pairs_teach_mse_alone(pretrained_workdir, tmp_path):
    config = distill_config(tmp_path, pretrained_workdir, pretrained_workdir, "kl")
    config.data.texts = "collection"
    with pytest.raises(ConfigError, match="texts='collection': texts without pairs teach a"):
        retrieval.check_config(config)
    config.loss.name = "mse"
    with pytest.raises(ConfigError, match="set config.loss.in_batch_weight=0"):
        retrieval.check_config(config)
    config.loss.in_batch_weight = 0.0
    retrieval.check_config(config)


def test_a_distillation_loss_needs_a_teacher_and_in_batch_takes_none(pretrained_workdir, tmp_path):
    config = distill_config(tmp_path, pretrained_workdir, "")
    with pytest.raises(ConfigError, match="config.loss.name='kl': learns from a teacher"):
        retrieval.check_config(config)
    config.loss.name, config.distill.teacher = "in_batch", pretrained_workdir
    with pytest.raises(ConfigError, match="'in_batch' reads no teacher; use 'mse' or 'kl'"):
        retrieval.check_config(config)
    config.loss.name = "kd"
    with pytest.raises(ConfigError, match="config.loss.name='kd': use one of in_batch, mse, kl"):
        retrieval.check_config(config)
    config.loss.name, config.distill.teacher, config.distill.cache = "kl", "", "somewhere"
    with pytest.raises(ConfigError, match="cache='somewhere': stores a teacher's outputs; give"):
        retrieval.check_config(config)
    config.distill.cache, config.distill.teacher = "", pretrained_workdir
    config.loss.name = "margin_mse"
    with pytest.raises(ConfigError, match="'margin_mse' reads its teacher's margins with the data"):
        retrieval.check_config(config)
    config.loss.name, config.distill.teacher = "in_batch", ""
    config.data.negatives, config.data.margins = ("n",), ("m",)
    with pytest.raises(ConfigError, match="only config.loss.name='margin_mse' reads them"):
        retrieval.check_config(config)


def test_a_teacher_of_another_tokenizer_is_refused(pretrained_workdir, tmp_path):
    (tmp_path / "other").mkdir()
    teacher = init_workdir.write(tmp_path / "other", ["alpha", "beta"])
    config = distill_config(tmp_path, pretrained_workdir, teacher)
    with pytest.raises(ConfigError, match="tokenizes otherwise than config.init_checkpoint"):
        retrieval.setup(config, str(tmp_path / "w"))


def test_mse_refuses_a_teacher_of_another_width_and_a_reranker_teaches_no_embedder(
    pretrained_workdir, tmp_path
):
    saved = workdir_lib.read_model_config(pretrained_workdir)
    teacher = tmp_path / "wide"
    description = workdir_lib.read_json(f"{pretrained_workdir}/task.json")
    workdir_lib.write_run_description(
        str(teacher),
        distill_config(tmp_path, pretrained_workdir, "").copy_and_resolve_references(),
        dataclasses.replace(saved, hidden_size=32, intermediate_size=64),
        workdir_lib.vocab_file(pretrained_workdir),
        kind="pretraining",
        description={k: v for k, v in description.items() if k != "kind"},
    )
    config = distill_config(tmp_path, pretrained_workdir, str(teacher), loss="mse")
    with pytest.raises(ConfigError, match="its vectors have 32 dimensions, the student's 64"):
        retrieval.setup(config, str(tmp_path / "w"))
    # A pretraining workdir pools by its mean, not normalized; minilm_l3's student normalizes.
    config.distill.teacher = pretrained_workdir
    with pytest.raises(ConfigError, match="its vectors are not normalized, the student's are;"):
        retrieval.setup(config, str(tmp_path / "w"))
    config.distill.teacher = str(teacher)
    workdir_lib.write_run_description(
        str(teacher),
        config,
        saved,
        workdir_lib.vocab_file(pretrained_workdir),
        kind="reranking",
        description={k: v for k, v in description.items() if k != "kind"},
    )
    with pytest.raises(ConfigError, match="a reranking workdir scores pairs"):
        retrieval.setup(config, str(tmp_path / "w"))


# ---------------------------------------------------------------- pretraining


def test_mlm_distillation_is_the_temperature_scaled_kl_at_the_masked_positions():
    rng = np.random.default_rng(0)
    student, teacher = (jnp.asarray(rng.normal(size=(2, 3, 7)), jnp.float32) for _ in "st")
    weights = jnp.asarray([[1, 1, 0], [1, 0, 0]], jnp.float32)
    sums = losses.mlm_distillation_sums(student, teacher, weights=weights, temperature=2.0)

    def softmax(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    p, q = softmax(np.asarray(teacher) / 2), softmax(np.asarray(student) / 2)
    kl = np.sum(p * np.log(p / q), axis=-1)
    np.testing.assert_allclose(
        sums["distill_loss_sum"], 4 * np.sum(np.asarray(weights) * kl), rtol=1e-5
    )
    same = losses.mlm_distillation_sums(teacher, teacher, weights=weights, temperature=2.0)
    assert float(same["distill_loss_sum"]) == pytest.approx(0.0, abs=1e-6)


def test_a_pretraining_teacher_must_share_the_vocabulary_and_be_a_pretraining_workdir(
    make_small_config, pretrained_workdir, tmp_path
):
    import ml_collections

    from bertjax.tasks import pretraining

    config = make_small_config()
    config.distill = ml_collections.ConfigDict(
        {"teacher": pretrained_workdir, "temperature": 2.0, "weight": 1.0, "mlm_weight": 1.0}
    )
    # The small vocabulary against the teacher's bert-base one.
    with pytest.raises(ConfigError, match="tokenizes otherwise than config.data"):
        pretraining.setup(config, str(tmp_path / "w"))
    config.distill.temperature = 0.0
    with pytest.raises(ConfigError, match="config.distill.temperature=0.0: must be above 0"):
        pretraining.check_config(config)
    config.distill.temperature = 1.0
    del config.distill["mlm_weight"]
    with pytest.raises(ConfigError, match="missing config key: config.distill.mlm_weight"):
        pretraining.check_config(config)
    config.distill.mlm_weight, config.distill.cache = 1.0, "runs/cache"
    with pytest.raises(ConfigError, match="config.distill.cache: a pretraining teacher reads"):
        pretraining.check_config(config)


@pytest.mark.integration  # two starts of a run, each restoring the teacher or its cache
@pytest.mark.parametrize("cached", [False, True], ids=["teacher in the step", "cached"])
def test_a_distillation_resumes_with_its_teacher_restored_again(
    pretrained_workdir, tmp_path, cached
):
    student = str(tmp_path / "student")
    shrink.shrink(pretrained_workdir, student, "1")
    config = distill_config(tmp_path, student, pretrained_workdir)
    config.train_batch_size, config.num_train_epochs = 4, 1.0  # 7 steps
    config.checkpoint_every_steps = 2
    cache = tmp_path / "cache" / "cache.json"
    config.distill.cache = str(cache.parent) if cached else ""
    workdir = str(tmp_path / "w")
    devices = jax.devices()[:2]
    train.train_and_evaluate(config, workdir, stop_after=4, devices=devices)
    written = cache.stat().st_mtime_ns if cached else None
    resumed = train.train_and_evaluate(config, workdir, devices=devices)
    if cached:  # computed by the first start, read by the second
        assert cache.stat().st_mtime_ns == written
    assert resumed["eval"]["step"] == 7
    lines = [json.loads(line) for line in (tmp_path / "w/metrics.jsonl").read_text().splitlines()]
    train_lines = [line for line in lines if line["split"] == "train"]
    assert [line["step"] for line in train_lines][-1] == 7
    assert all(line["distill_loss"] > 0 for line in train_lines)
