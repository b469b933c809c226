"""The README's commands run as written.

Each command in the README is fetched by a test through `support.readme.command`
and run there unchanged, or NOT_AS_WRITTEN says where it runs and why not as
written. The tour's pretraining, notebook and launch steps run here; its
fine-tuning and export steps in tests/bertjax/tasks/finetune_learning_test.py.
"""

import re
import subprocess
import sys

import pytest
from support import REPO, full_speed_env, readme

# README command (its start) -> where it runs instead, and why not as written.
NOT_AS_WRITTEN = {
    "make demo": "by hand (16 minutes); its job is the tour's step 1 below at 3,000 steps",
    "make test": "by hand, before a change is pushed; CI (.ci/run) runs make test-all",
    "make minilm": "tests/makefile_test.py, into a temporary folder rather than the checkout",
    "python -m bertjax.tpu.aot --config experiments/pretrain/bert_base.py": (
        "tests/bertjax/tpu/aot_test.py, with tiny_cpu.py: BERT-Base takes 6 minutes of CPU"
    ),
    "python -m bertjax.sweep run": (
        "tests/bertjax/sweep/sweep_test.py, with tiny trials: these are six MiniLM fine-tunings"
    ),
    "python -m bertjax.sweep report": "tests/bertjax/sweep/sweep_test.py, on its own sweeps",
    "python -m bertjax.suites glue run": (
        "tests/bertjax/suites/glue/glue_run_test.py, on the README's sample with a tiny model and three "
        "tasks: the nine MiniLM fine-tunings take 7 minutes"
    ),
    "python -m bertjax.suites glue report": "tests/bertjax/suites/glue/glue_run_test.py, on its own suite",
    "python -m bertjax.retrieval evaluate": (
        "tests/commands_test.py, on a small BEIR directory: as written, the 3,216 passages "
        "take MiniLM about a minute"
    ),
    "python -m bertjax.main --config experiments/finetune/builtin_retrieval.py": (
        "tests/bertjax/tasks/finetune_learning_test.py, on the same collection's pairs, "
        "its dev queries searched among their own passages"
    ),
    "python -m bertjax.retrieval mine": (
        "tests/commands_test.py, on a small BEIR directory with the command tier's model"
    ),
    "python -m bertjax.main --config experiments/finetune/builtin_reranking.py": (
        "tests/bertjax/tasks/finetune_learning_test.py, on part of the same collection, "
        "pairs cut to 64 tokens: as written, MiniLM trains on 4,436 pairs for 8 minutes"
    ),
    "python -m bertjax.convert export --format sentence-transformers": (
        "tests/bertjax/tasks/finetune_learning_test.py, on its fine-tuned embedder"
    ),
    "python -m bertjax.bench.encoders": (
        "tests/bertjax/bench/encoders_bench_test.py, with a few steps: as written, three "
        "pretraining runs, 55 minutes in all on 2 cores"
    ),
}


def fetched_prefixes() -> set[str]:
    """The prefixes the tests pass to readme.command."""
    call = re.compile(r'readme\.command\(\s*"([^"]+)"')
    return {
        prefix
        for path in (REPO / "tests").rglob("*_test.py")
        for prefix in call.findall(path.read_text(encoding="utf-8"))
    }


def test_every_readme_command_is_run_as_written_or_says_why_not():
    fetched = fetched_prefixes()
    unaccounted = [
        command
        for command in readme.commands()
        if not any(command.startswith(p) for p in fetched)
        and not any(command.startswith(p) for p in NOT_AS_WRITTEN)
    ]
    assert unaccounted == [], "run these README commands in a test, through readme.command"
    stale = [p for p in NOT_AS_WRITTEN if not any(c.startswith(p) for c in readme.commands())]
    assert stale == [], "no README command starts with these any more"


def run(argv: list[str], cwd) -> subprocess.CompletedProcess:
    """A README command as a user runs it (minutes of steps at full speed)."""
    argv = [sys.executable if argv[0] == "python" else argv[0], *argv[1:]]
    result = subprocess.run(
        argv, cwd=cwd, env=full_speed_env(), capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.mark.integration
def test_the_tours_pretraining_and_notebook_steps(tmp_path):
    tour = readme.tour_dir(tmp_path)
    pretrain = run(
        readme.command("python -m bertjax.main --config experiments/pretrain/tiny"), tour
    )
    assert "held-out MLM accuracy" in pretrain.stdout
    assert pretrain.stdout.count("    answer '") == 3  # --fill_mask_examples 3
    assert pretrain.stderr == ""  # no start-up lines, no warnings
    assert re.search(r"^goodput: \d+% of ", pretrain.stdout, re.M)
    where = run(readme.command("python -m bertjax.goodput"), tour)
    assert where.stdout.startswith("runs/tiny: 1 process, 150 steps kept, 0 trained again")

    # Step 2's notebook code, on that run in place of make demo's.
    (tour / "demo_out").symlink_to(tour / "runs" / "tiny")
    (snippet,) = readme.python_snippets()
    code = snippet + "print(len(vectors), vectors.shape[1])\n"
    restored = run(["python", "-c", code], tour)
    assert restored.stdout.split() == ["2", "128"]


def check_dry_run(result: subprocess.CompletedProcess) -> None:
    lines = result.stdout.splitlines()
    assert any(line.startswith("gcloud compute tpus tpu-vm") for line in lines), lines
    assert result.stderr == ""


def test_the_tours_launch_dry_run_of_create():
    check_dry_run(run(readme.command("python -m bertjax.tpu.launch create"), REPO))


@pytest.mark.integration  # checks the config as a run would: seconds of imports
def test_the_tours_launch_dry_run_of_run():
    check_dry_run(run(readme.command("python -m bertjax.tpu.launch run"), REPO))


@pytest.mark.integration
def test_the_tours_modern_encoder_step(tmp_path):
    tour = readme.tour_dir(tmp_path)
    command = readme.command("python -m bertjax.main --config experiments/pretrain/modernbert")
    result = run(command, tour)
    assert "held-out MLM accuracy" in result.stdout
    assert "NSP" not in result.stdout and "nsp" not in result.stdout  # masked LM alone
    assert result.stderr == ""
