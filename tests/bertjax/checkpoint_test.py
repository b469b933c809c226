"""bertjax.checkpoint on a state of a few small arrays: save, restore, rotation and refusals."""

import json
import logging
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax import checkpoint
from bertjax.workdir import CheckpointError


def tiny_state(step: int) -> dict:
    """The shape of a train state: a step, parameters under "params" and optimizer moments."""
    return {
        "step": jnp.asarray(step, jnp.int32),
        "params": {
            "encoder": {"kernel": jnp.arange(6, dtype=jnp.float32).reshape(2, 3) + step},
            "head": {"bias": jnp.asarray([0.5, -1.5], jnp.bfloat16)},
        },
        "opt_state": {"mu": jnp.full((3,), step / 10, jnp.float32)},
    }


def abstract(tree):
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device), tree)


def assert_trees_equal(actual, expected):
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for got, want in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


def save_steps(workdir, steps, *, max_to_keep=3):
    manager = checkpoint.make_manager(str(workdir), max_to_keep=max_to_keep)
    for step in steps:
        checkpoint.save(manager, step, tiny_state(step), {"stream_positions": [step, 2 * step]})
        assert checkpoint.wait(manager, timeout_s=60)
    return manager


def test_a_saved_state_and_its_data_item_are_restored_equal(tmp_path):
    manager = save_steps(tmp_path, [4])
    state, data = checkpoint.restore(manager, 4, abstract(tiny_state(4)))
    manager.close()
    assert_trees_equal(state, tiny_state(4))
    assert data == {"stream_positions": [4, 8]}


def test_only_the_newest_checkpoints_are_kept_and_the_latest_step_is_the_newest(tmp_path):
    assert checkpoint.latest_step(str(tmp_path)) is None
    manager = save_steps(tmp_path, [1, 2, 3], max_to_keep=2)
    assert list(manager.all_steps()) == [2, 3]
    manager.close()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["2", "3"]
    assert checkpoint.latest_step(str(tmp_path)) == 3


def test_restore_params_reads_a_subtree_of_the_parameters_quietly(tmp_path, caplog):
    save_steps(tmp_path, [1, 2], max_to_keep=2).close()
    wanted = {"encoder": tiny_state(0)["params"]["encoder"]}
    with caplog.at_level(logging.WARNING):
        latest, step = checkpoint.restore_params(str(tmp_path), abstract(wanted))
    assert step == 2
    assert_trees_equal(latest, {"encoder": tiny_state(2)["params"]["encoder"]})
    earlier, _ = checkpoint.restore_params(str(tmp_path), abstract(wanted), step=1)
    assert_trees_equal(earlier, {"encoder": tiny_state(1)["params"]["encoder"]})
    # Reading a workdir is no reason for orbax to warn (it did, four lines a restore).
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


def test_restore_params_of_a_workdir_without_checkpoints_names_it(tmp_path):
    with pytest.raises(CheckpointError, match=f"init_checkpoint='{tmp_path}': no checkpoint under"):
        checkpoint.restore_params(str(tmp_path), {}, what="init_checkpoint")


def test_a_stray_step_directory_is_refused_by_a_reader_and_moved_aside_by_a_run(tmp_path):
    save_steps(tmp_path, [1]).close()
    stray = tmp_path / "checkpoints" / "7"
    stray.mkdir()
    (stray / "notes.txt").write_text("not a checkpoint")
    with pytest.raises(CheckpointError, match=f"{stray}: not a complete bertjax checkpoint"):
        checkpoint.latest_step(str(tmp_path))
    # The run holding the workdir moves it out of the steps, keeping it.
    assert checkpoint.latest_step(str(tmp_path), own=True) == 1
    assert (tmp_path / checkpoint.DAMAGED_DIR / "7" / "notes.txt").is_file()
    assert checkpoint.latest_step(str(tmp_path)) == 1
    # So does its manager.
    stray.mkdir()
    checkpoint.make_manager(str(tmp_path), max_to_keep=3).close()
    assert (tmp_path / checkpoint.DAMAGED_DIR / "7.2").is_dir()


def test_a_step_directory_without_its_manifest_is_incomplete_to_readers_and_the_run(tmp_path):
    # A save cut short after orbax committed the state, before the manifest.
    save_steps(tmp_path, [1, 2]).close()
    (tmp_path / "checkpoints" / "2" / checkpoint.MANIFEST).unlink()
    # A reader passes over it (it may be a live run's save in flight); the run moves it.
    assert checkpoint.latest_step(str(tmp_path)) == 1
    assert checkpoint.restore_params(str(tmp_path), abstract(tiny_state(1)["params"]))[1] == 1
    assert checkpoint.latest_step(str(tmp_path), own=True) == 1
    assert (tmp_path / checkpoint.DAMAGED_DIR / "2" / checkpoint.ITEM).is_dir()


def test_check_step_dirs_ignores_missing_directories_and_unfinished_orbax_saves(tmp_path):
    checkpoint.check_step_dirs(str(tmp_path / "nothing_here"))
    directory = tmp_path / "checkpoints"
    (directory / "5.orbax-checkpoint-tmp-1234").mkdir(parents=True)
    (directory / "notes").mkdir()
    checkpoint.check_step_dirs(str(directory))
    assert checkpoint.latest_step(str(tmp_path)) is None


def test_wait_with_no_save_in_flight_returns_at_once(tmp_path):
    manager = checkpoint.make_manager(str(tmp_path), max_to_keep=1)
    assert checkpoint.wait(manager) is True
    assert checkpoint.wait(manager, timeout_s=0.5) is True
    manager.close()


def test_wait_commits_the_save_in_flight(tmp_path):
    manager = checkpoint.make_manager(str(tmp_path), max_to_keep=1)
    checkpoint.save(manager, 9, tiny_state(9), {})
    assert checkpoint.wait(manager) is True
    assert manager.latest_step() == 9
    manager.close()
    assert checkpoint.latest_step(str(tmp_path)) == 9


def test_check_space_refuses_a_state_bigger_than_the_disk(tmp_path):
    manager = checkpoint.make_manager(str(tmp_path), max_to_keep=1)
    checkpoint.check_space(manager, tiny_state(0))
    huge = {"params": jax.ShapeDtypeStruct((2**40,), jnp.float32)}  # 4 TiB
    with pytest.raises(CheckpointError, match=r"MiB free, .*latest complete checkpoint: none"):
        checkpoint.check_space(manager, huge)
    manager.close()


def test_a_failed_save_is_one_line_though_orbax_fails_again_as_it_closes(tmp_path):
    # A full disk fails the save, then orbax's close (writing the save's metadata): the
    # first failure, reported in one line, is the one the run ends with.
    manager = checkpoint.make_manager(str(tmp_path), max_to_keep=1)
    save_steps_into(manager, [1])
    full = OSError(28, "No space left on device")

    def fails(*args, **kwargs):
        raise full

    manager._orbax.save = manager._orbax.close = fails
    with pytest.raises(CheckpointError, match=r"saving checkpoint 2 .*complete checkpoint: step 1"):
        checkpoint.save(manager, 2, tiny_state(2), {})
    manager.close()  # nothing raised over the failure reported


def test_a_save_that_fails_only_as_orbax_closes_is_reported_by_close(tmp_path):
    manager = save_steps(tmp_path, [1])

    def fails():
        raise OSError(28, "No space left on device")

    manager._orbax.close = fails
    with pytest.raises(CheckpointError, match=r"saving checkpoint 1 .*No space left on device"):
        manager.close()


def save_steps_into(manager, steps):
    for step in steps:
        checkpoint.save(manager, step, tiny_state(step), {})
        assert checkpoint.wait(manager, timeout_s=60)


# ----------------------------------------------------------------------------- integrity


def big_state(step: int) -> dict:
    """tiny_state with a 128 x 128 kernel: its data is the step's largest file."""
    state = tiny_state(step)
    kernel = jnp.arange(128 * 128, dtype=jnp.float32).reshape(128, 128) / 7 + step
    return {**state, "params": {**state["params"], "big": {"kernel": kernel}}}


def save_big(workdir, steps, **options):
    manager = checkpoint.make_manager(str(workdir), max_to_keep=None, **options)
    for step in steps:
        checkpoint.save(manager, step, big_state(step), {"stream_positions": [step]})
        assert checkpoint.wait(manager, timeout_s=60)
    return manager


def data_files(workdir, step: int) -> list:
    """The files of a step's arrays (not its metadata), largest first."""
    state_dir = workdir / "checkpoints" / str(step) / checkpoint.ITEM
    return sorted(state_dir.glob("**/d/*"), key=lambda p: p.stat().st_size, reverse=True)


def flip_low_bits(path, count=100) -> None:
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + count):
        data[i] ^= 1
    path.write_bytes(bytes(data))


def manifest_path(workdir, step: int):
    return workdir / "checkpoints" / str(step) / checkpoint.MANIFEST


def edit_manifest(workdir, step: int, *, keep_checksum: bool = False, **values) -> None:
    """Sets keys of a step's manifest as a text editor would (None: deletes the key);
    with `keep_checksum`, its checksum is made again to match (a forged manifest)."""
    path = manifest_path(workdir, step)
    manifest = json.loads(path.read_text())
    for key, value in values.items():
        if value is None:
            del manifest[key]
        else:
            manifest[key] = value
    if keep_checksum:
        manifest["checksum"] = checkpoint._checksum(manifest)
    path.write_text(json.dumps(manifest))


def one_fingerprint_changed(workdir, step: int) -> None:
    manifest = json.loads(manifest_path(workdir, step).read_text())
    manifest["arrays"]["params/big/kernel"]["fingerprint"] ^= 1
    edit_manifest(workdir, step, keep_checksum=True, arrays=manifest["arrays"])


def flip_bit_in_key_name(path) -> None:
    """A bit flipped in the tree's metadata that leaves it valid JSON: "big" -> "cig"."""
    text = path.read_bytes()
    assert text.count(b'"key": "big"') == 1
    path.write_bytes(text.replace(b'"key": "big"', b'"key": "cig"'))


def truncate(path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_a_fingerprint_changes_with_one_bit_and_with_the_order_of_the_values():
    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    base = checkpoint.fingerprints({"x": x})["x"]
    for bit in (0, 17, 31):  # the lowest bit, a middle one, the sign
        words = jax.lax.bitcast_convert_type(x, jnp.uint32)
        flipped = jax.lax.bitcast_convert_type(
            words.at[1, 2].set(words[1, 2] ^ jnp.uint32(1 << bit)), x.dtype
        )
        assert checkpoint.fingerprints({"x": flipped})["x"] != base, bit
    swapped = x.at[0, 0].set(x[0, 1]).at[0, 1].set(x[0, 0])
    assert checkpoint.fingerprints({"x": swapped})["x"] != base
    # A sharded array has the fingerprint of its values, wherever they are.
    mesh = jax.make_mesh((len(jax.devices()),), ("d",))
    sharded = jax.device_put(
        jnp.tile(x, (len(jax.devices()), 1)), jax.NamedSharding(mesh, jax.P("d"))
    )
    local = np.asarray(sharded)
    assert checkpoint.fingerprints({"x": sharded}) == checkpoint.fingerprints({"x": local})


DAMAGE = {
    "flipped_bits": (
        lambda w: flip_low_bits(data_files(w, 2)[0]),
        r"state/\S+ differs from what was written \(CRC-32 mismatch\)$",
    ),
    "truncated_array": (
        lambda w: data_files(w, 2)[0].write_bytes(b"short"),
        r"state/\S+ is truncated or grown \(5 bytes, \d+ written\)$",
    ),
    "deleted_array": (lambda w: data_files(w, 2)[0].unlink(), r"state/\S+ is missing$"),
    "unreadable_manifest": (
        lambda w: manifest_path(w, 2).write_text("{not json"),
        "its manifest.json is not valid JSON$",
    ),
    "no_checksum": (
        lambda w: edit_manifest(w, 2, checksum=None),
        r"its manifest.json differs from what was written \(checksum mismatch\)$",
    ),
    "edited_stream_positions": (
        lambda w: edit_manifest(w, 2, data={"stream_positions": [7]}),
        r"its manifest.json differs from what was written \(checksum mismatch\)$",
    ),
    "missing_tree_metadata": (
        lambda w: (w / "checkpoints/2/state/_METADATA").unlink(),
        "state/_METADATA is missing$",
    ),
    "flipped_bit_in_tree_metadata": (
        lambda w: flip_bit_in_key_name(w / "checkpoints/2/state/_METADATA"),
        r"state/_METADATA differs from what was written \(CRC-32 mismatch\)$",
    ),
    "truncated_ocdbt_manifest": (
        lambda w: truncate(w / "checkpoints/2/state/manifest.ocdbt"),
        r"state/manifest.ocdbt is truncated or grown \(\d+ bytes, \d+ written\)$",
    ),
    "array_changed_after_the_files": (
        lambda w: one_fingerprint_changed(w, 2),
        r"params/big/kernel differs from what was written \(fingerprint mismatch\)$",
    ),
}


@pytest.mark.parametrize("damage, reason", DAMAGE.values(), ids=DAMAGE.keys())
def test_a_damaged_checkpoint_is_one_line_naming_the_step_and_the_run_falls_back(
    tmp_path, damage, reason
):
    save_big(tmp_path, [1, 2]).close()
    damage(tmp_path)
    manager = checkpoint.make_manager(str(tmp_path), max_to_keep=None)
    with pytest.raises(checkpoint.Damaged) as caught:
        checkpoint.restore(manager, 2, abstract(big_state(2)))
    (line,) = str(caught.value).splitlines()
    assert re.match(f"{tmp_path}/checkpoints/2: damaged, {reason}", line), line
    assert len(line) - len(f"{tmp_path}/checkpoints/2: damaged, ") <= len("unreadable: ") + 300

    reports = []
    step, state, data = checkpoint.restore_newest_good(
        manager, abstract(big_state(2)), reports.append
    )
    manager.close()
    assert step == 1 and data == {"stream_positions": [1]}
    assert_trees_equal(state, big_state(1))
    moved = tmp_path / checkpoint.DAMAGED_DIR / "2"
    # The same step and reason (a failed read may name another of the arrays read at once).
    assert re.match(f"{tmp_path}/checkpoints/2: damaged, ", reports[0]), reports
    assert reports[0].endswith(f"; moved to {moved}")
    assert reports[1:] == ["resuming from step 1, the newest checkpoint that verifies"]
    assert moved.is_dir()  # kept, not deleted
    assert checkpoint.latest_step(str(tmp_path)) == 1


class Reworded(Exception):
    """What orbax or TensorStore might raise after an upgrade: the same failure, other words."""


def reworded_reads(monkeypatch):
    """Every orbax restore that fails raises its failure in other words."""
    import orbax.checkpoint as ocp

    for checkpointer in (ocp.StandardCheckpointer, ocp.PyTreeCheckpointer):
        original = checkpointer.restore

        def restore(self, *args, _original=original, **kwargs):
            try:
                return _original(self, *args, **kwargs)
            except Exception as error:
                raise Reworded("the storage layer said something new") from error

        monkeypatch.setattr(checkpointer, "restore", restore)


@pytest.mark.parametrize("damage, reason", DAMAGE.values(), ids=DAMAGE.keys())
def test_the_verdicts_do_not_depend_on_what_orbax_and_tensorstore_say(
    tmp_path, monkeypatch, damage, reason
):
    # An upgrade that rewords their errors can neither move a good checkpoint aside nor
    # hide a damaged one: the verdict comes from the manifest before orbax reads.
    reworded_reads(monkeypatch)
    save_big(tmp_path, [1, 2]).close()
    damage(tmp_path)
    with checkpoint.make_manager(str(tmp_path), max_to_keep=None) as manager:
        with pytest.raises(checkpoint.Damaged, match=reason):
            checkpoint.restore(manager, 2, abstract(big_state(2)))
        step, state, _ = checkpoint.restore_newest_good(
            manager, abstract(big_state(2)), lambda line: None
        )
    assert step == 1
    assert_trees_equal(state, big_state(1))


def test_a_read_failure_the_manifest_does_not_explain_is_raised_as_it_is(tmp_path, monkeypatch):
    # Every file is as written, and orbax fails anyway (the storage, the machine, a bug):
    # not damage. The error is the caller's to see, and no checkpoint moves.
    import orbax.checkpoint as ocp

    save_big(tmp_path, [1, 2]).close()

    def failing_restore(self, *args, **kwargs):
        raise Reworded("DATA_LOSS: a message that once meant damage")

    monkeypatch.setattr(ocp.StandardCheckpointer, "restore", failing_restore)
    manager = checkpoint.make_manager(str(tmp_path), max_to_keep=None)
    with manager, pytest.raises(Reworded):
        checkpoint.restore_newest_good(manager, abstract(big_state(2)), lambda line: None)
    assert not (tmp_path / checkpoint.DAMAGED_DIR).exists()
    assert checkpoint.latest_step(str(tmp_path)) == 2


def test_a_checkpoint_of_another_format_is_one_line_and_never_moved(tmp_path):
    save_big(tmp_path, [1, 2]).close()
    edit_manifest(tmp_path, 2, keep_checksum=True, format=checkpoint.FORMAT + 1)
    manager = checkpoint.make_manager(str(tmp_path), max_to_keep=None)
    with manager, pytest.raises(CheckpointError) as caught:
        checkpoint.restore_newest_good(manager, abstract(big_state(2)), lambda line: None)
    assert not isinstance(caught.value, checkpoint.Damaged)
    assert str(caught.value) == (
        f"{tmp_path}/checkpoints/2: a checkpoint of format {checkpoint.FORMAT + 1}; this "
        f"bertjax reads format {checkpoint.FORMAT}: read it with the newer bertjax that wrote "
        "it, or start the run in a new workdir"
    )
    assert not (tmp_path / checkpoint.DAMAGED_DIR).exists()


def test_a_checkpoint_written_before_manifests_names_the_bertjax_that_reads_it(tmp_path):
    # Format 1: an orbax "data" item beside the state, no manifest.
    save_big(tmp_path, [1]).close()
    step_dir = tmp_path / "checkpoints" / "1"
    (step_dir / checkpoint.MANIFEST).unlink()
    (step_dir / "data").mkdir()
    (step_dir / "data" / "metadata").write_text("{}")
    for own in (False, True):
        with pytest.raises(CheckpointError, match="a checkpoint of format 1; .* at commit df9a95b"):
            checkpoint.latest_step(str(tmp_path), own=own)
    assert not (tmp_path / checkpoint.DAMAGED_DIR).exists()


def test_with_no_checkpoint_that_verifies_the_run_stops_in_one_line_and_again(tmp_path):
    # Once every damaged step was moved aside, and the same command again trained from
    # step 0 without a word.
    save_big(tmp_path, [1, 2]).close()
    for step in (1, 2):
        flip_low_bits(data_files(tmp_path, step)[0])
    for _ in range(2):
        reports = []
        manager = checkpoint.make_manager(str(tmp_path), max_to_keep=None)
        with manager, pytest.raises(CheckpointError) as caught:
            checkpoint.restore_newest_good(manager, abstract(big_state(2)), reports.append)
        assert str(caught.value) == (
            f"{tmp_path}/checkpoints: no checkpoint verifies (steps 2, 1 are damaged, left in "
            "place for a look); start the run in a new workdir"
        )
        assert [line.split(":")[0] for line in reports] == [
            f"{tmp_path}/checkpoints/{step}" for step in (2, 1)
        ]
        assert not (tmp_path / checkpoint.DAMAGED_DIR).exists()


@pytest.mark.parametrize(
    "change, problem",
    [
        (lambda s: s["params"]["big"].update(kernel=jnp.zeros((128, 64))), "has params/big/kernel of shape (128, 128), this model (128, 64)"),
        (lambda s: s["params"].update(extra={"bias": jnp.zeros(2)}), "has no params/extra/bias"),
        (lambda s: s["params"].pop("head"), "has params/head/bias, which this model has not"),
    ],
    ids=["shape", "more_arrays", "fewer_arrays"],
)  # fmt: skip
def test_a_checkpoint_of_another_model_is_refused_and_never_moved(tmp_path, change, problem):
    # Arrays of other names or shapes are another config's, never damage: with a config
    # that mismatches, a run once moved every good checkpoint aside as "damaged".
    save_big(tmp_path, [1, 2]).close()
    other = big_state(2)
    change(other)
    manager = checkpoint.make_manager(str(tmp_path), max_to_keep=None)
    with pytest.raises(CheckpointError) as caught:
        checkpoint.restore_newest_good(manager, abstract(other), lambda line: None)
    manager.close()
    assert not isinstance(caught.value, checkpoint.Damaged)
    assert str(caught.value) == (
        f"{tmp_path}/checkpoints/2: {problem}; a checkpoint of another config (left as it "
        "is): run with the config that wrote it, or use another workdir"
    )
    assert not (tmp_path / checkpoint.DAMAGED_DIR).exists()
    assert checkpoint.latest_step(str(tmp_path)) == 2


def test_a_reader_falls_back_without_moving_anything(tmp_path, caplog):
    save_big(tmp_path, [1, 2]).close()
    flip_low_bits(data_files(tmp_path, 2)[0])
    wanted = abstract({"big": big_state(0)["params"]["big"]})
    with caplog.at_level(logging.WARNING):
        params, step = checkpoint.restore_params(str(tmp_path), wanted)
    assert step == 1
    assert_trees_equal(params, {"big": big_state(1)["params"]["big"]})
    assert "checkpoints/2: damaged, state/" in caplog.text
    assert "using step 1, the newest checkpoint that verifies" in caplog.text
    assert checkpoint.latest_step(str(tmp_path)) == 2  # the workdir is left as it was
    with pytest.raises(checkpoint.Damaged, match="checkpoints/2: damaged"):
        checkpoint.restore_params(str(tmp_path), wanted, step=2)


def test_rotation_keeps_the_step_a_run_resumed_from(tmp_path):
    manager = save_big(tmp_path, [1, 2, 3, 4, 5], keep=(2,))
    manager.close()
    manager = checkpoint.make_manager(str(tmp_path), max_to_keep=2, keep=(2,))
    for step in (6, 7):
        checkpoint.save(manager, step, big_state(step), {})
        assert checkpoint.wait(manager, timeout_s=60)
    assert list(manager.all_steps()) == [2, 6, 7]
    manager.close()


def test_rotation_keeps_the_best_evaluations_step_until_a_better_one(tmp_path):
    manager = checkpoint.make_manager(str(tmp_path), max_to_keep=1)
    for step, best in ((1, 1), (2, 1), (3, 1), (4, 4), (5, 4)):
        manager.keep_best(best)
        checkpoint.save(manager, step, tiny_state(step), {})
        assert checkpoint.wait(manager, timeout_s=60)
        assert manager.all_steps() == sorted({best, step}), step
    manager.close()


def test_fingerprints_are_of_the_state_saved_though_its_buffers_are_donated_at_once(tmp_path):
    # The fingerprints are read in the background commit; the next train step donates
    # the state's buffers before that. They must still be of the values saved.
    state = big_state(5)
    saved = jax.tree.map(np.asarray, state)
    step = jax.jit(lambda s: jax.tree.map(lambda x: x * 2 + 1, s), donate_argnums=0)
    manager = checkpoint.make_manager(str(tmp_path), max_to_keep=None)
    checkpoint.save(manager, 5, state, {})
    for _ in range(3):
        state = step(state)
    assert checkpoint.wait(manager, timeout_s=60)
    restored, data = checkpoint.restore(manager, 5, abstract(saved))  # verifies
    manager.close()
    assert_trees_equal(restored, saved)
    assert data == {}


@pytest.mark.parametrize(
    "shape, dtype",
    [
        ((), np.float32),
        ((7,), np.float32),
        ((300, 257), np.float32),
        ((2, 3, 5, 4), np.float32),
        ((33, 65), jnp.bfloat16),
        ((9, 4), np.int32),
        ((5, 6), np.uint8),
        ((4, 5), np.bool_),
        ((0, 3), np.float32),
    ],
)
def test_a_fingerprint_read_in_host_memory_is_the_one_computed_by_xla(shape, dtype):
    # Restores read arrays on a CPU in place, with numpy; saves and other devices use XLA.
    rng = np.random.default_rng(sum(shape) + len(shape))
    x = jnp.asarray(rng.standard_normal(shape) * 1e3).astype(dtype)
    assert checkpoint._in_host_memory(x)
    assert checkpoint._fingerprint_in_place(x) == int(checkpoint._fingerprint_one(x))
