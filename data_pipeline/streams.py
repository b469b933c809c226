"""A run's train input as a fixed number of streams, read by any number of hosts.

A run's global batch of B rows is its S streams' batches of B/S rows each, one
after the other: stream s is what the task's dataset function makes as process s of
S. S is the number of processes the run started with, and a checkpoint records one
stream position per stream, so the global batches do not depend on how many hosts
read them later. On M hosts (`plan`):

    M divides S   host h reads streams h*S/M to (h+1)*S/M - 1, whole, one after
                  the other (2 -> 1: one host reads both streams);
    S divides M   the M/S hosts of stream h*S // M each make that stream and keep
                  their B/M rows of its batches (1 -> 2: both hosts make the one
                  stream, each keeps half of every batch).

For other counts (3 -> 2) no plan keeps the order: the caller says so and reads
the streams of M hosts instead. Pure tf.data; never imports jax.

A checkpoint keeps the streams' positions as a `Positions` record: a format
version, the names of a position's integers, the config the streams are made
from and the files they read (their count and a digest of their paths and sizes),
beside the positions. A resume reads them only where all four are its own; else
one line says what differs, before any batch is read:

    no version          positions an older bertjax saved (bare integers)
    another version     positions a later or earlier format wrote
    other field names   a source whose position changed what it counts
    another config      streams made from other data, seed or batch size
    other files         the same config's globs now match other files, or a file
                        changed size (a position is a file's index and an offset)
"""

import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from data_pipeline.errors import UserError

POSITION = "stream_position"  # a stream's per-row position (its batches' schema)
POSITIONS = "stream_positions"  # a host batch's: [streams it reads, fields], after its batch
# The format of a Positions record; a resume reads this one alone. Changing what a
# field means without renaming it needs a new version.
POSITIONS_VERSION = 2


class PositionError(UserError):
    """A stream position that does not fit the stream it is to resume."""


@dataclasses.dataclass(frozen=True)
class Positions:
    """What a run's stream positions mean: the names of a position's integers, in order
    (the source's, e.g. pretraining_input.POSITION_FIELDS), the config its streams
    are made from, {config key: value}, and the files they read (`files_read`).
    `record` makes what a checkpoint keeps of the positions; `read` gives them back
    from a record that means the same."""

    fields: tuple[str, ...]
    config: dict[str, Any]
    files: dict[str, Any] = dataclasses.field(default_factory=lambda: files_read(()))

    def record(self, positions: list[list[int]]) -> dict:
        """The JSON record of `positions`, a list of len(fields) integers per stream."""
        return {
            "version": POSITIONS_VERSION,
            "fields": list(self.fields),
            "config": self.config,
            "files": self.files,
            "positions": positions,
        }

    def read(self, record: Any, where: str) -> list[list[int]]:
        """The positions of `record`; a PositionError naming `where` (the checkpoint) and
        what differs when the record means something else (module docstring)."""
        older = "resume it with the bertjax that saved it, or use a new workdir"
        if not isinstance(record, dict) or "version" not in record:
            raise PositionError(
                f"{where}: its stream positions carry no format version (saved by an older "
                f"bertjax); {older}"
            )
        if record["version"] != POSITIONS_VERSION:
            raise PositionError(
                f"{where}: its stream positions are of format {record['version']!r}, this "
                f"bertjax reads format {POSITIONS_VERSION}; {older}"
            )
        if set(record) != set(self.record([])):
            raise PositionError(
                f"{where}: its stream positions hold {', '.join(sorted(record))}, format "
                f"{POSITIONS_VERSION} holds {', '.join(sorted(self.record([])))}; {older}"
            )
        if record["fields"] != list(self.fields):
            raise PositionError(
                f"{where}: its stream positions count ({', '.join(map(str, record['fields']))}), "
                f"this run's stream counts ({', '.join(self.fields)}); {older}"
            )
        saved, now = record["config"], self.config
        for key in sorted(saved.keys() | now.keys()):
            if saved.get(key) != now.get(key):
                raise PositionError(
                    f"{where}: its stream positions are of streams made with config.{key}="
                    f"{saved.get(key, '(none)')!r}, this run's with {now.get(key, '(none)')!r}; "
                    "resume it with the config that saved it, or use a new workdir"
                )
        if record["files"] != self.files:
            saved = record["files"]
            raise PositionError(
                f"{where}: its stream positions are of streams over {saved['count']} files "
                f"(digest {saved['digest']}), this run's over {self.files['count']} (digest "
                f"{self.files['digest']}): the files the config names changed since; resume "
                "it with the files that saved it, or use a new workdir"
            )
        positions = record["positions"]
        width = len(self.fields)
        if not positions or any(
            not isinstance(row, list) or len(row) != width or not all(type(v) is int for v in row)
            for row in positions
        ):
            raise PositionError(
                f"{where}: its stream positions are not {width} integers for each stream"
            )
        return positions


def files_read(paths: Sequence[str]) -> dict[str, Any]:
    """{'count', 'digest'} of the files a run's train streams read: the first 16 hex
    digits of the SHA-256 of their paths and sizes, in order (tf.io.gfile: local or
    gs://)."""
    lines = "".join(f"{path}\t{tf.io.gfile.stat(path).length}\n" for path in paths)
    return {"count": len(paths), "digest": hashlib.sha256(lines.encode()).hexdigest()[:16]}


NO_POSITIONS = Positions((), {})  # of a stream whose batches carry none


@dataclasses.dataclass(frozen=True)
class Plan:
    """Which streams host `host` of `hosts` reads, and which part of their batches."""

    streams: int
    hosts: int
    host: int

    @property
    def ids(self) -> range:
        """The streams this host reads."""
        if self.streams >= self.hosts:
            per = self.streams // self.hosts
            return range(self.host * per, (self.host + 1) * per)
        first = self.host * self.streams // self.hosts
        return range(first, first + 1)

    @property
    def part(self) -> tuple[int, int]:
        """(i, n): this host keeps the i-th of n equal parts of each of its streams' rows."""
        if self.streams >= self.hosts:
            return 0, 1
        share = self.hosts // self.streams
        return self.host % share, share


def plan(streams: int, hosts: int, host: int) -> Plan | None:
    """The plan for `hosts` hosts reading `streams` streams; None when neither count
    divides the other."""
    if streams % hosts and hosts % streams:
        return None
    return Plan(streams, hosts, host)


def host_batches(
    make: Callable[..., tf.data.Dataset],
    how: Plan,
    *,
    batch_size: int,
    seed: int,
    positions: Sequence | None = None,
    skip: int = 0,
) -> tf.data.Dataset:
    """This host's share (batch_size / hosts rows) of each global batch of
    `batch_size` rows. `make` is a task's dataset function (batch_size, process_index,
    process_count, seed[, position]); `positions`, one per stream, start each stream
    after it; else each stream starts at its beginning and `skip` batches are
    dropped (a replay). A stream with positions gives each host batch POSITIONS:
    where each stream it reads stands after it."""
    per_stream = batch_size // how.streams
    datasets = []
    for stream in how.ids:
        where = {}
        if positions is not None:
            where["position"] = np.asarray(positions[stream], np.int64)
        dataset = make(
            batch_size=per_stream,
            process_index=stream,
            process_count=how.streams,
            seed=seed,
            **where,
        )
        datasets.append(dataset.skip(skip) if skip else dataset)
    part, parts = how.part
    rows = per_stream // parts

    def share(*batches):
        out = {}
        for name in batches[0]:
            if name == POSITION:
                out[POSITIONS] = tf.stack([batch[name][-1] for batch in batches])
            else:
                parts_of = [batch[name] for batch in batches]
                joined = parts_of[0] if len(parts_of) == 1 else tf.concat(parts_of, 0)
                out[name] = joined[part * rows : (part + 1) * rows] if parts > 1 else joined
        return out

    joined = datasets[0] if len(datasets) == 1 else tf.data.Dataset.zip(tuple(datasets))
    return without_autotune_thread(joined.map(share).prefetch(tf.data.AUTOTUNE))


def without_autotune_thread(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """`dataset` read without tf.data's autotuning thread (AUTOTUNE then takes tf.data's
    defaults: a parallel call per core, prefetch buffers sized as they are read). With the
    thread, deleting an iterator (a run's end, an eval pass's) waits until the thread next
    wakes, up to a minute later: 18 s at the end of a 100-step BERT-Tiny run, measured
    with TensorFlow 2.21, whose steps ran no faster with the thread."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def gather(host_positions: np.ndarray, hows: Sequence[Plan]) -> list[list[int]]:
    """Every stream's position from each host's POSITIONS (`host_positions`
    [hosts, streams per host, fields]) and each host's plan: a list per stream."""
    found = {}
    for how, rows in zip(hows, host_positions, strict=True):
        for stream, row in zip(how.ids, rows, strict=True):
            found.setdefault(stream, np.asarray(row).tolist())
    return [found[stream] for stream in range(hows[0].streams)]
