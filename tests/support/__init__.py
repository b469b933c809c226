"""What the tests share besides fixtures: the checkout's paths, and helpers that start
servers and processes (gcs_emulator, postgres_server, multihost_worker)."""

import pathlib

REPO = pathlib.Path(__file__).resolve().parents[2]
TESTDATA = REPO / "tests" / "testdata"
