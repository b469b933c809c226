"""A throwaway PostgreSQL server on 127.0.0.1 for the tests of a sweep shared by several workers.

It uses the server programs of the machine (Debian's postgresql package puts them in
/usr/lib/postgresql/VERSION/bin) and runs them as the `postgres` user when the tests
run as root, since PostgreSQL refuses to run as root. `start()` returns None, with
the reason, when no server can be had here.
"""

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time


def _programs() -> str | None:
    """The directory holding initdb and postgres."""
    for directory in [os.path.dirname(shutil.which("initdb") or "")] + sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), reverse=True
    ):
        if directory and all(
            os.path.exists(os.path.join(directory, p)) for p in ("initdb", "postgres")
        ):
            return directory
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def start():
    """Yields (url, None) of a running server's database `sweeps`, or (None, why not)."""
    programs = _programs()
    if programs is None:
        yield None, "no PostgreSQL server programs (initdb, postgres) on this machine"
        return
    as_user: list[str] = []
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            yield None, "running as root and there is no `postgres` user to run the server"
            return
        as_user = ["runuser", "-u", "postgres", "--"]
    root = tempfile.mkdtemp(prefix="bertjax-postgres-")
    data = os.path.join(root, "data")
    if as_user:
        shutil.chown(root, "postgres")
    port = _free_port()
    server = None
    try:
        subprocess.run(
            [*as_user, f"{programs}/initdb", "-D", data, "-U", "postgres", "--auth=trust"],
            check=True,
            capture_output=True,
        )
        server = subprocess.Popen(
            [*as_user, f"{programs}/postgres", "-D", data, "-h", "127.0.0.1", "-p", str(port),
             "-k", root],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        import psycopg

        deadline = time.time() + 30
        while True:
            try:
                connection = psycopg.connect(
                    host="127.0.0.1", port=port, user="postgres", dbname="postgres", autocommit=True
                )
                break
            except psycopg.OperationalError:
                if time.time() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.2)
        connection.execute("CREATE DATABASE sweeps")
        connection.close()
        yield f"postgresql://postgres@127.0.0.1:{port}/sweeps", None
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
