"""data_pipeline.files: bytes read as they are, local and through tf.io.gfile, with errors
that name the path; writes that leave the old file whole when they fail."""

import errno
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf  # imported here, not in a test body: it takes seconds of CPU
from support import REPO

from data_pipeline import files

# Not UTF-8: a lone continuation byte, Latin-1's "ü", and an overlong encoding of "/".
INVALID_UTF8 = b"Z\xfcrich \x80 \xc0\xaf\n"


def test_read_bytes_gives_a_local_files_bytes_unchanged(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(b"\x00\xffline one\r\nline two\n" + INVALID_UTF8)
    assert files.read_bytes(str(path)) == b"\x00\xffline one\r\nline two\n" + INVALID_UTF8


def test_read_bytes_does_not_decode_invalid_utf8(tmp_path):
    (tmp_path / "latin1.txt").write_bytes(INVALID_UTF8)
    data = files.read_bytes(str(tmp_path / "latin1.txt"))
    assert data == INVALID_UTF8
    with pytest.raises(UnicodeDecodeError):
        data.decode("utf-8")  # left to the caller, who names the file and line


def test_read_bytes_of_an_empty_file_is_empty(tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    assert files.read_bytes(str(tmp_path / "empty")) == b""


def test_read_bytes_of_a_missing_local_file_names_it(tmp_path):
    path = str(tmp_path / "missing.txt")
    with pytest.raises(FileNotFoundError) as caught:
        files.read_bytes(path)
    assert caught.value.errno == errno.ENOENT
    assert caught.value.filename == path
    assert path in str(caught.value)


def test_read_bytes_of_a_directory_is_an_os_error_naming_it(tmp_path):
    with pytest.raises(IsADirectoryError, match=re.escape(str(tmp_path))):
        files.read_bytes(str(tmp_path))


def test_read_bytes_through_gfile_reads_a_file_url(tmp_path):
    (tmp_path / "data.bin").write_bytes(INVALID_UTF8)
    assert files.read_bytes(f"file://{tmp_path}/data.bin") == INVALID_UTF8


def test_read_bytes_through_gfile_turns_not_found_into_file_not_found(tmp_path):
    path = f"file://{tmp_path}/missing.txt"
    with pytest.raises(FileNotFoundError) as caught:
        files.read_bytes(path)
    assert caught.value.errno == errno.ENOENT
    assert caught.value.filename == path
    assert str(caught.value) == f"[Errno 2] no such file: '{path}'"


def test_read_bytes_through_gfile_turns_other_failures_into_one_line_os_errors():
    with pytest.raises(OSError) as caught:
        files.read_bytes("nosuch://bucket/file.txt")
    assert not isinstance(caught.value, FileNotFoundError)
    assert not isinstance(caught.value, tf.errors.OpError)
    message = str(caught.value)
    assert "\n" not in message
    assert "nosuch://bucket/file.txt" in message and "'nosuch' not implemented" in message


def test_temporary_names_are_hidden_unique_siblings(tmp_path):
    path = str(tmp_path / "results.json")
    first, second = files.temporary_name(path), files.temporary_name(path)
    assert first != second
    for name in (first, second):
        assert os.path.dirname(name) == str(tmp_path)
        assert re.fullmatch(r"\.results\.json\.tmp-[0-9a-f]{32}", os.path.basename(name))
    assert re.fullmatch(r"\.x\.tmp-[0-9a-f]{32}", files.temporary_name("x"))


def test_atomic_write_writes_text_as_utf8(tmp_path):
    path = tmp_path / "out.txt"
    files.atomic_write(str(path), "Zürich\n")
    assert path.read_bytes() == b"Z\xc3\xbcrich\n"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_atomic_write_writes_bytes_as_they_are(tmp_path):
    path = tmp_path / "out.bin"
    files.atomic_write(str(path), INVALID_UTF8)
    assert path.read_bytes() == INVALID_UTF8


def test_atomic_write_replaces_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "step.txt"
    path.write_text("old and longer\n")
    files.atomic_write(str(path), "new\n")
    assert path.read_text() == "new\n"
    assert os.listdir(tmp_path) == ["step.txt"]


def test_atomic_write_makes_the_missing_directories(tmp_path):
    path = tmp_path / "a" / "b" / "c.txt"
    files.atomic_write(str(path), "x")
    assert path.read_text() == "x"


def test_atomic_write_of_a_bare_name_writes_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    files.atomic_write("bare.txt", "here")
    assert (tmp_path / "bare.txt").read_text() == "here"
    assert os.listdir(tmp_path) == ["bare.txt"]


def test_text_utf8_cannot_encode_fails_and_leaves_the_old_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n")
    with pytest.raises(UnicodeEncodeError):
        files.atomic_write(str(path), "[PAD]\n\udc80\n")  # a lone surrogate
    assert path.read_text() == "[PAD]\n[UNK]\n"
    assert os.listdir(tmp_path) == ["vocab.txt"]


def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "results.json"
    path.write_text('{"step": 1}\n')
    with pytest.raises(TypeError):
        files.atomic_write(str(path), 5)  # neither text nor bytes: the write itself fails
    assert path.read_text() == '{"step": 1}\n'
    assert os.listdir(tmp_path) == ["results.json"]


def test_a_write_stopped_before_its_rename_leaves_the_old_file_and_no_temporary(
    tmp_path, monkeypatch
):
    path = tmp_path / "results.json"
    path.write_text('{"step": 1}\n')
    written = []

    def killed_before_rename(source, destination):
        written.append(pathlib.Path(source).read_bytes())  # the new data is whole in the temporary
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "replace", killed_before_rename)
    with pytest.raises(KeyboardInterrupt):
        files.atomic_write(str(path), '{"step": 2}\n')
    assert written == [b'{"step": 2}\n']
    assert path.read_text() == '{"step": 1}\n'
    assert os.listdir(tmp_path) == ["results.json"]


def test_atomic_write_json_is_indented_with_sorted_keys_and_a_final_newline(tmp_path):
    path = tmp_path / "r.json"
    files.atomic_write_json(str(path), {"b": [1, 2], "a": {"z": "ü", "y": None}})
    assert path.read_text(encoding="utf-8") == (
        '{\n  "a": {\n    "y": null,\n    "z": "\\u00fc"\n  },\n  "b": [\n    1,\n    2\n  ]\n}\n'
    )
    assert json.loads(path.read_text()) == {"b": [1, 2], "a": {"z": "ü", "y": None}}


def test_atomic_copy_copies_onto_the_destination_and_leaves_no_temporary(tmp_path):
    source = tmp_path / "src" / "vocab.txt"
    source.parent.mkdir()
    source.write_bytes(INVALID_UTF8)
    (tmp_path / "out").mkdir()
    destination = tmp_path / "out" / "vocab.txt"
    destination.write_text("old")
    files.atomic_copy(str(source), str(destination))
    assert destination.read_bytes() == INVALID_UTF8
    assert os.listdir(tmp_path / "out") == ["vocab.txt"]
    assert source.read_bytes() == INVALID_UTF8


@pytest.mark.parametrize("url", [False, True], ids=["local", "through_gfile"])
def test_folders_listed_globbed_and_removed_alike_local_and_through_gfile(tmp_path, url):
    root = f"file://{tmp_path}" if url else str(tmp_path)
    files.makedirs(f"{root}/run/checkpoints/4")
    files.makedirs(f"{root}/run/checkpoints/4")  # there already: nothing to do
    files.atomic_write(f"{root}/run/checkpoints/12/manifest.json", "{}")
    files.atomic_copy(f"{root}/run/checkpoints/12/manifest.json", f"{root}/run/config.json")
    assert sorted(files.listdir(f"{root}/run")) == ["checkpoints", "config.json"]
    assert files.glob(f"{root}/run/checkpoints/[0-9]*") == [
        f"{root}/run/checkpoints/12",
        f"{root}/run/checkpoints/4",
    ]
    files.remove(f"{root}/run/checkpoints")  # a folder and what it holds
    files.remove(f"{root}/run/config.json")
    assert files.listdir(f"{root}/run") == []
    with pytest.raises(FileNotFoundError):
        files.remove(f"{root}/run/config.json")
    with pytest.raises(FileNotFoundError):
        files.listdir(f"{root}/nowhere")
    assert os.listdir(tmp_path / "run") == []  # no temporary left behind


def test_atomic_copy_of_a_missing_source_names_it_and_leaves_the_destination(tmp_path):
    destination = tmp_path / "vocab.txt"
    destination.write_text("old")
    missing = str(tmp_path / "missing.txt")
    with pytest.raises(FileNotFoundError, match=re.escape(missing)):
        files.atomic_copy(missing, str(destination))
    assert destination.read_text() == "old"
    assert os.listdir(tmp_path) == ["vocab.txt"]


def test_exists_for_a_local_path(tmp_path):
    (tmp_path / "there.txt").write_text("x")
    assert files.exists(str(tmp_path / "there.txt")) and files.exists(str(tmp_path))
    assert not files.exists(str(tmp_path / "missing.txt"))


# ----------------------------------------------------------------------------- a full disk


def _full_disk(tmp_path) -> str:
    """A shell prefix that runs a command with `tmp_path/disk` a full 1 MiB tmpfs (in a
    private mount namespace). Skips where no namespace can be made."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a small tmpfs as a full disk")
    disk = tmp_path / "disk"
    disk.mkdir()
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs tmpfs {disk}"])
    if probe.returncode:
        pytest.skip("cannot mount a tmpfs in a user namespace here")
    fill = f"dd if=/dev/zero of={disk}/filler bs=4k 2>/dev/null"  # fails once it is full
    return f"mount -t tmpfs -o size=1m tmpfs {disk} && {{ {fill}; }}; exec "


@pytest.mark.integration
def test_writes_to_a_full_disk_name_the_file(tmp_path):
    prefix = _full_disk(tmp_path)
    disk = tmp_path / "disk"
    # Once: "[Errno 28] No space left on device" (Python), or the hidden temporary's name.
    script = (
        "import sys\n"
        "from data_pipeline import files, vocab\n"
        f"source = {str(tmp_path / 'source.txt')!r}\n"
        "open(source, 'wb').write(b'x' * 100_000)\n"
        "for write in (\n"
        f"    lambda: files.atomic_write({str(disk / 'run' / 'results.json')!r}, '{{}}'),\n"
        f"    lambda: files.atomic_copy(source, {str(disk / 'vocab.txt')!r}),\n"
        f"    lambda: vocab.write_placeholder_vocab({str(disk / 'v.txt')!r}, 100),\n"
        "):\n"
        "    try:\n"
        "        write()\n"
        "    except OSError as error:\n"
        "        print(error)\n"
    )
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"{prefix}{sys.executable} -c {shlex.quote(script)}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert result.stdout.splitlines() == [
        f"cannot write {disk}/run/results.json: No space left on device",
        f"cannot write {disk}/vocab.txt: No space left on device",
        f"cannot write {disk}/v.txt: No space left on device",
    ], result.stderr[-3000:]


@pytest.mark.integration
def test_a_vocabulary_cache_on_a_full_disk_is_one_line_naming_the_file(tmp_path):
    prefix = _full_disk(tmp_path)
    cache = tmp_path / "disk" / "cache"
    command = [
        sys.executable,
        "-m",
        "data_pipeline.build_vocab",
        "--config=experiments/pretrain/tiny_cpu.py",
        f"--output={cache}/vocab.txt",
    ]
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", prefix + shlex.join(command)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: cannot write {cache}/vocab.txt: No space left on device"]


def test_atomic_write_below_a_file_names_the_path_it_could_not_write(tmp_path):
    (tmp_path / "a_file").write_text("")
    path = str(tmp_path / "a_file" / "sub" / "out.json")
    with pytest.raises(OSError, match=rf"^cannot write {re.escape(path)}: .*not a directory"):
        files.atomic_write(path, "{}")
    assert os.listdir(tmp_path) == ["a_file"]
