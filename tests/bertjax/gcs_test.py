"""bertjax with everything in Cloud Storage: vocab, workdirs, fine-tuning files, conversion.

The bucket is fake-gcs-server's (tests/support/gcs_emulator.py). Each test also checks that
no `gs:` folder appeared locally, which is what a gs:// path taken for a local one
leaves behind.
"""

import gzip
import json
import os
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
import support
import tensorflow as tf
from flax import traverse_util
from support import REPO

import bertjax
from bertjax import checkpoint, predictions, train
from bertjax import workdir as workdir_lib
from data_pipeline import builtin_corpus
from experiments.finetune import classify

pytestmark = [pytest.mark.integration, pytest.mark.emulator]

pytest_plugins = ["support.gcs_emulator"]  # the fixtures gcs_emulator and gcs_bucket
gfile = tf.io.gfile

TESTDATA = support.TESTDATA / "finetune"
# The bucket is what is tested here, not sharding: the runs use one device (on 2 cores,
# conftest's 8 fake devices' collectives cost twice the CPU time).
ONE_DEVICE = jax.devices()[:1]


@pytest.fixture(scope="module")
def cwd(tmp_path_factory):
    """An empty working directory for the module: a local `gs:` folder would show there."""
    folder = tmp_path_factory.mktemp("cwd")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        yield folder


@pytest.fixture(autouse=True)
def nothing_local(cwd):
    yield
    assert not list(cwd.rglob("gs:*")) and not (REPO / "gs:").exists()


def _upload(local, remote: str) -> str:
    gfile.makedirs(os.path.dirname(remote))
    gfile.copy(str(local), remote, overwrite=True)
    return remote


def _upload_corpus(bucket: str) -> str:
    """The built-in corpus as two text files in the bucket, the second gzipped: a glob."""
    documents = ["\n".join(sentences) + "\n\n" for _, sentences in builtin_corpus.documents()]
    gfile.makedirs(f"{bucket}/corpus")
    with gfile.GFile(f"{bucket}/corpus/part0.txt", "w") as f:
        f.write("".join(documents[:250]))
    with gfile.GFile(f"{bucket}/corpus/part1.txt.gz", "wb") as f:
        f.write(gzip.compress("".join(documents[250:500]).encode()))
    return f"{bucket}/corpus/part*"


@pytest.fixture(scope="module")
def pretrained(gcs_bucket, cwd, make_small_config, small_vocab_file):
    """4 steps with the corpus, the vocabulary and the workdir in the bucket, stopped at 2
    and resumed.

    Not conftest.py's pretrained_workdir: pretraining from and into the bucket, and its
    resumption there, is what this module tests, and the tests after read that workdir.
    """
    config = make_small_config()
    config.num_train_steps = config.eval_every_steps = 4
    config.checkpoint_every_steps = 2
    config.data.source = "text"
    config.data.text_files = _upload_corpus(gcs_bucket)
    config.data.vocab_file = _upload(small_vocab_file, f"{gcs_bucket}/vocab/vocab.txt")
    workdir = f"{gcs_bucket}/runs/pretrain"
    train.train_and_evaluate(config, workdir, stop_after=2, devices=ONE_DEVICE)
    assert checkpoint.latest_step(workdir) == 2
    return workdir, train.train_and_evaluate(config, workdir, devices=ONE_DEVICE)


@pytest.fixture(scope="module")
def restored(pretrained):
    return bertjax.restore(pretrained[0])


def test_pretraining_resumes_and_writes_its_workdir_in_the_bucket(pretrained):
    workdir, results = pretrained
    assert results["eval"]["step"] == 4
    assert workdir_lib.read_results(workdir)["eval"] == results["eval"]
    for name in ("config.json", "model_config.json", "task.json", "vocab.txt"):
        assert gfile.exists(f"{workdir}/{name}"), name
    with gfile.GFile(f"{workdir}/{workdir_lib.METRICS_FILE}") as f:
        lines = [json.loads(line) for line in f]
    assert [r["step"] for r in lines if r["split"] == "train"] == [2, 4]
    assert gfile.glob(f"{workdir}/tensorboard/events.out.tfevents.*")
    assert sorted(int(n.rstrip("/")) for n in gfile.listdir(f"{workdir}/checkpoints")) == [2, 4]
    assert not gfile.exists(f"{workdir}/{workdir_lib.LEASE_FILE}")  # released at the end


def test_restore_and_fill_mask(restored):
    assert restored.step == 4
    (guesses,) = bertjax.fill_mask(restored, "The [MASK] statement.", top_k=3)
    assert len(guesses) == 3 and all(0.0 <= p <= 1.0 for _, p in guesses)


def _convert(*args):
    result = subprocess.run(
        [sys.executable, "-m", "bertjax.convert", *args],
        env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_convert_export_and_import_in_the_bucket(pretrained, restored, gcs_bucket):
    workdir = pretrained[0]
    exported, imported = f"{gcs_bucket}/hf/export", f"{gcs_bucket}/runs/imported"
    _convert("export", "--format", "hf", workdir, exported)
    names = [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    assert sorted(gfile.listdir(exported)) == names
    assert not gfile.glob(f"{gcs_bucket}/hf/.*.partial*")
    _convert("import", "--format", "hf", exported, imported)
    again = traverse_util.flatten_dict(bertjax.restore(imported).params, sep="/")
    for name, value in traverse_util.flatten_dict(restored.params, sep="/").items():
        np.testing.assert_array_equal(again[name], value, err_msg=name)


def test_finetune_and_predict_in_the_bucket(pretrained, gcs_bucket):
    data = f"{gcs_bucket}/mrpc"
    config = classify.get_config()
    config.init_checkpoint = pretrained[0]
    config.train_batch_size = config.eval_batch_size = 8
    config.num_train_epochs = 2.0  # 4 examples x 2 epochs / 8 = 1 step
    config.data.train_file = _upload(TESTDATA / "mrpc_train.tsv", f"{data}/train.tsv")
    config.data.eval_file = _upload(TESTDATA / "mrpc_dev.tsv", f"{data}/dev.tsv")
    config.data.text_a, config.data.text_b = "#1 String", "#2 String"
    config.data.label = "Quality"
    config.data.max_seq_length = 32
    workdir = f"{gcs_bucket}/runs/mrpc"
    results = train.train_and_evaluate(config, workdir, devices=ONE_DEVICE)
    assert results["eval"]["step"] == 1
    assert gfile.exists(f"{workdir}/{workdir_lib.EVAL_PREDICTIONS_FILE}")
    output = predictions.predict(workdir, config.data.eval_file)
    assert output == f"{data}/dev.tsv.predictions.jsonl"
    with gfile.GFile(output) as f:
        assert [set(json.loads(line)["probabilities"]) for line in f] == [{"0", "1"}] * 3


def test_a_bucket_workdir_is_held_by_a_lease(gcs_bucket):
    workdir = f"{gcs_bucket}/runs/leased"
    lease = f"{workdir}/{workdir_lib.LEASE_FILE}"
    busy = pytest.raises(workdir_lib.WorkdirBusy, match=f"process {os.getpid()} on .* renewed")
    with workdir_lib.claim(workdir), busy, workdir_lib.claim(workdir):
        pass
    assert not gfile.exists(lease)

    def held(host, pid, age):
        owner = {"host": host, "pid": pid, "id": "other", "renewed": time.time() - age}
        with gfile.GFile(lease, "w") as f:
            f.write(json.dumps(owner))

    held("another-host", 1, age=30)  # a live run elsewhere
    with (
        pytest.raises(workdir_lib.WorkdirBusy, match="renewed 30 s ago"),
        workdir_lib.claim(workdir),
    ):
        pass
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout
    for host, pid, age in (
        ("another-host", 1, workdir_lib.LEASE_STALE_S + 1),  # not renewed for too long
        (socket.gethostname(), int(dead), 0),  # its process on this host is gone
    ):
        held(host, pid, age)
        with workdir_lib.claim(workdir), gfile.GFile(lease) as f:
            assert json.load(f)["pid"] == os.getpid()


def test_a_run_that_fails_before_its_first_step_leaves_nothing_in_the_bucket(gcs_bucket):
    # A folder of its own: the other tests' runs share the bucket.
    mine = f"{gcs_bucket}/failing/runs"
    gfile.makedirs(mine)
    workdir = f"{mine}/failed"
    with pytest.raises(RuntimeError, match="no data"), workdir_lib.claim(workdir):
        gfile.makedirs(f"{workdir}/compilation_cache")
        with gfile.GFile(f"{workdir}/{workdir_lib.CONFIG_FILE}", "w") as f:
            f.write("{}")
        raise RuntimeError("no data")
    assert not gfile.exists(workdir)
    assert gfile.listdir(mine) == []


def test_a_damaged_checkpoint_in_the_bucket_is_moved_aside(gcs_bucket):
    import jax.numpy as jnp

    workdir = f"{gcs_bucket}/runs/damaged"
    state = {"params": {"w": jnp.arange(64 * 64, dtype=jnp.float32).reshape(64, 64)}}
    with checkpoint.make_manager(workdir, max_to_keep=None) as manager:
        for step in (1, 2):
            checkpoint.save(manager, step, jax.tree.map(lambda x, s=step: x + s, state), {})
            checkpoint.wait(manager)
    # The largest object of step 2's arrays holds w: flip bits in its middle.
    objects = [
        os.path.join(root, name)
        for root, _, names in gfile.walk(f"{workdir}/checkpoints/2/state")
        if root.rstrip("/").endswith("/d")
        for name in names
    ]
    largest = max(objects, key=lambda path: gfile.stat(path).length)
    with gfile.GFile(largest, "rb") as f:
        data = bytearray(f.read())
    for i in range(len(data) // 2, len(data) // 2 + 64):
        data[i] ^= 1
    with gfile.GFile(largest, "wb") as f:
        f.write(bytes(data))
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state
    )
    reports = []
    with checkpoint.make_manager(workdir, max_to_keep=None) as manager:
        step, restored, _ = checkpoint.restore_newest_good(manager, abstract, reports.append)
    assert step == 1
    np.testing.assert_array_equal(restored["params"]["w"], state["params"]["w"] + 1)
    assert reports[0].endswith(f"; moved to {workdir}/damaged_checkpoints/2"), reports
    assert gfile.exists(f"{workdir}/damaged_checkpoints/2/state")
    assert checkpoint.latest_step(workdir) == 1
