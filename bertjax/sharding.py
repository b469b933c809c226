"""The device mesh, the logical-axis rules, and where host batches become global arrays.

Parameters and activations carry logical axis names (model.py); `RULES` maps
them onto three mesh axes:

    data    data parallelism: the batch is split, parameters are replicated
    fsdp    fully sharded data parallelism: the batch is split and so are the
            parameters' 'embed' dimensions (gathered for each matmul)
    tensor  tensor parallelism: attention heads, the MLP's hidden units and
            the vocabulary are split

`config.mesh` gives each axis a size; one may be -1, meaning "the rest of the
devices". The same code then serves one CPU, one TPU host or a pod.
"""

import math
from collections.abc import Mapping

import jax
import numpy as np
from flax import linen as nn
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from data_pipeline.errors import UserError

MESH_AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")

# Logical name -> mesh axes. Flax gives each mesh axis to at most one dimension
# of an array, first rule first: an activation [batch, length, embed] keeps
# fsdp for its batch, while a parameter [vocab, embed] gives fsdp to embed.
RULES = (
    ("batch", BATCH_AXES),
    ("vocab", "tensor"),
    ("heads", "tensor"),
    ("mlp", "tensor"),
    ("embed", "fsdp"),
    ("kv", None),
    ("embed_out", None),
    ("length", None),
    ("layers", None),
    ("position", None),
    ("token_type", None),
    ("classes", None),
)


class MeshError(UserError):
    """A mesh that does not fit the devices or the batch."""


def mesh_shape(mesh_config: Mapping[str, int], device_count: int) -> dict[str, int]:
    """Resolves the one -1 in `config.mesh` so the sizes multiply to `device_count`."""
    sizes = dict(mesh_config)
    unknown = sorted(set(sizes) - set(MESH_AXES))
    if unknown:
        raise MeshError(f"config.mesh.{unknown[0]}: unknown mesh axis; use {', '.join(MESH_AXES)}")
    for axis in MESH_AXES:
        sizes.setdefault(axis, 1)
        if sizes[axis] == 0 or sizes[axis] < -1:
            raise MeshError(f"config.mesh.{axis}={sizes[axis]}: must be positive or -1")
    fill = [axis for axis in MESH_AXES if sizes[axis] == -1]
    if len(fill) > 1:
        raise MeshError(f"config.mesh: only one axis may be -1, not {', '.join(fill)}")
    known = math.prod(size for size in sizes.values() if size != -1)
    if fill:
        if device_count % known:
            raise MeshError(
                f"config.mesh={dict(mesh_config)}: the fixed axes ({known} devices) do not "
                f"divide the {device_count} devices"
            )
        sizes[fill[0]] = device_count // known
    if math.prod(sizes.values()) != device_count:
        raise MeshError(
            f"config.mesh={dict(mesh_config)}: the axes multiply to "
            f"{math.prod(sizes.values())}, but there are {device_count} devices"
        )
    return {axis: sizes[axis] for axis in MESH_AXES}


def check_platform(platform: str, devices) -> None:
    """`config.platform` ('tpu', 'gpu', 'cpu' or 'any') against the devices a run found."""
    found = devices[0].platform
    if platform in ("any", found):
        return
    if platform not in ("tpu", "gpu", "cpu"):
        raise MeshError(f"config.platform={platform!r}: must be one of tpu, gpu, cpu, any")
    why = {
        "tpu": "libtpu did not start: is jax[tpu] installed (pip install -e '.[tpu]') and is no "
        "other process holding the TPU (/tmp/libtpu_lockfile)?",
        "gpu": "the CUDA plugin did not start: is jax[cuda12] installed (pip install -e '.[gpu]')?",
        "cpu": "this config is meant to run on the CPU",
    }[platform]
    raise MeshError(
        f"config.platform={platform!r}, but this run found {len(devices)} {found} device(s): "
        f"{why} (--config.platform={found} runs here anyway)"
    )


def target_platform() -> str:
    """The platform of the computation being traced: that of the mesh in context
    (bertjax.tpu.aot builds TPU steps on a CPU host), else the default backend."""
    device = jax.sharding.get_abstract_mesh().abstract_device
    return jax.default_backend() if device is None else device.platform


def make_mesh(mesh_config: Mapping[str, int], devices=None) -> Mesh:
    devices = jax.devices() if devices is None else devices
    shape = mesh_shape(mesh_config, len(devices))
    # Auto axes: the compiler propagates shardings from the logical annotations.
    auto = (jax.sharding.AxisType.Auto,) * len(MESH_AXES)
    slices = len({getattr(device, "slice_index", 0) for device in devices})
    if slices == 1:
        mesh = jax.make_mesh(tuple(shape.values()), MESH_AXES, devices=devices, axis_types=auto)
    else:
        mesh = Mesh(_multislice_devices(shape, devices, slices), MESH_AXES, axis_types=auto)
    # Each host reads its own rows (make_global_batch), so the devices that hold
    # the same rows of a batch, along the tensor axis, must be on one host.
    for row in mesh.devices.reshape(data_parallel_size(mesh), -1):
        hosts = sorted({device.process_index for device in row})
        if len(hosts) > 1:
            raise MeshError(
                f"config.mesh={dict(mesh_config)}: hosts {hosts[0]} and {hosts[1]} would hold "
                "the same batch rows, but each host reads its own data; keep the tensor axis "
                f"within a host ({jax.local_device_count()} devices)"
            )
    return mesh


def _multislice_devices(shape: dict[str, int], devices, slices: int) -> np.ndarray:
    """Slices talk over the data-center network, far slower than the chips' links within a
    slice, so only the data axis, whose one all-reduce per step is the least traffic,
    spans slices (Cloud TPU Multislice); fsdp and tensor stay within each slice."""
    check_slices(shape, slices)
    within = (shape["data"] // slices, shape["fsdp"], shape["tensor"])
    return mesh_utils.create_hybrid_device_mesh(within, (slices, 1, 1), devices)


def data_parallel_size(mesh: Mesh) -> int:
    return math.prod(mesh.shape[axis] for axis in BATCH_AXES)


def check_slices(shape: Mapping[str, int], slices: int) -> None:
    """Only the data axis spans slices (_multislice_devices)."""
    if shape["data"] % slices:
        raise MeshError(
            f"config.mesh: the data axis ({shape['data']}) must be a multiple of the "
            f"{slices} slices, which only it spans"
        )


def check_tensor_within_host(
    mesh_config: Mapping[str, int], shape: Mapping[str, int], per_host: int
):
    """The tensor axis must fit on a host of `per_host` devices: from the sizes alone, for a
    mesh whose devices are not at hand (make_mesh checks the devices themselves)."""
    if shape["tensor"] > per_host:
        raise MeshError(
            f"config.mesh={dict(mesh_config)}: the tensor axis ({shape['tensor']}) would span "
            f"hosts, but each host reads its own data; keep the tensor axis within a host "
            f"({per_host} devices)"
        )


def check_batch_split(
    batch_size: int, shape: Mapping[str, int], processes: int, *, option: str
) -> None:
    """A global batch must split evenly over the batch axes of a mesh of `shape` and over
    `processes` hosts."""
    parallel = math.prod(shape[axis] for axis in BATCH_AXES)
    if batch_size % parallel:
        raise MeshError(
            f"{option}={batch_size} is not divisible by the data-parallel size {parallel} "
            f"(mesh data={shape['data']} x fsdp={shape['fsdp']})"
        )
    if batch_size % processes:
        raise MeshError(f"{option}={batch_size} is not divisible by the {processes} processes")


def logical_shardings(boxed_tree, mesh: Mesh):
    """NamedShardings for a tree whose leaves are flax LogicallyPartitioned boxes."""
    return nn.logical_to_mesh_sharding(nn.get_partition_spec(boxed_tree), mesh, RULES)


def check_divisible(abstract_tree, shardings) -> None:
    """Every split dimension must divide evenly over its mesh axes; names the parameter."""
    leaves = jax.tree_util.tree_flatten_with_path(abstract_tree)[0]
    for (path, leaf), leaf_sharding in zip(leaves, jax.tree.leaves(shardings), strict=True):
        mesh = leaf_sharding.mesh
        for dim, axes in zip(leaf.shape, leaf_sharding.spec, strict=False):
            if axes is None:
                continue
            axes = (axes,) if isinstance(axes, str) else axes
            parts = math.prod(mesh.shape[axis] for axis in axes)
            if dim % parts:
                name = "/".join(str(getattr(key, "key", key)) for key in path)
                raise MeshError(
                    f"{name} has a dimension of {dim}, which does not split over mesh "
                    f"axes {'x'.join(axes)} of size {parts}; change config.mesh "
                    "(or pad the vocabulary to a multiple of the tensor axis)"
                )


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def batch_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec(BATCH_AXES))


def make_global_batch(host_batch: Mapping[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """This host's share of a batch -> global arrays split over the batch axes.

    The only place host data enters the device world: every process passes its
    own rows, and the result is one array spanning all of them.
    """
    sharding = batch_sharding(mesh)

    def global_array(value):
        return jax.make_array_from_process_local_data(sharding, np.asarray(value))

    # A column may be a tuple of arrays (a teacher's stored outputs).
    return {name: jax.tree.map(global_array, value) for name, value in host_batch.items()}
