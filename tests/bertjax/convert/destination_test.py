"""bertjax.convert.destination: a staging folder a killed conversion left is removed by the
next one to the same destination, and one that may still be written is not. (A real
export killed with SIGKILL: import_export_test.py.)"""

import os
import socket
import subprocess
import sys

from bertjax.convert import destination


def ended_pid() -> int:
    """The id of a process of this host that has ended."""
    process = subprocess.Popen([sys.executable, "-c", ""])
    process.wait()
    return process.pid


def test_only_the_staging_folders_of_ended_processes_of_this_host_are_removed(tmp_path):
    host = socket.gethostname()
    names = {
        "ended": f".out.0123abcd.{ended_pid()}@{host}.partial",
        "running": f".out.0123abcd.{os.getpid()}@{host}.partial",
        "another host": f".out.0123abcd.{ended_pid()}@not-{host}.partial",
        "another destination": f".out.x.0123abcd.{ended_pid()}@{host}.partial",
        "not ours": ".out.partial",
    }
    for name in names.values():
        (tmp_path / name).mkdir()
        (tmp_path / name / "saved_model.pb").write_bytes(b"half")
    with destination.staging(str(tmp_path / "out")) as staging:
        (tmp_path / "out.written").write_text(os.path.basename(staging))
    assert (tmp_path / "out").is_dir()
    ours = (tmp_path / "out.written").read_text()
    assert ours.startswith(".out.") and ours.endswith(f".{os.getpid()}@{host}.partial")
    kept = sorted(names[case] for case in names if case != "ended")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*kept, "out", "out.written"])
