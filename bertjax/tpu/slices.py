"""Cloud TPU slices: accelerator types, their topologies and hosts, and each chip's limits.

A slice is named as `gcloud` names it, `v4-8`, `v5p-8`, `v5litepod-8` or `v6e-8`
(`v5e-8` is accepted for `v5litepod-8`). The number counts TensorCores on v4
and v5p (two per chip, used as one "megacore" device) and chips on v5e and v6e.
`bertjax.tpu.aot` compiles for a slice's devices on any host, with the TPU compiler
of the installed libtpu; `bertjax.tpu.launch` creates and drives slices.

Each generation's chip and its figures are in bertjax/chips.py.
"""

import dataclasses
import math
import re

from bertjax import program
from bertjax.chips import CHIPS, Chip
from data_pipeline.errors import UserError


class SliceError(UserError):
    """A TPU slice name that bertjax does not know."""


_PREFIXES = {"v4": "v4", "v5litepod": "v5e", "v5e": "v5e", "v5p": "v5p", "v6e": "v6e"}


@dataclasses.dataclass(frozen=True)
class Slice:
    chip: Chip
    chips: int  # per slice
    num_slices: int = 1

    @property
    def accelerator_type(self) -> str:
        """gcloud's name of one slice."""
        return f"{self.chip.gcloud_prefix}-{self.chips * self.chip.cores_in_name}"

    @property
    def name(self) -> str:
        slices = f" x {self.num_slices} slices" if self.num_slices > 1 else ""
        return f"{self.chip.generation}-{self.chips * self.chip.cores_in_name}{slices}"

    @property
    def shape(self) -> tuple[int, ...]:
        """The chips along each torus axis, as Google's topology tables give them."""
        return _shape(self.chips, self.chip.dims)

    @property
    def topology(self) -> str:
        return "x".join(map(str, self.shape))

    @property
    def hosts_per_slice(self) -> int:
        if self.chips <= self.chip.single_host_chips:
            return 1
        return self.chips // self.chip.max_chips_per_host

    @property
    def hosts(self) -> int:
        return self.hosts_per_slice * self.num_slices

    @property
    def devices_count(self) -> int:
        return self.chips * self.num_slices

    def host_bounds(self) -> tuple[int, int, int]:
        if self.hosts_per_slice == 1:
            return (*self.shape, 1) if len(self.shape) == 2 else self.shape
        return (2, 2, 1)

    def compile_devices(self) -> list:
        """This slice's devices for compiling only (no TPU needed; libtpu must be installed)."""
        program.libtpu_without_tpu()
        from jax.experimental import topologies

        kwargs = {"chips_per_host_bounds": self.host_bounds(), "num_slices": self.num_slices}
        if self.chip.cores_in_name == 2:
            kwargs["chip_config_name"] = "megacore"
        name = f"{self.chip.topology_prefix}:{self.topology}"
        return topologies.get_topology_desc(topology_name=name, platform="tpu", **kwargs).devices


def parse(name: str, *, num_slices: int = 1, option: str = "--topology") -> Slice:
    """`v5p-8` (or `v5litepod-16`, `v6e-8`, ...) as a Slice; SliceError names `option`."""
    known = ", ".join(sorted(CHIPS))
    match = re.fullmatch(r"(v4|v5p|v5e|v5litepod|v6e)-(\d+)", name.strip().lower())
    if not match:
        raise SliceError(
            f"{option}={name}: not a TPU slice; write GENERATION-SIZE with GENERATION one of "
            f"{known} (v5litepod for v5e), e.g. v5p-8 or v5e-16"
        )
    chip = CHIPS[_PREFIXES[match.group(1)]]
    size = int(match.group(2))
    if num_slices < 1:
        raise SliceError(f"--num_slices={num_slices}: must be at least 1")
    if size % chip.cores_in_name or not _is_slice(size // chip.cores_in_name, chip.dims):
        examples = ", ".join(
            f"{chip.gcloud_prefix}-{c * chip.cores_in_name}" for c in (4, 8, 16, 32, 64)
        )
        raise SliceError(
            f"{option}={name}: no {chip.generation} slice has that size ({examples}, ...)"
        )
    return Slice(chip, size // chip.cores_in_name, num_slices)


def _is_slice(chips: int, dims: int) -> bool:
    if chips < 4 or chips & (chips - 1):  # bertjax compiles for 4 chips or more, powers of two
        return False
    return math.prod(_shape(chips, dims)) == chips


def _shape(chips: int, dims: int) -> tuple[int, ...]:
    """Powers of two spread as evenly as the documented slice shapes: 2x2x1, 2x2x2, 2x2x4,
    2x4x4, 4x4x4, ... in 3D; 2x2, 2x4, 4x4, 4x8, ... in 2D."""
    if dims == 3 and chips == 4:
        return (2, 2, 1)
    shape = [1] * dims
    axis = dims - 1
    while math.prod(shape) < chips:
        shape[axis] *= 2
        axis = axis - 1 if axis > 0 else dims - 1
    return tuple(sorted(shape))
