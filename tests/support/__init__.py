"""What the tests share besides fixtures: the checkout's paths, helpers that start
servers and processes (gcs_emulator, postgres_server, multihost_worker), a sweep's
definition and queue made in the test's process (sweeps), the SQuAD tests' files and
configs (squad), and the tiers plugin (tiers)."""

import pathlib

REPO = pathlib.Path(__file__).resolve().parents[2]
TESTDATA = REPO / "tests" / "testdata"
