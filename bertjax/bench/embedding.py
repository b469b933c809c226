r"""Contrastive fine-tuning throughput, training pairs per second, against sentence-transformers.

    python -m bertjax.bench.embedding [--workdir runs/minilm] [--st_dir ST_DIR] \
        [--batch_size 32] [--query_length 32] [--passage_length 128] [--warmup 3] \
        [--steps 10] [--json]

Trains the same model on the same batch both ways, on this machine's CPUs, and
prints a row per framework: pairs/s, the median step time and the ratio of pairs/s,
ours over theirs; above them, the settings (model, batch, lengths, threads, versions)
and the CPU that other processes used during each side's timed steps (from /proc/stat,
less the side's own), with a warning above 0.1 cores: PyTorch's threads wait for each
other, and slow down far more than XLA's when another process takes a core.

    bertjax                the retrieval task's real train step (experiments/finetune/
                           retrieval.py, bertjax.train.train_step through the run's jit)
                           on a batch of its own input pipeline, from --workdir (a
                           bertjax workdir, `python -m bertjax.convert import` output)
    sentence-transformers  SentenceTransformer(--st_dir) with its
                           MultipleNegativesRankingLoss, in a plain PyTorch loop: the
                           loss's forward over the tokenized queries and passages,
                           backward, gradient clipping, the optimizer's step

Both: --batch_size (anchor, positive) pairs a step, queries padded or cut to
--query_length tokens and passages to --passage_length (sentence-transformers'
tokenizer with padding='max_length', so that both sides compute over the same
tokens), the in-batch negatives loss with scale 20 over the cosine, AdamW at lr 2e-5
(weight decay 0.01, eps 1e-6, gradients clipped to norm 1: the retrieval config's;
their trainer's fused AdamW), and dropout: the retrieval config's 0.1 for ours, the
checkpoint's for theirs (0.1 in all-MiniLM-L6-v2's).
The batch is the first --batch_size pairs of the built-in corpus
(data_pipeline/builtin_corpus.py): a query is a document's next sentences up to
--query_length words, its positive the sentences after them up to --passage_length
words, so that both fill their lengths with text. Every step trains on it; tokenizing
is not timed on either side.

Each framework runs in its own process, one after the other (so that PyTorch's and
XLA's thread pools do not compete), with every core of this one: --warmup steps, the
first compiling ours, then --steps timed ones, of which the median counts. By default
both load all-MiniLM-L6-v2 from the zip `make install` puts in .venv/test-extras,
unpacked (and imported, for ours) into a temporary folder; --st_dir alone also gives
ours its import. sentence-transformers is imported from the environment, or from
.venv/test-extras where `make install` keeps it (requirements-test-extras.txt).

--framework bertjax or sentence_transformers measures one side in this process (what
the two processes run); --json then prints its figures as one JSON object, and with
both, the whole result as the last line.
"""

import importlib.metadata
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import zipfile

from absl import flags

from bertjax import program
from data_pipeline.errors import UserError

FRAMEWORKS = ("bertjax", "sentence_transformers")
NAMES = {"bertjax": "bertjax", "sentence_transformers": "sentence-transformers"}
# Where `make install` puts the test-only packages: sentence-transformers and the
# all-MiniLM-L6-v2 zip (requirements-test-extras.txt).
TEST_EXTRAS = pathlib.Path(sys.prefix) / "test-extras"
MINILM_ZIP = TEST_EXTRAS / "all_minilm_l6_v2" / "model.zip"
DEFAULT_MODEL = "all-MiniLM-L6-v2"
# Other processes' CPU use during the timed steps, in cores, above which the report warns.
BUSY_CORES = 0.1
# The retrieval task's recipe (experiments/finetune/retrieval.py), set on both sides.
LEARNING_RATE, WEIGHT_DECAY, EPS, MAX_GRAD_NORM, SCALE = 2e-5, 0.01, 1e-6, 1.0, 20.0
# The config the benchmark trains with, read by path as `--config` reads it: the library
# does not import experiments/.
RETRIEVAL_CONFIG = (
    pathlib.Path(__file__).resolve().parents[2] / "experiments" / "finetune" / "retrieval.py"
)


def define_flags() -> None:
    flags.DEFINE_string(
        "workdir", None, f"An imported bertjax workdir; default {DEFAULT_MODEL}'s, imported."
    )
    flags.DEFINE_string(
        "st_dir", None, f"A sentence-transformers model directory; default {DEFAULT_MODEL}."
    )
    flags.DEFINE_integer("batch_size", 32, "Pairs (anchor, positive) a step.")
    flags.DEFINE_integer("query_length", 32, "Tokens of a query, [CLS] and [SEP] included.")
    flags.DEFINE_integer("passage_length", 128, "Tokens of a passage, [CLS] and [SEP] included.")
    flags.DEFINE_integer("warmup", 3, "Steps before the timed ones (the first compiles ours).")
    flags.DEFINE_integer("steps", 10, "Timed steps; their median counts.")
    flags.DEFINE_enum(
        "framework",
        "both",
        ("both", *FRAMEWORKS),
        "Measure both, each in its own process, or one here.",
    )
    flags.DEFINE_bool("json", False, "Also print the figures as one JSON object.")


def main(args) -> None:
    check_args(args)
    if args.framework != "both":
        result = MEASURE[args.framework](args)
        print_row(result)
        if args.json:
            print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory(prefix="embedding-bench-") as scratch:
        st_dir, workdir = prepared_models(args, scratch)
        results = [run_side(framework, args, st_dir, workdir) for framework in FRAMEWORKS]
    report = summary(args, results, workdir)
    print_report(report)
    if args.json:
        print(json.dumps(report))


# ------------------------------------------------------------------------------ checks


def check_args(args) -> None:
    """One-line errors for what would fail later, before anything heavy loads."""
    if args.batch_size < 2:
        raise UserError(
            f"--batch_size={args.batch_size}: a batch of one pair has no in-batch negatives; "
            "use at least 2"
        )
    for name in ("query_length", "passage_length"):
        if getattr(args, name) < 3:
            raise UserError(f"--{name}={getattr(args, name)}: at least 3 ([CLS] text [SEP])")
    if args.warmup < 1:
        raise UserError(f"--warmup={args.warmup}: at least 1 (ours compiles in the first step)")
    if args.steps < 1:
        raise UserError(f"--steps={args.steps}: at least 1")
    if args.workdir is not None and not os.path.isfile(
        os.path.join(args.workdir, "model_config.json")
    ):
        raise UserError(
            f"--workdir={args.workdir}: not a bertjax workdir (no model_config.json); import "
            f"one with `python -m bertjax.convert import --format hf ST_DIR {args.workdir}`"
        )
    if args.st_dir is not None and not os.path.isfile(os.path.join(args.st_dir, "modules.json")):
        raise UserError(
            f"--st_dir={args.st_dir}: not a sentence-transformers model directory (no modules.json)"
        )
    if (args.st_dir is None or args.workdir is None) and not MINILM_ZIP.is_file():
        raise UserError(
            f"{MINILM_ZIP} is missing (`make install` fetches it): give --st_dir and --workdir"
        )
    if args.framework in ("both", "sentence_transformers"):
        sentence_transformers_path()


def sentence_transformers_path() -> str | None:
    """The folder to put on sys.path for sentence-transformers (None: importable as is)."""
    if importlib.util.find_spec("sentence_transformers") is not None:
        return None
    if (TEST_EXTRAS / "sentence_transformers").is_dir():
        return str(TEST_EXTRAS)
    raise UserError(
        "sentence-transformers is not installed: `make install` puts it in "
        f"{TEST_EXTRAS}, or pip install sentence-transformers"
    )


# ------------------------------------------------------------------- the two processes


def prepared_models(args, scratch: str) -> tuple[str, str]:
    """(st_dir, workdir): the given ones, else all-MiniLM-L6-v2 unpacked into `scratch`, and
    --st_dir's model imported there for ours."""
    st_dir = args.st_dir
    if st_dir is None:
        st_dir = os.path.join(scratch, "st")
        with zipfile.ZipFile(MINILM_ZIP) as zf:
            zf.extractall(st_dir)
    workdir = args.workdir
    if workdir is None:
        from bertjax.convert import import_export

        workdir = os.path.join(scratch, "bertjax")
        import_export.import_checkpoint("hf", st_dir, workdir)
    return st_dir, workdir


def run_side(framework: str, args, st_dir: str, workdir: str) -> dict:
    """One framework measured in its own process (this program with --framework)."""
    return measured_apart(
        "bertjax.bench.embedding", NAMES[framework],
        f"--framework={framework}", f"--workdir={workdir}", f"--st_dir={st_dir}",
        f"--batch_size={args.batch_size}", f"--query_length={args.query_length}",
        f"--passage_length={args.passage_length}", f"--warmup={args.warmup}",
        f"--steps={args.steps}",
    )  # fmt: skip


def measured_apart(module: str, side: str, *flags: str) -> dict:
    """`python -m module flags --json` in its own process: the JSON of its last line.
    Its errors go to this stderr as they are printed; its figures come back on stdout."""
    result = subprocess.run(
        [sys.executable, "-m", module, *flags, "--json"], stdout=subprocess.PIPE, text=True
    )
    if result.returncode:
        raise UserError(f"the {side} side stopped (exit {result.returncode})")
    return json.loads(result.stdout.strip().splitlines()[-1])


def summary(args, results, workdir: str) -> dict:
    ours, theirs = results
    return {
        "model": DEFAULT_MODEL if args.st_dir is None else args.st_dir,
        "workdir": workdir if args.workdir is not None else None,
        "batch_size": args.batch_size,
        "query_length": args.query_length,
        "passage_length": args.passage_length,
        "warmup": args.warmup,
        "steps": args.steps,
        "bertjax": ours,
        "sentence_transformers": theirs,
        "speedup": ours["pairs_per_s"] / theirs["pairs_per_s"],
    }


def print_report(r: dict) -> None:
    ours, theirs = r["bertjax"], r["sentence_transformers"]
    model = ours["model"]
    print(
        f"model      {r['model']}: {model['layers']} layers, hidden {model['hidden']}, "
        f"{model['heads']} heads, {model['parameters'] / 1e6:.1f}M parameters"
        + (f" (ours from {r['workdir']})" if r["workdir"] else "")
    )
    print(
        f"batch      {r['batch_size']} pairs: queries {r['query_length']} tokens, passages "
        f"{r['passage_length']} tokens, padded to them on both sides"
    )
    print(
        f"training   AdamW lr {LEARNING_RATE:g} (weight decay {WEIGHT_DECAY:g}, clipped to norm "
        f"{MAX_GRAD_NORM:g}), MultipleNegativesRankingLoss scale {SCALE:g} over the cosine"
    )
    print(
        f"timing     median of {r['steps']} steps after {r['warmup']} warm-up steps, each "
        "framework in its own process, one after the other"
    )
    print(
        f"machine    {ours['cpu']}, {ours['threads']} cores; other processes used "
        f"{_cores(ours)} during our timed steps, {_cores(theirs)} during theirs"
    )
    busy = [x["others_cores"] for x in (ours, theirs) if x["others_cores"] is not None]
    if busy and max(busy) > BUSY_CORES:
        print(
            "WARNING    other work shared these cores: PyTorch's threads slow down far more "
            "than XLA's when one is taken, so the ratio is not the idle machine's"
        )
    versions = {**ours["versions"], **theirs["versions"]}
    print(
        "versions   "
        + ", ".join(f"{name} {version}" for name, version in versions.items())
        + f"; torch threads {theirs['threads']}"
    )
    print()
    print(f"{'framework':<22} {'pairs/s':>8} {'step (ms)':>10} {'setup (s)':>10}")
    for result in (ours, theirs):
        print_row(result)
    print(f"bertjax / sentence-transformers  {r['speedup']:.2f}x pairs/s")


def _cores(result: dict) -> str:
    cores = result["others_cores"]
    return "(unknown) cores" if cores is None else f"{cores:.2f} cores"


def print_row(result: dict) -> None:
    print(
        f"{NAMES[result['framework']]:<22} {result['pairs_per_s']:>8.1f} "
        f"{result['step_time_s'] * 1000:>10.1f} {result['setup_s']:>10.1f}"
    )


# ---------------------------------------------------------------------------- the pairs


def corpus_pairs(query_words: int, passage_words: int) -> list[tuple[str, str]]:
    """(query, positive) pairs of the built-in corpus: a query is a document's next
    sentences up to `query_words` words, its positive the sentences after them up to
    `passage_words` (a word is at least a token, so both fill their lengths)."""
    from data_pipeline import builtin_corpus

    pairs = []
    for _, sentences in builtin_corpus.documents():
        words = [sentence.split() for sentence in sentences]
        start = 0
        while True:
            query, start = _words_from(words, start, query_words)
            passage, start = _words_from(words, start, passage_words)
            if passage is None:
                break
            pairs.append((query, passage))
    return pairs


def _words_from(sentences: list[list[str]], start: int, count: int):
    """(the sentences from `start` joined, at least `count` words, the next start); None
    when the document ends first."""
    taken = []
    for end in range(start, len(sentences)):
        taken += sentences[end]
        if len(taken) >= count:
            return " ".join(taken), end + 1
    return None, len(sentences)


def batch_pairs(args) -> list[tuple[str, str]]:
    """The batch both sides train on: the corpus's first --batch_size pairs."""
    pairs = corpus_pairs(args.query_length, args.passage_length)
    if len(pairs) < args.batch_size:
        raise UserError(
            f"--batch_size={args.batch_size}: the built-in corpus makes only {len(pairs)} "
            f"pairs of {args.query_length} and {args.passage_length} words"
        )
    return pairs[: args.batch_size]


def cores() -> int:
    """The cores this process may run on (XLA's CPU thread pool is as large)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def cpu_seconds() -> tuple[float, float, float] | None:
    """(CPU seconds every process has used, this process's, wall clock) so far; None
    without Linux's /proc/stat."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            # user nice system idle iowait irq softirq steal (guest time is in user).
            ticks = [int(x) for x in f.readline().split()[1:9]]
    except OSError:
        return None
    own = os.times()
    busy = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")
    return busy, own.user + own.system, time.perf_counter()


def others_cores(since) -> float | None:
    """Cores that other processes kept busy, on average, since `since` (cpu_seconds())."""
    now = cpu_seconds()
    if since is None or now is None:
        return None
    busy, own, wall = (b - a for a, b in zip(since, now, strict=True))
    return max(0.0, (busy - own) / wall)


# ---------------------------------------------------------------------------- ours


def measure_bertjax(args) -> dict:
    """The retrieval task's train step on the batch, from its input pipeline (a train file
    of the batch's pairs: one batch an epoch)."""
    import jax
    from absl import logging
    from flax import linen as nn
    from ml_collections import config_flags

    from bertjax import flops, sharding, train
    from bertjax.bench import hf_flax
    from bertjax.tasks.contract import host_share

    logging.set_verbosity(logging.ERROR)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="embedding-bench-") as scratch:
        train_file = os.path.join(scratch, "pairs.jsonl")
        with open(train_file, "w", encoding="utf-8") as f:
            for query, passage in batch_pairs(args):
                f.write(json.dumps({"anchor": query, "positive": passage}) + "\n")
        values = flags.FlagValues()
        config_flags.DEFINE_config_file("config", str(RETRIEVAL_CONFIG), flag_values=values)
        values(["embedding"])
        config = values.config
        config.init_checkpoint = os.path.abspath(args.workdir)
        config.data.train_file = train_file
        config.data.max_query_length = args.query_length
        config.data.max_seq_length = args.passage_length
        config.train_batch_size = config.eval_batch_size = args.batch_size
        # The learning-rate schedule spans the steps run (it does not change their cost).
        config.num_train_epochs = float(args.warmup + args.steps)
        run = train.build_run(config, os.path.join(scratch, "run"))
        host_batch = next(
            run.setup.data.train(**host_share(config, "train_batch_size")).as_numpy_iterator()
        )
    check_recipe(run)
    m = run.setup.model.config
    with jax.set_mesh(run.mesh), nn.logical_axis_rules(sharding.RULES):
        state = train.create_state(run)
        step, _ = train.jit_steps(run)
        batch = sharding.make_global_batch(
            {name: host_batch[name] for name in run.setup.objective.features}, run.mesh
        )
        rng = jax.random.key(0)
        parameters = sum(x.size for x in jax.tree.leaves(state.params))
        compiled = step.lower(state, batch, rng).compile()
        for _ in range(args.warmup - 1):  # median_step_times does not time its first
            state, sums = compiled(state, batch, rng)
            jax.block_until_ready(sums)
        setup_s = time.perf_counter() - start
        since = cpu_seconds()
        [step_s] = hf_flax.median_step_times([(compiled, state)], batch, rng, args.steps)
        others = others_cores(since)
    return {
        "framework": "bertjax",
        "step_time_s": step_s,
        "pairs_per_s": args.batch_size / step_s,
        "setup_s": setup_s,
        "others_cores": others,
        "threads": cores(),
        "cpu": flops.cpu_name(),
        "devices": jax.device_count(),
        "model": {
            "layers": m.num_hidden_layers,
            "hidden": m.hidden_size,
            "heads": m.num_attention_heads,
            "parameters": parameters,
            "dtype": m.dtype,
        },
        "versions": {name: importlib.metadata.version(name) for name in ("jax", "jaxlib", "flax")},
    }


def check_recipe(run) -> None:
    """The retrieval config is the recipe sentence-transformers' side is given."""
    o, loss = run.optimizer, run.config.loss
    recipe = (o.name, o.learning_rate, o.weight_decay, o.eps, o.max_grad_norm, loss.scale)
    if recipe != ("adamw", LEARNING_RATE, WEIGHT_DECAY, EPS, MAX_GRAD_NORM, SCALE) or (
        loss.symmetric or loss.matryoshka_dims
    ):
        raise UserError(f"{RETRIEVAL_CONFIG}: its recipe changed, {recipe}; update this benchmark")


# ---------------------------------------------------------------------------- theirs


def measure_sentence_transformers(args) -> dict:
    """SentenceTransformer's MultipleNegativesRankingLoss in a plain PyTorch loop."""
    path = sentence_transformers_path()
    if path:
        sys.path.insert(0, path)
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from transformers.utils import logging as transformers_logging

    from bertjax.bench import hf_flax

    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()  # "Loading weights" on every load
    start = time.perf_counter()
    torch.set_num_threads(cores())
    torch.manual_seed(0)
    model = SentenceTransformer(args.st_dir, device="cpu")
    model.train()
    loss = MultipleNegativesRankingLoss(model, scale=SCALE)
    # Their trainer's default optimizer (fused AdamW) with our settings.
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY, eps=EPS, fused=True
    )
    queries, passages = zip(*batch_pairs(args), strict=True)
    features = [tokenized(model, queries, args.query_length)]
    features.append(tokenized(model, passages, args.passage_length))

    def step(state, batch, rng):
        """median_step_times' step: one optimizer step on `batch`, its loss the metric."""
        del rng
        value = loss(batch, None)
        value.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
        optimizer.step()
        optimizer.zero_grad()
        return state, value.item()

    for _ in range(args.warmup - 1):  # median_step_times does not time its first
        step(None, features, None)
    setup_s = time.perf_counter() - start
    since = cpu_seconds()
    [step_s] = hf_flax.median_step_times([(step, None)], features, None, args.steps)
    others = others_cores(since)
    return {
        "framework": "sentence_transformers",
        "step_time_s": step_s,
        "pairs_per_s": args.batch_size / step_s,
        "setup_s": setup_s,
        "others_cores": others,
        "threads": torch.get_num_threads(),
        "versions": {
            name: importlib.metadata.version(name)
            for name in ("torch", "transformers", "sentence-transformers")
        },
    }


def tokenized(model, texts, length: int) -> dict:
    """`texts` as the model's tokenizer pads them to `length` tokens (max_seq_length)."""
    model.max_seq_length = length
    return model.preprocess(
        list(texts), processing_kwargs={"text": {"padding": "max_length", "max_length": length}}
    )


MEASURE = {"bertjax": measure_bertjax, "sentence_transformers": measure_sentence_transformers}


if __name__ == "__main__":
    program.run("bertjax.bench.embedding:main", define_flags)
