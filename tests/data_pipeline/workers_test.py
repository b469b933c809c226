"""config.data.num_workers: the online stream's Python steps in worker processes
(data_pipeline/workers.py): the same batches, errors raised in the parent, and
workers that end with their parent however it ends."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from support import REPO

from data_pipeline import config as config_lib
from data_pipeline import pretraining_input, workers


def batches(config, count, **kwargs):
    dataset = pretraining_input.make_pretraining_dataset(
        config, split="train", batch_size=16, seed=3, **kwargs
    )
    return [batch for _, batch in zip(range(count), dataset.as_numpy_iterator(), strict=False)]


def assert_same(first, second):
    assert len(first) == len(second)
    for a, b in zip(first, second, strict=True):
        assert a.keys() == b.keys()
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("pack", [False, True], ids=["pairs", "packed"])
def test_workers_give_the_batches_of_the_threads_and_resume_the_same(small_data_config, pack):
    small_data_config.pack_examples = pack
    in_threads = batches(small_data_config, 24)
    small_data_config.num_workers = 2
    assert_same(in_threads, batches(small_data_config, 24))
    resumed = batches(small_data_config, 8, position=in_threads[15]["stream_position"][-1])
    assert_same(in_threads[16:], resumed)


def test_streams_share_one_pool_of_workers(small_data_config):
    small_data_config.num_workers = 2
    for _ in range(3):  # an eval pass made again and again starts no process
        batches(small_data_config, 2)
    pool = workers.shared_pool(1)
    assert len(pool.pids) == 2
    assert all(os.path.exists(f"/proc/{pid}") for pid in pool.pids)


@pytest.mark.integration
def test_a_worker_loads_no_tensorflow():
    code = (
        "import sys, data_pipeline.workers; print(sorted({'tensorflow', 'jax'} & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_an_error_in_a_worker_is_raised_in_the_parent_as_itself():
    pool = workers.Pool(1)
    try:
        key = pool.register({"parse": int})
        assert pool.run(key, "parse", "12") == 12
        with pytest.raises(ValueError, match="invalid literal") as raised:
            pool.run(key, "parse", "twelve")
        assert "in pipeline worker" in str(raised.value.__cause__)
        assert pool.run(key, "parse", "13") == 13  # the worker is still there
    finally:
        pool.close()


def test_a_worker_that_dies_is_an_error_naming_it_and_is_replaced():
    pool = workers.Pool(1)
    try:
        key = pool.register({"abs": abs})
        assert pool.run(key, "abs", -2) == 2
        [pid] = pool.pids
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(workers.WorkerError, match=f"worker process {pid} .*exit code -9"):
            pool.run(key, "abs", -3)
        assert pool.pids != [pid]
        assert pool.run(key, "abs", -4) == 4
    finally:
        pool.close()


def test_a_negative_num_workers_is_refused(small_data_config):
    small_data_config.num_workers = -1
    with pytest.raises(config_lib.ConfigError, match=r"config.data.num_workers=-1"):
        pretraining_input.make_pretraining_dataset(
            small_data_config, split="train", batch_size=2, seed=0
        )


PARENT_SCRIPT = """
import os, sys, time
from data_pipeline import config, pretraining_input, workers

data = config.default_config()
data.update(vocab_file={vocab!r}, max_seq_length=64, max_predictions_per_seq=10, num_workers=2)
dataset = pretraining_input.make_pretraining_dataset(data, split="train", batch_size=16, seed=0)
batches = dataset.as_numpy_iterator()
for count, batch in enumerate(batches, 1):
    if count == 5:
        break
print(*workers.shared_pool(1).pids, flush=True)
if {wait}:
    time.sleep(600)
"""


def gone(pids, seconds=20):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if _running(pid)]
        if not alive:
            return True
        time.sleep(0.2)
    return False


def _running(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.integration
@pytest.mark.parametrize("end", ["exit", "kill -9", "SIGTERM"])
def test_workers_end_with_their_parent(bert_tokenizer_json, end):
    script = PARENT_SCRIPT.format(vocab=bert_tokenizer_json, wait=end != "exit")
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pids = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(pids) == 2, parent.stderr.read()[-2000:]
        if end == "exit":
            assert parent.wait(timeout=60) == 0, parent.stderr.read()[-2000:]
        else:
            parent.send_signal(signal.SIGKILL if end == "kill -9" else signal.SIGTERM)
            parent.wait(timeout=60)
        assert gone(pids), f"workers {pids} outlived their parent ({end})"
    finally:
        parent.kill()
        parent.wait()
