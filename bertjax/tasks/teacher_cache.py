"""A distillation teacher's outputs computed once and stored (`config.distill.cache`,
docs/distillation.md): for a teacher too big to run beside its student at every step, or
run again at every epoch.

    DIR/
      outputs_<k>.npy   float32 [rows, ...]: the k-th of the teacher's outputs (an
                        embedder's: its query vectors, then its passage vectors) for
                        every training row, in the rows' order
      cache.json        {"teacher": fingerprint, "data": fingerprint, "rows": N,
                         "outputs": K}, written last

A cache is complete when its cache.json is there: the arrays are written first, then
cache.json whole (a rename), so a run cut short leaves no cache, never half of one, and
the next start computes it again. A complete cache is read only by a run of the same
teacher (the fingerprint of its newest checkpoint and of how it pools) over the same
rows (the fingerprint of their texts and the settings that shape what the teacher
computes: lengths, dtype); another run's cache is refused in one line, before anything
compiles. train.py computes a missing cache before the first step, with the teacher's
parameters sharded as they would be in the step, and never restores the teacher again.
"""

import dataclasses
import hashlib
import io
import json
import os

import numpy as np

from bertjax import checkpoint
from bertjax import workdir as workdir_lib
from bertjax.tasks.contract import DatasetFn, Teacher
from data_pipeline import files
from data_pipeline.errors import ConfigError

FILE = "cache.json"
OPTION = "config.distill.cache"


@dataclasses.dataclass(frozen=True, eq=False)
class TeacherCache:
    """Where a run's teacher outputs are stored, whose they must be, and how to compute
    them: `teacher` over `rows_dataset` (every training row once, in order, each batch
    with its data_pipeline.finetune.records.ROW_INDEX)."""

    directory: str
    teacher: Teacher
    rows_dataset: DatasetFn
    fingerprints: dict  # {"teacher": ..., "data": ..., "rows": N}

    @property
    def complete(self) -> bool:
        return files.exists(os.path.join(self.directory, FILE))

    def read(self) -> tuple[np.ndarray, ...]:
        """The stored outputs, each [rows, ...]."""
        saved = _read_json(self.directory)
        return tuple(
            np.load(io.BytesIO(files.read_bytes(_output_path(self.directory, k))))
            for k in range(saved["outputs"])
        )

    def write(self, outputs) -> None:
        """Stores `outputs` (a tuple of [rows, ...] arrays), cache.json last."""
        files.makedirs(self.directory)
        for k, output in enumerate(outputs):
            if len(output) != self.fingerprints["rows"]:
                raise ValueError(f"{len(output)} rows of outputs, not {self.fingerprints['rows']}")
            buffer = io.BytesIO()
            np.save(buffer, np.asarray(output, np.float32))
            files.atomic_write(_output_path(self.directory, k), buffer.getvalue())
        manifest = {**self.fingerprints, "outputs": len(outputs)}
        files.atomic_write_json(os.path.join(self.directory, FILE), manifest)


def open_cache(
    directory: str, teacher: Teacher, rows_dataset: DatasetFn, *, rows: int, data: dict
) -> TeacherCache:
    """The cache at `directory` for `teacher` over `rows` training rows described by `data`
    (their texts and settings, JSON); a complete cache of another teacher or other data is
    a ConfigError."""
    fingerprints = {
        "teacher": teacher_fingerprint(teacher.workdir),
        "data": _digest(data),
        "rows": rows,
    }
    cache = TeacherCache(directory, teacher, rows_dataset, fingerprints)
    if not cache.complete:
        return cache
    saved = _read_json(directory)
    where = f"{OPTION}={directory!r}"
    if saved.get("teacher") != fingerprints["teacher"]:
        raise ConfigError(
            f"{where}: made by another teacher than {teacher.workdir} (or another checkpoint "
            "of it); give another directory, or delete this one to compute it again"
        )
    if saved.get("data") != fingerprints["data"] or saved.get("rows") != rows:
        raise ConfigError(
            f"{where}: made for other training texts or lengths ({saved.get('rows')} rows, "
            f"this run has {rows}); give another directory, or delete this one"
        )
    return cache


def teacher_fingerprint(workdir: str) -> str:
    """The teacher workdir's newest checkpoint (its step and manifest checksum) and its
    task.json (how it pools)."""
    directory = workdir_lib.checkpoint_dir(workdir)
    steps = checkpoint.complete_steps(directory)
    step = max(steps) if steps else None
    manifest = checkpoint.read_manifest(directory, step) if step is not None else {}
    return _digest(
        {
            "step": step,
            "checksum": manifest.get("checksum"),
            "task": workdir_lib.read_json(os.path.join(workdir, workdir_lib.TASK_FILE)),
        }
    )


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def _output_path(directory: str, k: int) -> str:
    return os.path.join(directory, f"outputs_{k}.npy")


def _read_json(directory: str) -> dict:
    path = os.path.join(directory, FILE)
    try:
        return json.loads(files.read_bytes(path))
    except json.JSONDecodeError:
        raise ConfigError(f"{OPTION}={directory!r}: {path} is not JSON; delete it") from None
