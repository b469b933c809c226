"""bertjax.main around the training loop: the platform a config expects, the
persistent compilation cache that spares a restarted run its compile, and the errors
of a run that never started, which leave its workdir as they found it."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import support
from faults_test import SMALL
from support import REPO

TESTDATA = support.TESTDATA / "finetune"

pytestmark = pytest.mark.integration


def own_cache(env=()) -> dict[str, str]:
    """The environment of a run whose compiled steps go where bertjax.main puts them (its
    workdir's compilation_cache, unless `env` names another), not to the session's."""
    return {
        **{k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"},
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        **dict(env),
    }


def run_main(workdir, vocab, *overrides, env=()):
    command = [
        sys.executable,
        "-m",
        "bertjax.main",
        "--config=experiments/pretrain/tiny_cpu.py",
        f"--workdir={workdir}",
        f"--config.data.vocab_file={vocab}",
        *SMALL,
        "--config.num_train_steps=2",
        *overrides,
    ]
    return subprocess.run(
        command, cwd=REPO, env=own_cache(env), capture_output=True, text=True, timeout=300
    )


def errors(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def test_a_tpu_config_on_a_cpu_stops_before_compiling(tmp_path, small_vocab_file):
    workdir = tmp_path / "run"
    result = run_main(workdir, small_vocab_file, "--config.platform=tpu")
    assert result.returncode == 2, result.stderr[-3000:]
    (error,) = errors(result)
    assert error.startswith("error: config.platform='tpu', but this run found 1 cpu device(s)")
    assert "--config.platform=cpu runs here anyway" in error
    assert not (workdir / "checkpoints").exists()
    assert not (workdir / "compilation_cache").exists()


@pytest.mark.parametrize("evaluation", ["2", "0"], ids=["eval", "no_eval"])
def test_an_empty_corpus_file_is_named_before_compiling(tmp_path, small_vocab_file, evaluation):
    # Once: "the eval split has no documents (raise config.data.eval_fraction)", at any
    # fraction; without evaluation, the same line after compiling, with config.json
    # written, so that the corrected run was refused as another config.
    corpus = tmp_path / "empty.txt"
    corpus.write_bytes(b"")
    workdir, cache = tmp_path / "run", tmp_path / "cache"
    result = run_main(
        workdir,
        small_vocab_file,
        "--config.data.source=text",
        f"--config.data.text_files={corpus}",
        "--config.data.eval_fraction=0.9",
        f"--config.eval_every_steps={evaluation}",
        env={"JAX_COMPILATION_CACHE_DIR": str(cache)},
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert errors(result) == [
        f"error: config.data.text_files: {corpus}: empty; no documents to pretrain on "
        "(a sentence a line, a blank line between documents)"
    ]
    assert "Traceback" not in result.stderr
    assert not workdir.exists()  # the run never started: no lock, config.json or folder left
    compiled = os.listdir(cache) if cache.exists() else []
    assert not [name for name in compiled if name.startswith(("jit__init_state", "jit_train"))]


def test_a_workdir_that_is_a_file_is_named_and_left_alone(tmp_path, small_vocab_file):
    file = tmp_path / "afile"
    file.write_text("notes")
    result = run_main(file, small_vocab_file)
    assert result.returncode == 2, result.stderr[-3000:]
    assert errors(result) == [f"error: workdir {file}: is a file, not a directory"]
    assert os.listdir(tmp_path) == ["afile"] and file.read_text() == "notes"


def run_classify(workdir, init_checkpoint, *overrides, env=None):
    """bertjax.main on experiments/finetune/classify.py and the MRPC sample."""
    command = [
        sys.executable, "-m", "bertjax.main", "--config=experiments/finetune/classify.py",
        f"--workdir={workdir}", f"--config.init_checkpoint={init_checkpoint}",
        f"--config.data.train_file={TESTDATA / 'mrpc_train.tsv'}",
        f"--config.data.eval_file={TESTDATA / 'mrpc_dev.tsv'}",
        "--config.data.text_a=#1 String", "--config.data.label=Quality", *overrides,
    ]  # fmt: skip
    env = env or {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize("new_workdir", [True, False], ids=["new_workdir", "empty_workdir"])
def test_a_fine_tuning_run_from_no_workdir_is_one_line_and_leaves_nothing(tmp_path, new_workdir):
    # An init checkpoint that does not exist, into a new workdir (and its new parent);
    # a folder that is not a workdir, into an empty one.
    init, said = tmp_path / "nope", "does not exist"
    workdir = tmp_path / "runs" / "new"
    if not new_workdir:
        init, said = tmp_path / "pretrained", "not a bertjax workdir (no model_config.json there)"
        workdir = tmp_path / "run"
        init.mkdir()
        workdir.mkdir()
    result = run_classify(workdir, init)
    assert result.returncode == 2, result.stderr[-3000:]
    assert errors(result) == [f"error: config.init_checkpoint='{init}': {said}"]
    if new_workdir:
        assert not (tmp_path / "runs").exists()
    else:
        assert os.listdir(workdir) == []


# The overrides of `classified`'s fine-tuning run: a short run of a short length.
SMALL_CLASSIFIER = (
    "--config.train_batch_size=8",
    "--config.num_train_epochs=2",
    "--config.data.max_seq_length=64",
)


@pytest.fixture(scope="module")
def classified(tmp_path_factory, pretrained_workdir) -> pathlib.Path:
    """The workdir of a fine-tuning run of SMALL_CLASSIFIER from pretrained_workdir, to its
    end, with its compiled steps in its own cache (own_cache): read it only."""
    workdir = tmp_path_factory.mktemp("classified") / "run"
    made = run_classify(workdir, pretrained_workdir, *SMALL_CLASSIFIER, env=own_cache())
    assert made.returncode == 0, made.stderr[-3000:]
    return workdir


def test_a_workdir_of_another_task_is_named_as_such_either_way(
    tmp_path, small_vocab_file, pretrained_workdir, classified
):
    # Each config lacks keys the other's config.json has: neither is an older bertjax's.
    shutil.copytree(classified, tmp_path / "classified", ignore=shutil.ignore_patterns(".lock"))
    classified = tmp_path / "classified"
    pretrained = tmp_path / "pretrained"
    shutil.copytree(pretrained_workdir, pretrained, ignore=shutil.ignore_patterns(".lock"))
    for result, workdir, held, trains in (
        (run_main(classified, small_vocab_file), classified, "classification", "pretraining"),
        (
            run_classify(pretrained, pretrained_workdir, *SMALL_CLASSIFIER),
            pretrained,
            "pretraining",
            "classification",
        ),
    ):
        assert result.returncode == 2, result.stderr[-3000:]
        assert errors(result) == [
            f"error: {workdir} holds a run of another task ({held}; this config trains "
            f"{trains}); resume it with a {held} config, or use a new workdir"
        ]
        assert "Traceback" not in result.stderr


def test_platforms():
    import jax

    from bertjax import sharding

    sharding.check_platform("any", jax.devices())
    sharding.check_platform("cpu", jax.devices())
    with pytest.raises(sharding.MeshError, match="'tpuv4': must be one of tpu, gpu, cpu, any"):
        sharding.check_platform("tpuv4", jax.devices())
    with pytest.raises(sharding.MeshError, match="'gpu', but this run found 8 cpu device"):
        sharding.check_platform("gpu", jax.devices())


def test_compiled_steps_are_cached_in_the_workdir(classified):
    # A fine-tuning run's: where the cache goes is chosen before the task is (experiment.py).
    cached = os.listdir(classified / "compilation_cache")
    assert any(name.startswith("jit_train_step-") for name in cached), cached


def test_which_compilation_cache():
    from ml_collections import ConfigDict

    from bertjax.experiment import compilation_cache_dir

    def chosen(setting, current):
        config = ConfigDict({"compilation_cache_dir": setting})
        return compilation_cache_dir(config, "/runs/a", current)

    assert chosen("", None) == "/runs/a/compilation_cache"
    assert chosen("", "/from/env") == "/from/env"  # JAX_COMPILATION_CACHE_DIR
    assert chosen("gs://bucket/cache", "/from/env") == "gs://bucket/cache"
    assert chosen("off", "/from/env") is None
