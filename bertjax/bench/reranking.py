r"""Reranker throughput, (query, passage) pairs per second, against sentence-transformers'
CrossEncoder: training, then scoring.

    python -m bertjax.bench.reranking [--workdir runs/minilm] [--st_dir ST_DIR] \
        [--groups 8] [--num_negatives 3] [--length 128] [--warmup 3] [--steps 10] \
        [--score_pairs 512] [--json]

Trains the same model on the same batch both ways, on this machine's CPUs, then scores
the same pairs both ways, and prints a row per framework for each: pairs/s, the median
step (or the whole scoring's) time, and the ratio of pairs/s, ours over theirs; above
them the settings and the CPU other processes used during each side's timed work
(bertjax/bench/embedding.py measures it the same way, and says why it matters).

    bertjax                the reranking task's real train step (experiments/finetune/
                           reranking.py through the run's jit) on a batch of its own input
                           pipeline, from --workdir; then bertjax.rerank with the trained
                           parameters
    sentence-transformers  CrossEncoder(--st_dir, num_labels=1) (a new head, seeded) and
                           its BinaryCrossEntropyLoss's loss module over the model's
                           scores, in a plain PyTorch loop (the loss's forward less its
                           tokenizing); then CrossEncoder.predict

Training, both: --groups groups a step, each a query, its relevant passage and
--num_negatives negatives (the next groups' passages), every pair padded or cut to
--length tokens (one length bucket for ours; the tokenizer's padding='max_length' for
theirs), binary cross-entropy on the logit with the positive weighted by the negatives
per positive, AdamW at lr 2e-5 (weight decay 0.01, eps 1e-6, gradients clipped to norm
1: the fine-tuning config's; their trainer's fused AdamW), dropout 0.1. The texts are
the built-in corpus's (embedding.corpus_pairs: a query of --length / 4 words, a passage
of --length words), so that every pair fills the length; tokenizing is not timed.
Scoring, both: --score_pairs pairs (the batch's, repeated), batches of 64, tokenizing
included (bertjax.rerank pads a batch to a power of two up to --length; predict pads to
the batch's longest): the time of one call over them all, after one untimed call.

Each framework runs in its own process, one after the other, with every core.
--framework bertjax or sentence_transformers measures one side in this process.
"""

import importlib.metadata
import json
import logging
import os
import sys
import tempfile
import time

from absl import flags

from bertjax import program
from bertjax.bench import embedding as embedding_bench
from data_pipeline.errors import UserError

FRAMEWORKS = ("bertjax", "sentence_transformers")
NAMES = embedding_bench.NAMES
SCORE_BATCH = 64
RERANKING_CONFIG = embedding_bench.RETRIEVAL_CONFIG.with_name("reranking.py")


def define_flags() -> None:
    flags.DEFINE_string("workdir", None, "An imported bertjax workdir; default MiniLM's import.")
    flags.DEFINE_string("st_dir", None, "A sentence-transformers model directory; default MiniLM.")
    flags.DEFINE_integer("groups", 8, "Groups a training step.")
    flags.DEFINE_integer("num_negatives", 3, "Negatives a group (pairs: groups x (1 + this)).")
    flags.DEFINE_integer("length", 128, "Tokens a pair, [CLS] and both [SEP]s included.")
    flags.DEFINE_integer("warmup", 3, "Steps before the timed ones (the first compiles ours).")
    flags.DEFINE_integer("steps", 10, "Timed steps; their median counts.")
    flags.DEFINE_integer("score_pairs", 512, "Pairs scored after training.")
    flags.DEFINE_enum("framework", "both", ("both", *FRAMEWORKS), "Both apart, or one here.")
    flags.DEFINE_bool("json", False, "Also print the figures as one JSON object.")


def main(args) -> None:
    check_args(args)
    if args.framework != "both":
        result = MEASURE[args.framework](args)
        print_rows(result)
        if args.json:
            print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory(prefix="reranking-bench-") as scratch:
        st_dir, workdir = embedding_bench.prepared_models(args, scratch)
        results = [run_side(framework, args, st_dir, workdir) for framework in FRAMEWORKS]
    ours, theirs = results
    report = {
        "model": embedding_bench.DEFAULT_MODEL if args.st_dir is None else args.st_dir,
        "groups": args.groups,
        "pairs": pairs_per_step(args),
        "length": args.length,
        "warmup": args.warmup,
        "steps": args.steps,
        "score_pairs": args.score_pairs,
        "bertjax": ours,
        "sentence_transformers": theirs,
        "training_speedup": ours["pairs_per_s"] / theirs["pairs_per_s"],
        "scoring_speedup": ours["scored_pairs_per_s"] / theirs["scored_pairs_per_s"],
    }
    print_report(report)
    if args.json:
        print(json.dumps(report))


def check_args(args) -> None:
    """One-line errors for what would fail later, before anything heavy loads."""
    for name, least in (("groups", 1), ("num_negatives", 1), ("length", 8), ("steps", 1)):
        if getattr(args, name) < least:
            raise UserError(f"--{name}={getattr(args, name)}: at least {least}")
    if args.warmup < 1:
        raise UserError(f"--warmup={args.warmup}: at least 1 (ours compiles in the first step)")
    if args.score_pairs < 1:
        raise UserError(f"--score_pairs={args.score_pairs}: at least 1")
    for option, marker in (("workdir", "model_config.json"), ("st_dir", "modules.json")):
        path = getattr(args, option)
        if path is not None and not os.path.isfile(os.path.join(path, marker)):
            raise UserError(f"--{option}={path}: no {marker} there")
    if (args.st_dir is None or args.workdir is None) and not embedding_bench.MINILM_ZIP.is_file():
        raise UserError(
            f"{embedding_bench.MINILM_ZIP} is missing (`make install` fetches it): give "
            "--st_dir and --workdir"
        )
    if args.framework in ("both", "sentence_transformers"):
        embedding_bench.sentence_transformers_path()


def pairs_per_step(args) -> int:
    return args.groups * (1 + args.num_negatives)


def run_side(framework: str, args, st_dir: str, workdir: str) -> dict:
    return embedding_bench.measured_apart(
        "bertjax.bench.reranking", NAMES[framework],
        f"--framework={framework}", f"--workdir={workdir}", f"--st_dir={st_dir}",
        f"--groups={args.groups}", f"--num_negatives={args.num_negatives}",
        f"--length={args.length}", f"--warmup={args.warmup}", f"--steps={args.steps}",
        f"--score_pairs={args.score_pairs}",
    )  # fmt: skip


def groups(args) -> list[tuple[str, list[str]]]:
    """(query, [positive, negatives...]) of the batch: the corpus's first pairs, each
    group's negatives the passages of the groups after it."""
    pairs = embedding_bench.corpus_pairs(max(1, args.length // 4), args.length)
    if len(pairs) < args.groups + args.num_negatives:
        raise UserError(
            f"--groups={args.groups}, --num_negatives={args.num_negatives}: the built-in "
            f"corpus makes only {len(pairs)} pairs of {args.length} words"
        )
    return [
        (pairs[i][0], [pairs[i + k][1] for k in range(1 + args.num_negatives)])
        for i in range(args.groups)
    ]


def scored_pairs(args) -> list[tuple[str, str]]:
    flat = [(query, passage) for query, passages in groups(args) for passage in passages]
    return [flat[i % len(flat)] for i in range(args.score_pairs)]


def print_report(r: dict) -> None:
    ours, theirs = r["bertjax"], r["sentence_transformers"]
    print(f"model      {r['model']}: {ours['model']}")
    print(
        f"training   {r['groups']} groups of {r['pairs'] // r['groups']} pairs ({r['pairs']} "
        f"pairs) a step, {r['length']} tokens each; binary cross-entropy, AdamW lr 2e-5"
    )
    print(
        f"timing     median of {r['steps']} steps after {r['warmup']}; scoring {r['score_pairs']} "
        f"pairs in batches of {SCORE_BATCH}; each framework in its own process"
    )
    print(
        f"machine    {ours['cpu']}, {ours['threads']} cores; other processes used "
        f"{_cores(ours)} during ours, {_cores(theirs)} during theirs"
    )
    busy = [x["others_cores"] for x in (ours, theirs) if x["others_cores"] is not None]
    if busy and max(busy) > embedding_bench.BUSY_CORES:
        print("WARNING    other work shared these cores: the ratios are not the idle machine's")
    versions = {**ours["versions"], **theirs["versions"]}
    print("versions   " + ", ".join(f"{name} {version}" for name, version in versions.items()))
    print()
    print(f"{'framework':<22} {'train pairs/s':>14} {'step (ms)':>10} {'score pairs/s':>14}")
    for result in (ours, theirs):
        print_rows(result)
    print(
        f"bertjax / sentence-transformers  training {r['training_speedup']:.2f}x, scoring "
        f"{r['scoring_speedup']:.2f}x pairs/s"
    )


def _cores(result: dict) -> str:
    cores = result["others_cores"]
    return "(unknown) cores" if cores is None else f"{cores:.2f} cores"


def print_rows(result: dict) -> None:
    print(
        f"{NAMES[result['framework']]:<22} {result['pairs_per_s']:>14.1f} "
        f"{result['step_time_s'] * 1000:>10.1f} {result['scored_pairs_per_s']:>14.1f}"
    )


# ---------------------------------------------------------------------------- ours


def measure_bertjax(args) -> dict:
    """The reranking task's train step on the batch, then bertjax.rerank of the pairs with
    the parameters it trained."""
    import jax
    from absl import logging as absl_logging
    from flax import linen as nn
    from ml_collections import config_flags

    from bertjax import flops, inference, sharding, train
    from bertjax.bench import hf_flax
    from bertjax.model import BertForReranking
    from bertjax.tasks import reranking
    from bertjax.tasks.contract import host_share
    from data_pipeline import config as data_config_lib
    from data_pipeline.tokenizer import make_tokenizer

    absl_logging.set_verbosity(absl_logging.ERROR)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="reranking-bench-") as scratch:
        config = _config(args, scratch, config_flags)
        run = train.build_run(config, os.path.join(scratch, "run"))
        host_batch = next(
            run.setup.data.train(**host_share(config, "train_batch_size")).as_numpy_iterator()
        )
    m = run.setup.model.config
    with jax.set_mesh(run.mesh), nn.logical_axis_rules(sharding.RULES):
        state = train.create_state(run)
        step, _ = train.jit_steps(run)
        batch = sharding.make_global_batch(
            {name: host_batch[name] for name in run.setup.objective.features}, run.mesh
        )
        rng = jax.random.key(0)
        compiled = step.lower(state, batch, rng).compile()
        for _ in range(args.warmup - 1):  # median_step_times does not time its first
            state, sums = compiled(state, batch, rng)
            jax.block_until_ready(sums)
        setup_s = time.perf_counter() - start
        # What the scoring reads: the timed steps donate the state they are given.
        params = jax.device_get(state.params)
        since = embedding_bench.cpu_seconds()
        [step_s] = hf_flax.median_step_times([(compiled, state)], batch, rng, args.steps)
        others = embedding_bench.others_cores(since)
        parameters = sum(x.size for x in jax.tree.leaves(params))
    description = run.setup.description
    restored = inference.Restored(
        model=BertForReranking(m),
        params=params,
        config=m,
        tokenizer=make_tokenizer(
            data_config_lib.from_config(description.tokenizer_data), run.setup.data.vocab_file
        ),
        step=0,
        max_seq_length=args.length,
        kind=reranking.TASK.name,
        task=description,
    )
    score_s = _timed_scoring(
        args, lambda query, passages: reranking.rerank(restored, query, passages)
    )
    return {
        "framework": "bertjax",
        "step_time_s": step_s,
        "pairs_per_s": pairs_per_step(args) / step_s,
        "scored_pairs_per_s": args.score_pairs / score_s,
        "setup_s": setup_s,
        "others_cores": others,
        "threads": embedding_bench.cores(),
        "cpu": flops.cpu_name(),
        "model": f"{m.num_hidden_layers} layers, hidden {m.hidden_size}, "
        f"{parameters / 1e6:.1f}M parameters",
        "versions": {name: importlib.metadata.version(name) for name in ("jax", "flax")},
    }


def _config(args, scratch: str, config_flags):
    """experiments/finetune/reranking.py on a file of the batch's groups, one bucket."""
    train_file = os.path.join(scratch, "groups.jsonl")
    negatives = tuple(f"negative_{k}" for k in range(args.num_negatives))
    with open(train_file, "w", encoding="utf-8") as f:
        for query, passages in groups(args):
            texts = dict(zip(negatives, passages[1:], strict=True))
            row = {"query": query, "positive": passages[0], **texts}
            f.write(json.dumps(row) + "\n")
    values = flags.FlagValues()
    config_flags.DEFINE_config_file("config", str(RERANKING_CONFIG), flag_values=values)
    values(["reranking-bench"])  # argv: the program name alone
    config = values.config
    config.init_checkpoint = os.path.abspath(args.workdir)
    config.data.train_file = train_file
    config.data.negatives = negatives
    config.data.max_query_length = max(1, args.length // 4)
    config.data.max_seq_length = args.length
    config.data.length_buckets = 1
    config.train_batch_size = config.eval_batch_size = args.groups
    config.num_train_epochs = float(args.warmup + args.steps)
    return config


def _timed_scoring(args, score) -> float:
    """Seconds of one pass of `score(query, passages)` over the pairs, grouped by query,
    after one untimed pass."""
    by_query: dict[str, list[str]] = {}
    for query, passage in scored_pairs(args):
        by_query.setdefault(query, []).append(passage)

    def score_all() -> None:
        for query, passages in by_query.items():
            for begin in range(0, len(passages), SCORE_BATCH):
                score(query, passages[begin : begin + SCORE_BATCH])

    score_all()  # compiles ours
    start = time.perf_counter()
    score_all()
    return time.perf_counter() - start


# ---------------------------------------------------------------------------- theirs


def measure_sentence_transformers(args) -> dict:
    """CrossEncoder with BinaryCrossEntropyLoss's loss module, in a plain PyTorch loop;
    then CrossEncoder.predict."""
    path = embedding_bench.sentence_transformers_path()
    if path:
        sys.path.insert(0, path)
    import torch
    from sentence_transformers import CrossEncoder
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss
    from transformers.utils import logging as transformers_logging

    from bertjax.bench import hf_flax

    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    # "Converting SentenceTransformer model ... to CrossEncoder": the new head, as meant.
    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)
    start = time.perf_counter()
    torch.set_num_threads(embedding_bench.cores())
    torch.manual_seed(0)
    model = CrossEncoder(args.st_dir, num_labels=1, device="cpu", max_length=args.length)
    model.train()
    loss = BinaryCrossEntropyLoss(model, pos_weight=torch.tensor(float(args.num_negatives)))
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=2e-5, weight_decay=0.01, eps=1e-6, fused=True
    )
    pairs = [(query, passage) for query, passages in groups(args) for passage in passages]
    labels = torch.tensor(
        [1.0 if k == 0 else 0.0 for _ in range(args.groups) for k in range(1 + args.num_negatives)]
    )
    features = model.preprocess(
        pairs, processing_kwargs={"text": {"padding": "max_length", "max_length": args.length}}
    )

    def step(state, batch, rng):
        del rng
        logits = model(batch)["scores"].view(-1)
        value = loss.bce_with_logits_loss(logits, labels)
        value.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        return state, value.item()

    for _ in range(args.warmup - 1):
        step(None, features, None)
    setup_s = time.perf_counter() - start
    since = embedding_bench.cpu_seconds()
    [step_s] = hf_flax.median_step_times([(step, None)], features, None, args.steps)
    others = embedding_bench.others_cores(since)
    model.eval()
    score_s = _timed_scoring(
        args,
        lambda query, passages: model.predict(
            [(query, p) for p in passages], batch_size=SCORE_BATCH, show_progress_bar=False
        ),
    )
    return {
        "framework": "sentence_transformers",
        "step_time_s": step_s,
        "pairs_per_s": pairs_per_step(args) / step_s,
        "scored_pairs_per_s": args.score_pairs / score_s,
        "setup_s": setup_s,
        "others_cores": others,
        "threads": torch.get_num_threads(),
        "versions": {
            name: importlib.metadata.version(name)
            for name in ("torch", "transformers", "sentence-transformers")
        },
    }


MEASURE = {"bertjax": measure_bertjax, "sentence_transformers": measure_sentence_transformers}


if __name__ == "__main__":
    program.run("bertjax.bench.reranking:main", define_flags)
