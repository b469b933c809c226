"""Model FLOPs utilisation (MFU): the model's FLOPs per train step and the devices' peak.

    MFU = analytic FLOPs per train step x steps/s / peak FLOP/s of all the devices

The FLOPs are the matmuls of the model, counted from its config and input
lengths, 2 per multiply-add: the four attention projections, attention's
scores and weighted sum (dense [L, L], padding included; in a local layer
the 2 * (local_attention_window // 2) + 1 keys of its window, as a kernel
that skips the rest computes), the feed-forward block (three matrices with
feed_forward='geglu') and the task's head (below). A train step is 3x the forward pass (the
backward pass computes two matmuls for each forward one). Not counted:
LayerNorm, activations, softmax, dropout and the optimizer (XLA's count is
1-3% higher for the BERT presets, more for toy widths; tests/bertjax/flops_test.py
compares the two), nor what remat recomputes: MFU counts the model's FLOPs,
not the hardware's. Pretraining's last layer counts what it computes: keys and
values at every position, the rest at the [CLS] and masked positions alone
(model.BertEncoder), except where model.queries_in_last_layer says it cannot.

Each task counts its own row (`Task.forward_flops`: the encoder here, its
head in its module): pretraining's masked-LM head at the
`max_predictions_per_seq` masked positions only (dense + tied-embedding
logits, as the model computes it; a packed row has as many) and the
next-sentence pooler and classifier (once per packed sequence slot with
`cls_positions`); classification's pooler and classifier (once per packed example
with `cls_positions`); tagging's and squad's per-token classifier.

The peak of one device, by `device.device_kind`, for the model's
`config.model.dtype`:
  TPU  the chip's bf16 figure (bertjax/chips.py, from Cloud TPU's
       documentation; a v4 or v5p device is one megacore chip). float32
       models get the same figure: at JAX's default precision a TPU computes
       float32 matmuls in one bfloat16 pass.
  GPU  the dense (no sparsity) tensor-core figures of NVIDIA's datasheets:
       bf16 for bfloat16 models; TF32 for float32 ones, which is what JAX's
       default precision runs float32 matmuls in on A100 and later, or FP32
       when jax_default_matmul_precision asks for full float32 ('highest',
       'float32').
  CPU  no vendor figure: the FLOP/s of a jitted float32 matmul measured on
       this host (best of a few runs, under a second), kept in
       $XDG_CACHE_HOME/bertjax/cpu_peak_flops.json (~/.cache/...) per CPU
       model, core count and jax version. Fake CPU devices
       (--xla_force_host_platform_device_count) share the host's cores, so
       the peak of a CPU mesh is the measured figure once per host
       (process), never once per device (processes sharing one machine, as
       in the multi-process tests, count it once each). A corrupt cache file is measured
       again; delete the file to measure again on purpose (a figure taken
       while other work shared the cores is low, and MFU then high).
Other device kinds have no known peak: `peak_flops` returns None and says so,
and MFU is not reported.
"""

import dataclasses
import fcntl
import json
import math
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from bertjax import chips
from data_pipeline.cores import usable_cores

# ------------------------------------------------------------------------------ FLOPs


def pooler_flops(c) -> float:
    """The pooler's dense layer at one position."""
    return 2 * c.hidden_size * c.hidden_size


def encoder_flops(c, length: int, last_layer_queries: int | None = None) -> float:
    """Forward FLOPs of the encoder over one row of `length` tokens; with
    `last_layer_queries`, a last layer computed at that many positions alone
    (model.BertEncoder, where model.queries_in_last_layer says it can)."""
    h, i = c.hidden_size, c.intermediate_size
    matrices = 3 if c.feed_forward == "geglu" else 2

    def layer(index: int, queries: int) -> float:
        local = min(length, 2 * (c.local_attention_window // 2) + 1)
        keys = local if index % c.global_attention_every else length
        return (
            2 * 2 * length * h * h  # key and value projections, at every position
            + 2 * 2 * queries * h * h  # query and output projections
            + 2 * 2 * queries * keys * h  # scores and the weighted sum of values
            + 2 * matrices * queries * h * i  # the feed-forward block
        )

    last = c.num_hidden_layers - 1
    queries = length if last_layer_queries is None else last_layer_queries
    return sum(layer(k, length) for k in range(last)) + layer(last, queries)


def flops_per_step(task, setup, batch_size: int, inputs: dict[str, int] | None = None) -> float:
    """Model FLOPs of one train step of `batch_size` rows of a task's Setup: 3x the
    forward pass its Task counts (tasks/contract.py), at the lengths of `inputs` (default:
    the model's, the longest its batches have), plus a distillation teacher's forward
    pass (Setup.teacher), which the step computes too, with no backward."""
    model = setup.model
    inputs = model.inputs if inputs is None else inputs
    row = 3.0 * task.forward_flops(model.config, inputs, setup.description)
    if setup.teacher is not None:
        row += task.forward_flops(setup.teacher.module.config, inputs, setup.description)
    return batch_size * row


# ------------------------------------------------------------------------------- peaks


@dataclasses.dataclass(frozen=True)
class GpuPeak:
    """Dense tensor-core FLOP/s of one GPU (datasheets give TF32 and bf16 with sparsity:
    twice these)."""

    bfloat16: float
    tensorfloat32: float
    float32: float  # without tensor cores
    source: str


# NVIDIA A100 Tensor Core GPU datasheet: the same figures for SXM4 and PCIe.
_A100 = GpuPeak(312e12, 156e12, 19.5e12, "NVIDIA A100 Tensor Core GPU datasheet")
# NVIDIA H100 Tensor Core GPU datasheet (BF16 1,979 / TF32 989 TFLOP/s with sparsity).
_H100_SXM = GpuPeak(989.5e12, 494.5e12, 67e12, "NVIDIA H100 Tensor Core GPU datasheet, SXM")
# Same datasheet, PCIe column (BF16 1,513 / TF32 756 with sparsity).
_H100_PCIE = GpuPeak(756.5e12, 378e12, 51e12, "NVIDIA H100 Tensor Core GPU datasheet, PCIe")
# Same datasheet, NVL column (BF16 1,671 / TF32 835 with sparsity).
_H100_NVL = GpuPeak(835.5e12, 417.5e12, 60e12, "NVIDIA H100 Tensor Core GPU datasheet, NVL")
# NVIDIA H200 Tensor Core GPU datasheet: the H100 SXM's compute, SXM and NVL columns.
_H200 = GpuPeak(989.5e12, 494.5e12, 67e12, "NVIDIA H200 Tensor Core GPU datasheet, SXM")
_H200_NVL = GpuPeak(835.5e12, 417.5e12, 60e12, "NVIDIA H200 Tensor Core GPU datasheet, NVL")

# By device.device_kind: the CUDA device name, as nvidia-smi shows it.
GPU_PEAKS = {
    "NVIDIA A100-SXM4-40GB": _A100,
    "NVIDIA A100-SXM4-80GB": _A100,
    "NVIDIA A100-PCIE-40GB": _A100,
    "NVIDIA A100 80GB PCIe": _A100,
    "NVIDIA H100 80GB HBM3": _H100_SXM,
    "NVIDIA H100 PCIe": _H100_PCIE,
    "NVIDIA H100 NVL": _H100_NVL,
    "NVIDIA H200": _H200,
    "NVIDIA H200 NVL": _H200_NVL,
}

# jax_default_matmul_precision values that make a GPU compute float32 matmuls in float32.
_FULL_FLOAT32 = ("highest", "float32", "f32_f32_f32")


def device_peak_flops(device_kind: str, dtype: str) -> tuple[float, str] | None:
    """(peak FLOP/s of one device of this kind for `dtype` matmuls, its source), or None for
    a kind without a vendor figure (CPUs included)."""
    chip = chips.CHIPS.get(chips.DEVICE_KINDS.get(device_kind, ""))
    if chip is not None:
        where = f"Cloud TPU documentation, TPU {chip.generation} system architecture"
        return chip.peak_flops, f"{device_kind}: bf16 per chip, {where}"
    gpu = GPU_PEAKS.get(device_kind)
    if gpu is None:
        return None
    if dtype == "bfloat16":
        return gpu.bfloat16, f"{device_kind}: dense bf16, {gpu.source}"
    if str(jax.config.jax_default_matmul_precision).lower() in _FULL_FLOAT32:
        return gpu.float32, f"{device_kind}: FP32, {gpu.source}"
    return gpu.tensorfloat32, f"{device_kind}: dense TF32, {gpu.source}"


def peak_flops(devices, dtype: str) -> tuple[float | None, str]:
    """(peak FLOP/s of `devices` together for a model computing in `dtype`, where the figure
    comes from); (None, why) when the device kind has no known peak."""
    devices = list(devices)
    first = devices[0]
    if first.platform == "cpu":
        hosts = len({d.process_index for d in devices})
        measured = measured_matmul_flops(devices, "float32")
        where = f"{cpu_name()}, {usable_cores()} cores"
        return measured, (
            f"measured: float32 matmul on this host ({where}) x {hosts} host(s), "
            f"cached in {cpu_peak_cache_file()}"
        )
    known = device_peak_flops(first.device_kind, dtype)
    if known is None:
        return None, (
            f"no peak FLOP/s known for device kind {first.device_kind!r} "
            f"({first.platform}); MFU not reported"
        )
    flops, source = known
    return flops * len(devices), f"{source} x {len(devices)} device(s)"


# ------------------------------------------------------------------------ matmul probe

# Measured FLOP/s of one device (CPU: of its host) by (platform, device kind, dtype).
_measured: dict[tuple[str, str, str], float] = {}
# A probe run shorter than this is dominated by dispatch: the probe doubles its size.
_MIN_RUN_S = 0.02
# How much quieter (load per core) the host must be to measure its CPU peak again.
_QUIETER = 0.5
_MAX_SIZE = 16384


def measured_matmul_flops(devices, dtype: str) -> float:
    """FLOP/s of a square `dtype` matmul measured on one of this process's `devices`, for
    all of them: times the devices, or on CPU times the hosts (a host's fake devices share
    its cores). Measured once per process; on CPU once per host, in the cache file."""
    devices = list(devices)
    local = [d for d in devices if d.process_index == jax.process_index()] or devices
    device = local[0]
    key = (device.platform, device.device_kind, dtype)
    if key not in _measured:
        if device.platform == "cpu":
            _measured[key] = _cached_cpu_probe(device, dtype)
        else:
            _measured[key] = probe_matmul_flops(device, dtype)
    if device.platform == "cpu":
        return _measured[key] * len({d.process_index for d in devices})
    return _measured[key] * len(devices)


def probe_matmul_flops(device, dtype: str, *, runs: int = 3) -> float:
    """The best FLOP/s of `runs` timed runs of a jitted [n, n] x [n, n] `dtype` matmul on
    `device`, n doubled from 1024 until one run takes at least _MIN_RUN_S."""
    with jax.set_mesh(jax.sharding.Mesh(np.array([device]), ("probe",))):  # the caller's aside
        return _probe(device, dtype, runs)


def _probe(device, dtype: str, runs: int) -> float:
    matmul = jax.jit(lambda a, b: a @ b)
    size = 1024
    while True:
        x = jax.device_put(np.ones((size, size), dtype=jnp.dtype(dtype)), device)
        matmul(x, x).block_until_ready()  # compile
        start = time.perf_counter()
        matmul(x, x).block_until_ready()
        once = time.perf_counter() - start
        if once >= _MIN_RUN_S or size >= _MAX_SIZE:
            break
        size *= 2
    # Enough back-to-back calls that each timed run takes _MIN_RUN_S.
    calls = max(1, int(np.ceil(_MIN_RUN_S / max(once, 1e-9))))
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            y = matmul(x, x)
        y.block_until_ready()
        best = min(best, (time.perf_counter() - start) / calls)
    return 2.0 * size**3 / best


def cpu_peak_cache_file() -> str:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "bertjax", "cpu_peak_flops.json")


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def load_per_core() -> float:
    """The 1-minute load average over this process's cores: how busy the host is."""
    return os.getloadavg()[0] / usable_cores()


def _cached_cpu_probe(device, dtype: str) -> float:
    """The cache file's figure for this host, or a new probe written to it. Processes take
    turns (a lock file), so that probes on the same cores do not slow each other down.

    Other work on the cores slows a probe down, so the figure is the highest of the
    probes, each kept with the load it was taken under: one taken under a load at least
    _QUIETER per core above the present one is measured again, and the higher kept."""
    path = cpu_peak_cache_file()
    key = f"{cpu_name()} | {usable_cores()} cores | jax {jax.__version__} | {dtype}"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        lock = open(path + ".lock", "a")  # noqa: SIM115 - held for the block below
    except OSError as error:
        logging.warning("cannot keep the CPU peak in %s (%s); measuring it anew", path, error)
        return probe_matmul_flops(device, dtype)
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cache = _read_cache(path)
        entry = cache.get(key)
        known = entry.get("flops_per_second") if isinstance(entry, dict) else None
        known = float(known) if isinstance(known, int | float) and known > 0 else None
        load = load_per_core()
        # A figure of unknown load (kept before loads were) is measured again once.
        taken_under = entry.get("load", math.inf) if known else 0.0
        if known and not (isinstance(taken_under, int | float) and taken_under >= load + _QUIETER):
            return known
        flops = probe_matmul_flops(device, dtype)
        if known and known >= flops:  # still the highest: kept, with the lower load
            cache[key] = {**entry, "load": round(load, 2)}
            flops = known
        else:
            cache[key] = {
                "flops_per_second": flops,
                "measured": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "load": round(load, 2),
            }
        try:
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump(cache, f, indent=2, sort_keys=True)
            os.replace(path + ".tmp", path)
        except OSError as error:
            logging.warning("could not write %s: %s", path, error)
    logging.info("CPU peak: %.3g FLOP/s (%s), kept in %s", flops, key, path)
    return flops


def _read_cache(path: str) -> dict:
    """The cache file's entries; {} when there is none, or it is not a JSON object."""
    try:
        with open(path, encoding="utf-8") as f:
            cache = json.load(f)
    except FileNotFoundError:
        return {}
    except ValueError as error:  # not JSON, or not UTF-8
        logging.warning("%s is corrupt (%s); measuring the CPU peak again", path, error)
        return {}
    if not isinstance(cache, dict):
        logging.warning("%s is not a JSON object; measuring the CPU peak again", path)
        return {}
    return cache
