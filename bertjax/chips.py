"""Cloud TPU chips: each generation's names and limits.

The figures are from Google's Cloud TPU documentation (the "System architecture"
table of each version's page): peak bf16 FLOP/s, HBM capacity and HBM bandwidth
per chip. flops.py divides by the peak; bertjax.tpu names slices of these chips.
"""

import dataclasses

GiB = 2**30


@dataclasses.dataclass(frozen=True)
class Chip:
    generation: str  # what users write: v4, v5e, v5p, v6e
    gcloud_prefix: str  # what gcloud's --accelerator-type starts with
    topology_prefix: str  # what the TPU compiler's topology names start with
    cores_in_name: int  # TensorCores the slice name counts per chip
    peak_flops: float  # bf16 FLOP/s per chip
    hbm_bytes: int
    hbm_bandwidth: float  # bytes/s
    dims: int  # 3 for the 3D-torus chips, 2 for the 2D ones
    max_chips_per_host: int  # a host of a multi-host slice drives this many chips
    single_host_chips: int  # slices up to this many chips have one host
    runtime_version: str  # the TPU VM image for `gcloud ... --version`


CHIPS = {
    "v4": Chip("v4", "v4", "v4", 2, 275e12, 32 * GiB, 1200e9, 3, 4, 4, "tpu-ubuntu2204-base"),
    "v5e": Chip(
        "v5e", "v5litepod", "v5e", 1, 197e12, 16 * GiB, 819e9, 2, 4, 8, "v2-alpha-tpuv5-lite"
    ),
    "v5p": Chip("v5p", "v5p", "v5", 2, 459e12, 95 * GiB, 2765e9, 3, 4, 4, "v2-alpha-tpuv5"),
    "v6e": Chip("v6e", "v6e", "v6e", 1, 918e12, 32 * GiB, 1640e9, 2, 4, 8, "v2-alpha-tpuv6e"),
}
# The TPU compiler's name for each device kind (device.device_kind).
DEVICE_KINDS = {"TPU v4": "v4", "TPU v5 lite": "v5e", "TPU v5": "v5p", "TPU v6 lite": "v6e"}
