"""bertjax.workdir: the files of a run read back as written, refusals that name the file,
and one live run per workdir."""

import dataclasses
import json
import os
import re
import socket

import ml_collections
import pytest

from bertjax import workdir
from bertjax.model import BertConfig
from data_pipeline import config as data_config_lib


def run_config(**overrides) -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict(
        {
            "seed": 0,
            "num_train_steps": 100,
            "log_every_steps": 10,
            "optimizer": {"learning_rate": 1e-4, "warmup_steps": 10},
            "mesh": {"data": -1, "model": 1},
        }
    )
    config.update(overrides)
    return config


MODEL_CONFIG = BertConfig.from_preset("tiny", vocab_size=99)


def describe(tmp_path, config=None) -> str:
    """Writes a run's description into tmp_path/run from a vocabulary outside it."""
    vocab = tmp_path / "source" / "my_vocab.txt"
    vocab.parent.mkdir()
    vocab.write_text("[PAD]\n[UNK]\nhello\n")
    return workdir.write_run_description(
        str(tmp_path / "run"),
        config or run_config(),
        MODEL_CONFIG,
        str(vocab),
        kind="sst2",
        description={"max_seq_length": 64, "tokenizer_data": {"do_lower_case": False}},
    )


def test_read_json_of_a_missing_file_is_none(tmp_path):
    assert workdir.read_json(str(tmp_path / "absent.json")) is None


def test_read_json_of_malformed_json_names_the_file(tmp_path):
    file = tmp_path / "results.json"
    file.write_text('{"eval": ')
    with pytest.raises(workdir.CheckpointError, match=f"^{re.escape(str(file))}: not valid JSON"):
        workdir.read_json(str(file))


def test_results_are_read_back_as_written(tmp_path):
    assert workdir.read_results(str(tmp_path)) == {}
    results = {"eval": {"accuracy": 0.75, "step": 10}, "best": {"accuracy": 0.8, "step": 5}}
    workdir.write_results(str(tmp_path), results)
    assert workdir.read_results(str(tmp_path)) == results
    assert json.loads((tmp_path / workdir.RESULTS_FILE).read_text()) == results
    assert [p.name for p in tmp_path.iterdir()] == [workdir.RESULTS_FILE]  # no temporary left


def test_write_lines_writes_one_json_object_a_line(tmp_path):
    file = tmp_path / "deep" / "predictions.jsonl"
    workdir.write_lines(str(file), [{"id": 1, "label": "a"}, {"id": 2, "label": "b"}])
    assert file.read_text() == '{"id": 1, "label": "a"}\n{"id": 2, "label": "b"}\n'
    workdir.write_lines(str(file), [])
    assert file.read_text() == ""


def test_read_metrics_skips_a_half_written_last_line(tmp_path):
    assert workdir.read_metrics(str(tmp_path)) == []
    (tmp_path / workdir.METRICS_FILE).write_text(
        '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n{"step": 3, "lo'
    )
    assert workdir.read_metrics(str(tmp_path)) == [
        {"step": 1, "loss": 2.0},
        {"step": 2, "loss": 1.5},
    ]


def test_cut_metrics_keeps_the_steps_up_to_the_checkpoint_and_drops_a_half_written_line(
    tmp_path,
):
    file = tmp_path / workdir.METRICS_FILE
    workdir.cut_metrics(str(tmp_path), 3)  # no file: nothing to cut
    assert not file.exists()
    logged = (
        '{"step": 2, "split": "train", "loss": 2.0}\n'
        '{"step": 3, "split": "train", "loss": 1.5}\n'
        '{"step": 3, "split": "eval", "loss": 1.75}\n'
    )
    file.write_text(logged + '{"step": 4, "split": "train", "loss": 1.25}\n{"step": 5, "lo')
    workdir.cut_metrics(str(tmp_path), 3)
    assert file.read_text() == logged  # the records of steps 2 and 3, byte for byte
    workdir.cut_metrics(str(tmp_path), 3)
    assert file.read_text() == logged
    workdir.cut_metrics(str(tmp_path), 0)  # no checkpoint: the history starts again
    assert file.read_text() == ""
    assert [p.name for p in tmp_path.iterdir()] == [workdir.METRICS_FILE]  # no temporary left


def test_a_run_description_is_read_back_as_written(tmp_path):
    vocab = describe(tmp_path)
    run = str(tmp_path / "run")
    assert vocab == os.path.join(run, "vocab.txt")
    assert (tmp_path / "run" / "vocab.txt").read_text() == "[PAD]\n[UNK]\nhello\n"
    assert workdir.vocab_file(run) == vocab
    assert workdir.require_vocab_file(run, what="init_checkpoint") == vocab
    assert workdir.read_model_config(run) == MODEL_CONFIG
    assert workdir.require_model_config(run, what="init_checkpoint") == MODEL_CONFIG
    assert workdir.read_json(os.path.join(run, workdir.CONFIG_FILE)) == run_config().to_dict()
    assert workdir.read_task(run) == (
        "sst2",
        {"max_seq_length": 64, "tokenizer_data": {"do_lower_case": False}},
    )
    tokenizer_data = workdir.read_tokenizer_data(run)
    assert tokenizer_data == {**data_config_lib.default_config().to_dict(), "do_lower_case": False}
    assert data_config_lib.default_config().do_lower_case is True  # so the override shows


def test_a_run_description_with_the_workdirs_own_vocabulary_keeps_it(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "vocab.json").write_text('{"[PAD]": 0}')
    target = workdir.write_run_description(
        str(run), run_config(), MODEL_CONFIG, str(run / "vocab.json"), kind="x", description={}
    )
    assert target == str(run / "vocab.json")
    assert (run / "vocab.json").read_text() == '{"[PAD]": 0}'


def test_a_workdir_without_vocabulary_or_model_config_is_named(tmp_path):
    empty = str(tmp_path)
    assert workdir.vocab_file(empty) is None and workdir.read_model_config(empty) is None
    with pytest.raises(
        workdir.CheckpointError, match=f"init_checkpoint='{empty}': no vocabulary .*vocab.txt"
    ):
        workdir.require_vocab_file(empty, what="init_checkpoint")
    with pytest.raises(workdir.CheckpointError) as caught:
        workdir.require_model_config(empty, what="model")
    assert (
        str(caught.value) == f"model='{empty}': not a bertjax workdir (no model_config.json there)"
    )


def test_an_init_checkpoint_that_is_missing_or_a_file_is_named_as_such(tmp_path):
    missing, file = str(tmp_path / "nope"), tmp_path / "bert_model.ckpt"
    with pytest.raises(workdir.CheckpointError) as caught:
        workdir.require_model_config(missing, what="config.init_checkpoint")
    assert str(caught.value) == f"config.init_checkpoint='{missing}': does not exist"
    file.write_text("")
    with pytest.raises(workdir.CheckpointError) as caught:
        workdir.require_model_config(str(file), what="config.init_checkpoint")
    assert str(caught.value) == (
        f"config.init_checkpoint='{file}': a file, not a bertjax workdir (a folder with "
        "model_config.json)"
    )


def test_read_task_refuses_a_workdir_without_task_json_or_a_task_name(tmp_path):
    with pytest.raises(workdir.CheckpointError, match=f"{tmp_path}: no task.json"):
        workdir.read_task(str(tmp_path))
    (tmp_path / workdir.TASK_FILE).write_text('{"max_seq_length": 128}')
    with pytest.raises(workdir.CheckpointError, match=r'task.json: no task name \("kind"\)'):
        workdir.read_task(str(tmp_path))


def test_check_same_shapes_names_the_field_that_differs():
    workdir.check_same_shapes(MODEL_CONFIG, MODEL_CONFIG, where="here")
    wider = BertConfig.from_preset("tiny", vocab_size=100)
    with pytest.raises(
        workdir.CheckpointError, match="here: the saved model has vocab_size=99, this run .*=100"
    ):
        workdir.check_same_shapes(MODEL_CONFIG, wider, where="here")
    # Same shapes, other parameters: a pre-LayerNorm model has a final norm BERT has not.
    pre = dataclasses.replace(MODEL_CONFIG, norm_placement="pre")
    with pytest.raises(workdir.CheckpointError, match="norm_placement='post', this run .*'pre'"):
        workdir.check_same_shapes(MODEL_CONFIG, pre, where="here")


def test_a_claimed_workdir_refuses_a_second_claim_until_released(tmp_path):
    run = str(tmp_path / "run")
    with workdir.claim(run):
        owner = json.loads((tmp_path / "run" / workdir.LOCK_FILE).read_text())
        assert owner["pid"] == os.getpid()
        busy = f"{run}: in use by the run of process {os.getpid()} on {socket.gethostname()}"
        with pytest.raises(workdir.WorkdirBusy, match=re.escape(busy)), workdir.claim(run):
            pass
        assert workdir.wait_until_free(run, timeout_s=0) is False
    assert workdir.wait_until_free(run, timeout_s=0) is True
    with workdir.claim(run):
        pass


def test_a_lock_file_removed_between_opening_and_locking_it_is_made_again(tmp_path, monkeypatch):
    # A run that leaves the workdir as it found it removes its .lock just after this run
    # opened it: a lock on the removed file would keep no third run out.
    run, removed = tmp_path / "run", []
    open_lock_file = workdir._open_lock_file

    def opened_then_removed(path):
        opened = open_lock_file(path)
        if not removed:
            os.remove(path)
            removed.append(path)
        return opened

    monkeypatch.setattr(workdir, "_open_lock_file", opened_then_removed)
    with workdir.claim(str(run)):
        assert removed
        owner = json.loads((run / workdir.LOCK_FILE).read_text())
        assert owner["pid"] == os.getpid()
        with pytest.raises(workdir.WorkdirBusy), workdir.claim(str(run)):
            pass


def test_a_workdir_that_is_a_file_or_under_one_is_refused_before_anything_is_made(tmp_path):
    file = tmp_path / "afile"
    file.write_text("mine")
    for path, message in [
        (file, f"workdir {file}: is a file, not a directory"),
        (file / "run", f"workdir {file}/run: {file} is a file, not a directory"),
    ]:
        with pytest.raises(workdir.CheckpointError) as caught, workdir.claim(str(path)):
            pass
        assert str(caught.value) == message
    assert os.listdir(tmp_path) == ["afile"] and file.read_text() == "mine"


def write_run_files(run) -> None:
    """What a run writes before its first step: its description, event log, compile cache."""
    (run / workdir.CONFIG_FILE).write_text("{}")
    (run / workdir.EVENTS_FILE).write_text("{}\n")
    (run / "compilation_cache").mkdir()
    (run / "compilation_cache" / "jit_step").write_bytes(b"x")


def test_a_run_that_fails_before_its_first_step_leaves_no_folder_it_made(tmp_path):
    run = tmp_path / "runs" / "new"
    with pytest.raises(RuntimeError, match="no data"), workdir.claim(str(run)):
        assert (run / workdir.LOCK_FILE).exists()
        write_run_files(run)
        raise RuntimeError("no data")
    assert os.listdir(tmp_path) == []  # runs/ too: the claim made it
    assert workdir.wait_until_free(str(run), timeout_s=0) is True
    with workdir.claim(str(run)):  # and the workdir takes the corrected run
        pass


def test_a_run_that_fails_before_its_first_step_leaves_its_workdir_as_it_found_it(tmp_path):
    empty, other = tmp_path / "empty", tmp_path / "other"
    empty.mkdir()
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    for run in (empty, other):
        with pytest.raises(workdir.WorkdirBusy), workdir.claim(str(run)):
            write_run_files(run)
            raise workdir.WorkdirBusy("stopped")  # any error, before the first step
    assert os.listdir(empty) == [] and os.listdir(other) == ["notes.txt"]


def test_a_workdir_that_holds_a_run_or_trained_a_step_keeps_what_it_wrote(tmp_path):
    resumed, new = tmp_path / "resumed", tmp_path / "new"
    resumed.mkdir()
    (resumed / workdir.CONFIG_FILE).write_text("{}")
    with pytest.raises(RuntimeError), workdir.claim(str(resumed)):
        (resumed / workdir.EVENTS_FILE).write_text("{}\n")
        raise RuntimeError("failed on resuming")
    with pytest.raises(RuntimeError), workdir.claim(str(new)) as claim:
        write_run_files(new)
        claim.stepped()
        raise RuntimeError("failed at step 2")
    assert sorted(os.listdir(resumed)) == [".lock", "config.json", "events.jsonl"]
    assert sorted(os.listdir(new)) == [".lock", "compilation_cache", "config.json", "events.jsonl"]


def test_a_workdir_never_claimed_is_free(tmp_path):
    assert workdir.wait_until_free(str(tmp_path), timeout_s=0) is True


def test_check_same_run_accepts_the_same_config_and_resumable_changes(tmp_path):
    run = str(tmp_path / "run")
    workdir.check_same_run(run, run_config(), kind="sst2")  # nothing saved yet
    describe(tmp_path)
    workdir.check_same_run(run, run_config(), kind="sst2")
    longer = run_config(num_train_steps=200, log_every_steps=1, mesh={"data": 2, "model": 4})
    workdir.check_same_run(run, longer, kind="sst2")


def test_check_same_run_names_the_changed_key(tmp_path):
    describe(tmp_path)
    changed = run_config(optimizer={"learning_rate": 5e-5, "warmup_steps": 10})
    with pytest.raises(
        workdir.CheckpointError,
        match=r"holds a run with another config \(optimizer.learning_rate 0.0001 -> 5e-05\)",
    ):
        workdir.check_same_run(str(tmp_path / "run"), changed, kind="sst2")


def test_check_same_run_refuses_a_shorter_run_and_counts_the_keys_it_does_not_show(tmp_path):
    describe(tmp_path)
    shorter = run_config(num_train_steps=50)
    with pytest.raises(workdir.CheckpointError, match=r"\(num_train_steps 100 -> 50\)"):
        workdir.check_same_run(str(tmp_path / "run"), shorter, kind="sst2")
    (tmp_path / "other").mkdir()
    describe(tmp_path / "other", run_config(a=0, b=0, c=0, d=0))
    many = run_config(seed=1, a=1, b=2, c=3, d=4)
    with pytest.raises(workdir.CheckpointError, match=r"\(a 0 -> 1, .* and 1 more\)"):
        workdir.check_same_run(str(tmp_path / "other" / "run"), many, kind="sst2")


def test_a_config_json_without_a_key_this_bertjax_has_is_refused_in_one_line(tmp_path):
    # An older bertjax's run: its config.json has no optimizer.schedule.
    describe(tmp_path)
    now = run_config(optimizer={"learning_rate": 1e-4, "warmup_steps": 10, "schedule": "linear"})
    with pytest.raises(workdir.CheckpointError) as caught:
        workdir.check_same_run(str(tmp_path / "run"), now, kind="sst2")
    assert str(caught.value) == (
        f"{tmp_path}/run/config.json: has no optimizer.schedule (written by an older "
        "bertjax); resume it with that version, or use a new workdir"
    )


def test_a_run_of_another_task_is_refused_naming_both_tasks(tmp_path):
    # The other task's config lacks keys of this one: it is not an older bertjax's run.
    describe(tmp_path)
    other = run_config(data={"text_a": "sentence"}, task="classification")
    with pytest.raises(workdir.CheckpointError) as caught:
        workdir.check_same_run(str(tmp_path / "run"), other, kind="classification")
    assert str(caught.value) == (
        f"{tmp_path}/run holds a run of another task (sst2; this config trains "
        "classification); resume it with a sst2 config, or use a new workdir"
    )


def test_a_workdir_with_checkpoints_and_no_config_json_is_refused(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    workdir.check_same_run(str(run), run_config(), kind="sst2")  # no checkpoint yet: a new run
    (run / "checkpoints" / "4").mkdir()
    with pytest.raises(workdir.CheckpointError) as caught:
        workdir.check_same_run(str(run), run_config(), kind="sst2")
    assert str(caught.value) == (
        f"{run}/config.json: missing, though {run}/checkpoints holds checkpoints; put back "
        "the config.json of the run that wrote them, or use a new workdir"
    )
