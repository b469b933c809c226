"""What the tests share besides fixtures: the checkout's paths, helpers that start
servers and processes (gcs_emulator, postgres_server, multihost_worker), a sweep's
definition and queue made in the test's process (sweeps), the suites' command, data and
hand-made suites (suites), the SQuAD tests' files and configs (squad), a byte-level BPE
tokenizer built as ModernBERT's (bpe), TFRecords written with the protos
(tfrecord_files), and the tiers plugin (tiers)."""

import json
import os
import pathlib
import typing

from filelock import FileLock

REPO = pathlib.Path(__file__).resolve().parents[2]
TESTDATA = REPO / "tests" / "testdata"
# The entries of conftest's small_vocab_file: it splits evenly over any mesh axis of the
# tests (2, 4 or 8 devices).
SMALL_VOCAB_SIZE = 3072


def full_speed_env() -> dict[str, str]:
    """os.environ with XLA's usual code generation, for a program that trains for minutes:
    conftest's fast compiles for child programs make its steps a third slower (the README's
    300-step pretraining: 138 s of CPU with them off, 188 s on)."""
    return {**os.environ, "XLA_FLAGS": ""}


def once(tmp_path_factory, worker_id: str, name: str, make) -> typing.Any:
    """What `make(folder)` returns (JSON), made once a run: by the first xdist worker to
    ask, in a folder every worker sees, while the others wait for it and read its result.
    (xdist's --dist loadgroup would keep such tests on one worker, but under pytest 9 it
    does not group them.)"""
    base = tmp_path_factory.getbasetemp()
    folder = (base if worker_id == "master" else base.parent) / name
    with FileLock(f"{folder}.lock"):
        done = folder.with_suffix(".json")  # beside it: the folder holds what make wrote
        if not done.exists():
            folder.mkdir()
            done.write_text(json.dumps(make(folder)))
        return json.loads(done.read_text())
