r"""What a distilled embedder costs to train and what it buys: the student's train step with
its teacher inside against the same step given the teacher's outputs, and the student's
embedding throughput against its teacher's.

    python -m bertjax.bench.distill [--teacher runs/minilm] [--student runs/minilm_l3] \
        [--batch_size 32] [--query_length 32] [--passage_length 128] [--warmup 3] \
        [--steps 10] [--texts 1024] [--json]

The train step is experiments/distill/minilm_l3.py's (kl over the batch's candidates
plus the in-batch negatives' loss), on a batch of --batch_size (query, passage) pairs of
the built-in corpus (bench/embedding.py's batch), timed three ways, step by step in
turns (median of --steps, after --warmup):

    in-batch only      the student's step with no teacher (config.loss.name='in_batch')
    teacher outputs    the distillation step given the teacher's outputs with the batch,
                       as `config.distill.cache` gives them
    teacher in step    the distillation step that runs the teacher (what a run does)

Then `bertjax.embed` of the first --texts passages of the built-in corpus (cut to
--passage_length tokens), tokenizing included, by the student and by the teacher:
texts/s, the median of three passes after one that compiles.

--teacher defaults to all-MiniLM-L6-v2, imported from the zip `make install` keeps
in .venv/test-extras; --student to the teacher's layers 0, 2 and 4
(`python -m bertjax.convert shrink`), made in a temporary folder.
"""

import json
import os
import statistics
import tempfile
import time
import types

from absl import flags

from bertjax import program
from bertjax.bench import embedding
from data_pipeline.errors import UserError

# The config the benchmark trains with, read by path as `--config` reads it.
DISTILL_CONFIG = embedding.RETRIEVAL_CONFIG.parents[1] / "distill" / "minilm_l3.py"
WAYS = ("in-batch only", "teacher outputs", "teacher in step")


def define_flags() -> None:
    flags.DEFINE_string("teacher", None, "A teacher embedder's workdir; default all-MiniLM-L6-v2.")
    flags.DEFINE_string(
        "student", None, "The student's workdir; default the teacher's layers 0, 2 and 4."
    )
    flags.DEFINE_integer("batch_size", 32, "Pairs (query, passage) a step.")
    flags.DEFINE_integer("query_length", 32, "Tokens of a query, [CLS] and [SEP] included.")
    flags.DEFINE_integer("passage_length", 128, "Tokens of a passage, [CLS] and [SEP] included.")
    flags.DEFINE_integer("warmup", 3, "Steps before the timed ones (the first compiles).")
    flags.DEFINE_integer("steps", 10, "Timed steps; their median counts.")
    flags.DEFINE_integer("texts", 1024, "Passages embedded by the student and by the teacher.")
    flags.DEFINE_bool("json", False, "Also print the figures as one JSON object.")


def main(args) -> None:
    check_args(args)
    pairs = embedding.batch_pairs(args)
    with tempfile.TemporaryDirectory(prefix="distill-bench-") as scratch:
        teacher, student = _models(args, scratch)
        steps = _train_steps(args, teacher, student, pairs, scratch)
        embeds = _embedding(args, teacher, student)
    report = {**steps, **embeds, "threads": embedding.cores()}
    _print(args, report)
    if args.json:
        print(json.dumps(report))


def check_args(args) -> None:
    """One-line errors, before anything heavy loads."""
    if args.batch_size < 2:
        raise UserError(f"--batch_size={args.batch_size}: in-batch negatives need at least 2")
    for name in ("warmup", "steps", "texts"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name}={getattr(args, name)}: at least 1")
    for name in ("teacher", "student"):
        workdir = getattr(args, name)
        if workdir is not None and not os.path.isfile(os.path.join(workdir, "model_config.json")):
            raise UserError(f"--{name}={workdir}: no model_config.json there")


def _models(args, scratch: str) -> tuple[str, str]:
    teacher = args.teacher
    if teacher is None:
        defaults = types.SimpleNamespace(st_dir=None, workdir=None)  # all-MiniLM-L6-v2's zip
        _, teacher = embedding.prepared_models(defaults, scratch)
    student = args.student
    if student is None:
        from bertjax.convert import shrink

        student = os.path.join(scratch, "student")
        shrink.shrink(teacher, student, "0,2,4")
    return teacher, student


def _train_steps(args, teacher: str, student: str, pairs, scratch: str) -> dict:
    """Median seconds of the three steps, taken in turns."""
    import jax
    from absl import logging
    from flax import linen as nn
    from ml_collections import config_flags

    from bertjax import sharding, train
    from bertjax.bench import hf_flax
    from bertjax.tasks.contract import host_share

    logging.set_verbosity(logging.ERROR)
    train_file = os.path.join(scratch, "pairs.jsonl")
    with open(train_file, "w", encoding="utf-8") as f:
        for query, passage in pairs:
            f.write(json.dumps({"anchor": query, "positive": passage}) + "\n")
    runs = []
    for way in ("in_batch", "kl"):
        values = flags.FlagValues()
        config_flags.DEFINE_config_file("config", str(DISTILL_CONFIG), flag_values=values)
        values(["distill"])
        config = values.config
        config.init_checkpoint = os.path.abspath(student)
        config.distill.teacher = os.path.abspath(teacher) if way == "kl" else ""
        config.loss.name = way
        config.data.beir_dir = ""
        config.data.train_file = train_file
        config.data.max_query_length = args.query_length
        config.data.max_seq_length = args.passage_length
        config.train_batch_size = config.eval_batch_size = args.batch_size
        config.num_train_epochs = float(args.warmup + args.steps)
        runs.append(train.build_run(config, os.path.join(scratch, way)))
    plain, distilled = runs
    host_batch = next(
        distilled.setup.data.train(
            **host_share(distilled.config, "train_batch_size")
        ).as_numpy_iterator()
    )
    with jax.set_mesh(distilled.mesh), nn.logical_axis_rules(sharding.RULES):
        features = {name: host_batch[name] for name in distilled.setup.objective.features}
        batch = sharding.make_global_batch(features, distilled.mesh)
        rng = jax.random.key(0)
        states = [train.create_state(run) for run in (plain, distilled, distilled)]
        given = train.teacher_outputs(distilled.setup, states[2].teacher, batch, 1)
        ways = ((plain, batch), (distilled, {**batch, "teacher": given}), (distilled, batch))
        timed = []
        for (run, way_batch), state in zip(ways, states, strict=True):
            step = train.jit_steps(run)[0].lower(state, way_batch, rng).compile()
            for _ in range(args.warmup - 1):
                state, sums = step(state, way_batch, rng)
                jax.block_until_ready(sums)
            timed.append((step, state, way_batch))
        times = hf_flax.median_step_times(timed, None, rng, args.steps)
    return {"step_s": dict(zip(WAYS, times, strict=True))}


def _embedding(args, teacher: str, student: str) -> dict:
    """texts/s of bertjax.embed, tokenizing included, of each model."""
    from bertjax import inference

    texts = [passage for _, passage in embedding.corpus_pairs(8, args.passage_length)]
    texts = texts[: args.texts]
    figures = {}
    for name, workdir in (("student", student), ("teacher", teacher)):
        restored = inference.restore(workdir)
        inference.embed(restored, texts)  # compiles each length
        passes = []
        for _ in range(3):
            start = time.perf_counter()
            inference.embed(restored, texts)
            passes.append(time.perf_counter() - start)
        figures[name] = {
            "layers": restored.config.num_hidden_layers,
            "texts_per_s": len(texts) / statistics.median(passes),
        }
    return {"embed": figures, "texts": len(texts)}


def _print(args, r: dict) -> None:
    steps, embed = r["step_s"], r["embed"]
    print(
        f"student {embed['student']['layers']} layers, teacher {embed['teacher']['layers']}; "
        f"{args.batch_size} pairs of {args.query_length} + {args.passage_length} tokens a "
        f"step; {r['threads']} threads"
    )
    base = steps["in-batch only"]
    for way in WAYS:
        print(f"  train step, {way:<16} {steps[way] * 1000:8.1f} ms  {steps[way] / base:5.2f}x")
    s, t = embed["student"]["texts_per_s"], embed["teacher"]["texts_per_s"]
    print(f"  embed, student  {s:8.1f} texts/s  ({r['texts']} passages, tokenizing included)")
    print(f"  embed, teacher  {t:8.1f} texts/s  (the student {s / t:.2f}x faster)")


if __name__ == "__main__":
    program.run("bertjax.bench.distill:main", define_flags)
