"""A distillation's teacher: `config.distill`, checked, and the contract's Teacher that a
task's Setup carries into the train step (docs/distillation.md).

    config.distill.teacher   a workdir whose model the student learns from ("": none)

The teacher reads the student's inputs, so it must tokenize as the student does: the
same vocabulary, lower-casing and word limit, or the run is refused in one line. It
computes in the student's dtype with the student's attention kernel, in its checkpoint's
own layer layout; its parameters are restored at every start of the run, never saved
with the student's and never updated (train.py).
"""

import dataclasses
import os
from collections.abc import Callable

from flax import linen as nn

from bertjax import workdir as workdir_lib
from bertjax.model import BertConfig
from bertjax.tasks import finetune
from bertjax.tasks.contract import Description, Teacher
from data_pipeline.config import check_known_keys
from data_pipeline.errors import ConfigError
from data_pipeline.vocab import load_vocab

KEYS = ("teacher",)
# The tokenizer_data fields that decide how a text becomes ids, besides the vocabulary.
_TOKENIZER_FIELDS = ("tokenizer", "do_lower_case", "max_chars_per_word")
OPTION = "config.distill.teacher"


def check_config(config, keys: tuple[str, ...] = KEYS) -> None:
    """config.distill holds `keys` (a task's), and no other."""
    check_known_keys(config.distill.keys(), keys, "config.distill")
    missing = sorted(set(keys) - set(config.distill.keys()))
    if missing:
        raise ConfigError(f"missing config key: config.distill.{missing[0]}")


@dataclasses.dataclass(frozen=True)
class Read:
    """A teacher workdir's files, checked against the student's tokenizer."""

    workdir: str
    model_config: BertConfig
    kind: str
    description: Description


def read(
    config, student_vocab_file: str, student_tokenizer_data: dict, *, student: str
) -> Read | None:
    """The teacher `config.distill.teacher` names, if any: a workdir whose tokenizer is the
    student's (whose settings `student` names in errors)."""
    workdir = config.distill.teacher
    if not workdir:
        return None
    model_config = workdir_lib.require_model_config(workdir, what=OPTION)
    vocab_file = workdir_lib.require_vocab_file(workdir, what=OPTION)
    kind, values = workdir_lib.read_task(workdir)
    tokenizer_data = workdir_lib.read_tokenizer_data(workdir)
    differs = [
        f"{field}={tokenizer_data[field]!r} against {student_tokenizer_data[field]!r}"
        for field in _TOKENIZER_FIELDS
        if tokenizer_data[field] != student_tokenizer_data[field]
    ]
    theirs, ours = load_vocab(vocab_file).tokens, load_vocab(student_vocab_file).tokens
    if theirs != ours:
        differs.insert(0, f"its vocabulary {vocab_file} ({len(theirs):,} entries) is another")
    if differs:
        raise ConfigError(
            f"{OPTION}={workdir!r}: tokenizes otherwise than {student} "
            f"({differs[0]}); a teacher reads the student's inputs, so it needs the same "
            "tokenizer"
        )
    description = Description.from_json(values, where=f"{workdir}/{workdir_lib.TASK_FILE}")
    return Read(workdir, model_config, kind, description)


def teacher(
    read: Read, student: BertConfig, make_module: Callable[[BertConfig, Read], nn.Module]
) -> Teacher:
    """The Teacher of a checked teacher workdir: `make_module(its model config, read)`
    with the student's dtype and attention kernel, in the checkpoint's layer layout. Its
    parameters are read as the run starts (train.with_teacher); a placeholder's
    (without_teacher_checkpoint) never are."""
    model_config = dataclasses.replace(
        read.model_config,
        dtype=student.dtype,
        attention_implementation=student.attention_implementation,
        attention_probs_dropout_prob=0.0,  # deterministic; the fused kernels need 0
        hidden_dropout_prob=0.0,
        remat_policy="none",
    )
    return Teacher(make_module(model_config, read), read.workdir)


def without_teacher_checkpoint(config, workdir: str):
    """Task.without_data's part for a teacher: `config.distill.teacher=FILE.py[:ARG]`, a
    pretraining config, stands for the workdir that run will write, a placeholder of it
    in WORKDIR/teacher (finetune.placeholder_of): the teacher's model compiles beside the
    student's ahead of time (bertjax.tpu.aot), with no parameters to train with."""
    if "distill" not in config or not finetune.names_pretraining_config(config.distill.teacher):
        return config
    folder = finetune.placeholder_of(config.distill.teacher, os.path.join(workdir, "teacher"))
    with config.unlocked():
        config.distill.teacher = folder
    return config
