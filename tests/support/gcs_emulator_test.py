"""The GCS emulator fixture works for each client bertjax uses on gs:// paths."""

import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from etils import epath

pytestmark = pytest.mark.emulator

pytest_plugins = ["support.gcs_emulator"]  # the fixtures gcs_emulator and gcs_bucket
gfile = tf.io.gfile


def _write(path: str, data: bytes, mode: str = "wb") -> None:
    with gfile.GFile(path, mode) as f:
        f.write(data)


def _read(path: str) -> bytes:
    with gfile.GFile(path, "rb") as f:
        return f.read()


def test_gfile_files(gcs_bucket):
    root = f"{gcs_bucket}/gfile"
    assert gfile.exists(gcs_bucket) and not gfile.exists(f"{root}/a.txt")
    gfile.makedirs(f"{root}/empty")
    assert gfile.isdir(f"{root}/empty")
    _write(f"{root}/a.txt", b"one\n")
    _write(f"{root}/a.txt", b"two\n", mode="ab")  # GCS re-uploads the whole object
    assert _read(f"{root}/a.txt") == b"one\ntwo\n"
    assert gfile.stat(f"{root}/a.txt").length == 8
    _write(f"{root}/b.txt", b"b")
    gfile.rename(f"{root}/b.txt", f"{root}/a.txt", overwrite=True)
    assert _read(f"{root}/a.txt") == b"b" and not gfile.exists(f"{root}/b.txt")
    gfile.copy(f"{root}/a.txt", f"{root}/sub/c.txt")
    assert gfile.glob(f"{root}/*.txt") == [f"{root}/a.txt"]
    assert sorted(gfile.listdir(root)) == ["a.txt", "empty/", "sub/"]
    gfile.rename(f"{root}/sub", f"{root}/moved")  # a folder: each object under it
    # Not exists(f"{root}/sub"): TF's stat cache keeps a folder for GCS_STAT_CACHE_MAX_AGE (5 s).
    assert gfile.exists(f"{root}/moved/c.txt") and not gfile.exists(f"{root}/sub/c.txt")
    gfile.remove(f"{root}/a.txt")
    gfile.rmtree(root)
    assert not gfile.exists(root)


def test_gfile_gzip_and_tfrecords(gcs_bucket):
    with (
        gfile.GFile(f"{gcs_bucket}/corpus/doc.txt.gz", "wb") as f,
        gzip.GzipFile(fileobj=f, mode="wb") as z,
    ):
        z.write(b"line one\nline two\n")
    with gfile.GFile(f"{gcs_bucket}/corpus/doc.txt.gz", "rb") as f:
        assert gzip.GzipFile(fileobj=f).read().splitlines() == [b"line one", b"line two"]
    for shard in range(2):
        with tf.io.TFRecordWriter(f"{gcs_bucket}/records/train-{shard}.tfrecord") as writer:
            writer.write(b"record %d" % shard)
    files = gfile.glob(f"{gcs_bucket}/records/train-*.tfrecord")
    assert [r.numpy() for r in tf.data.TFRecordDataset(files)] == [b"record 0", b"record 1"]


def test_tensorboard_events(gcs_bucket):
    writer = tf.summary.create_file_writer(f"{gcs_bucket}/run/tensorboard")
    with writer.as_default(step=1):
        tf.summary.write("train/loss", tf.constant(1.5))
    writer.close()
    (events,) = gfile.glob(f"{gcs_bucket}/run/tensorboard/events.out.tfevents.*")
    assert gfile.stat(events).length > 0


def test_epath(gcs_bucket):
    root = epath.Path(gcs_bucket) / "epath"
    assert type(root._backend).__name__ == "_TfBackend"  # epath goes through tf.io.gfile
    (root / "d").mkdir(parents=True, exist_ok=True)
    (root / "d" / "x.json").write_text('{"a": 1}')
    assert json.loads((root / "d" / "x.json").read_text()) == {"a": 1}
    assert [p.name for p in root.iterdir()] == ["d"]
    assert [p.name for p in root.glob("d/*.json")] == ["x.json"]
    (root / "d" / "x.json").rename(root / "d" / "y.json")
    assert (root / "d" / "y.json").exists() and not (root / "d" / "x.json").exists()
    root.rmtree()
    assert not root.exists()


def test_tensorstore(gcs_bucket):
    import tensorstore as ts

    store = ts.KvStore.open(f"{gcs_bucket}/kv/").result()
    store.write("key", b"value").result()
    assert store.read("key").result().value == b"value"
    assert _read(f"{gcs_bucket}/kv/key") == b"value"  # the same object through tf.io.gfile


def test_subprocess_inherits_the_environment(gcs_bucket, gcs_emulator):
    _write(f"{gcs_bucket}/child/in.txt", b"from the test")
    code = (
        "import sys, tensorflow as tf; p = sys.argv[1]; "
        "tf.io.gfile.GFile(p + '/out.txt', 'w').write(tf.io.gfile.GFile(p + '/in.txt').read())"
    )
    env = {**os.environ, **gcs_emulator.env, "TF_CPP_MIN_LOG_LEVEL": "3"}
    subprocess.run(
        [sys.executable, "-c", code, f"{gcs_bucket}/child"], env=env, check=True, timeout=120
    )
    assert _read(f"{gcs_bucket}/child/out.txt") == b"from the test"


def test_orbax_checkpoint_manager(gcs_bucket):
    pytest.importorskip(
        "google.cloud.storage",
        reason="orbax-checkpoint 0.12.8 imports google.cloud.storage for a gs:// directory "
        "(gcs_utils.is_hierarchical_namespace_enabled); install google-cloud-storage",
    )
    import jax
    import jax.numpy as jnp
    import orbax.checkpoint as ocp

    directory = epath.Path(gcs_bucket) / "run" / "checkpoints"
    options = ocp.CheckpointManagerOptions(
        max_to_keep=2, create=True, enable_async_checkpointing=True
    )
    state = {"w": jnp.arange(6.0).reshape(2, 3), "step": jnp.int32(0)}
    with ocp.CheckpointManager(directory, options=options, item_names=("state", "data")) as manager:
        for step in (1, 2, 3):
            state = {**state, "step": jnp.int32(step)}
            args = ocp.args.Composite(
                state=ocp.args.StandardSave(state), data=ocp.args.JsonSave({"pos": step})
            )
            manager.save(step, args=args, force=True)
        manager.wait_until_finished()
        assert manager.all_steps() == [2, 3]
    assert sorted(p.name for p in directory.iterdir()) == ["2", "3"]
    assert ocp.step.is_path_finalized(directory / "3")

    read_only = ocp.CheckpointManagerOptions(read_only=True, create=False)
    with ocp.CheckpointManager(
        directory, options=read_only, item_names=("state", "data")
    ) as manager:
        assert manager.latest_step() == 3
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
        args = ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract), data=ocp.args.JsonRestore()
        )
        restored = manager.restore(3, args=args)
    np.testing.assert_array_equal(restored.state["w"], state["w"])
    assert int(restored.state["step"]) == 3 and restored.data == {"pos": 3}
