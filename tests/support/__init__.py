"""What the tests share besides fixtures: the checkout's paths, helpers that start
servers and processes (gcs_emulator, postgres_server, multihost_worker), a sweep's
definition and queue made in the test's process (sweeps), the suites' command, data and
hand-made suites (suites), the SQuAD tests' files and configs (squad), a byte-level BPE
tokenizer built as ModernBERT's (bpe), and the tiers plugin (tiers)."""

import pathlib

REPO = pathlib.Path(__file__).resolve().parents[2]
TESTDATA = REPO / "tests" / "testdata"
# The entries of conftest's small_vocab_file: it splits evenly over any mesh axis of the
# tests (2, 4 or 8 devices).
SMALL_VOCAB_SIZE = 3072
