"""What the suites' tests share (tests/bertjax/suites/): the command run as a process, SQuAD's
official files over the test data (GLUE's folder is data_pipeline.finetune.glue_sample's),
and trials and suites made in the test's process, as report.load would read them."""

import os
import shutil
import subprocess
import sys

from bertjax.suites import report
from support import REPO, TESTDATA
from support.sweeps import make_definition

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}


def suite_cli(*args, timeout=900) -> subprocess.CompletedProcess:
    """`python -m bertjax.suites ARGS` from the checkout."""
    return subprocess.run(
        [sys.executable, "-m", "bertjax.suites", *map(str, args)],
        cwd=REPO, env=ENV, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def squad_dir(root) -> str:
    """The official file names over the test data (train and dev alike)."""
    os.makedirs(root, exist_ok=True)
    for version in ("v1.1", "v2.0"):
        for name in (f"train-{version}.json", f"dev-{version}.json"):
            shutil.copy(TESTDATA / "finetune" / f"squad_{version}.json", os.path.join(root, name))
    return str(root)


def make_trial(kind, index, part, rate, seed, scores=None, status="done", **fields):
    """A trial of `kind` whose score is the kind's score of `scores`."""
    values = dict(
        index=index,
        part=part,
        learning_rate=rate,
        seed=seed,
        status=status,
        workdir=f"/trials/{index}",
        minutes=1.5,
        scores=dict(scores or {}),
        test={},
        error="",
    )
    values.update(fields)
    return report.Trial(**values, score=kind.score(part, values["scores"]))


def make_suite(kind, out, trials, parts=None, model=None, shape=None, config_values=None):
    """A suite whose definition holds exactly `trials`' part, rate and seed, in order, as
    the command records them."""
    definition = make_definition(
        out,
        trials=tuple(
            {
                **kind.part_trials((t.part,), "tfds").trials[0],
                "optimizer.learning_rate": t.learning_rate,
                "seed": t.seed,
            }
            for t in trials
        ),  # fmt: skip
        program=kind.program,
        config_values=config_values or {},
    )
    parts = parts or tuple(dict.fromkeys(t.part for t in trials))
    return report.Suite(kind, str(out), definition, tuple(parts), tuple(trials), model, shape)
