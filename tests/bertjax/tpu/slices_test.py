"""bertjax.tpu.slices: slice names, shapes and hosts as Google's tables give them; each chip's limits."""

import numpy as np
import pytest

from bertjax import chips
from bertjax.tpu import slices


@pytest.mark.parametrize(
    "name, accelerator_type, chips, topology, hosts",
    [
        # v4 and v5p name TensorCores (two per chip), v5e and v6e name chips.
        ("v4-8", "v4-8", 4, "2x2x1", 1),
        ("v4-32", "v4-32", 16, "2x2x4", 4),
        ("v4-128", "v4-128", 64, "4x4x4", 16),
        ("v5p-8", "v5p-8", 4, "2x2x1", 1),
        ("v5p-16", "v5p-16", 8, "2x2x2", 2),
        ("v5p-32", "v5p-32", 16, "2x2x4", 4),
        ("v5e-8", "v5litepod-8", 8, "2x4", 1),
        ("v5litepod-16", "v5litepod-16", 16, "4x4", 4),
        ("v5e-256", "v5litepod-256", 256, "16x16", 64),
        ("v6e-8", "v6e-8", 8, "2x4", 1),
        ("v6e-32", "v6e-32", 32, "4x8", 8),
    ],
)
def test_slices(name, accelerator_type, chips, topology, hosts):
    tpu_slice = slices.parse(name)
    assert tpu_slice.accelerator_type == accelerator_type
    assert tpu_slice.chips == chips
    assert tpu_slice.topology == topology
    assert tpu_slice.hosts == hosts


def test_multislice_multiplies_chips_and_hosts():
    tpu_slice = slices.parse("v5e-16", num_slices=4)
    assert (tpu_slice.devices_count, tpu_slice.hosts) == (64, 16)
    assert tpu_slice.name == "v5e-16 x 4 slices"


@pytest.mark.parametrize(
    "name, message",
    [
        ("v3-8", "not a TPU slice"),
        ("v5p-6", "no v5p slice has that size"),
        ("v5e-12", "no v5e slice has that size"),
        ("v4-4", "no v4 slice has that size"),
        ("tpu", "not a TPU slice"),
    ],
)
def test_unknown_slices_are_one_line(name, message):
    with pytest.raises(slices.SliceError, match=message) as error:
        slices.parse(name, option="--accelerator_type")
    assert str(error.value).startswith(f"--accelerator_type={name}:")


def test_chip_figures_are_googles():
    # Peak bf16 FLOP/s, HBM and its bandwidth per chip (Cloud TPU documentation).
    assert chips.CHIPS["v4"].peak_flops == 275e12
    assert chips.CHIPS["v5e"].hbm_bandwidth == 819e9
    assert chips.CHIPS["v5p"].peak_flops == 459e12
    assert chips.CHIPS["v6e"].hbm_bytes == 32 * 2**30


def test_compile_only_devices_have_the_slice_shape():
    devices = slices.parse("v5p-16").compile_devices()
    assert len(devices) == 8  # one megacore device per chip
    assert {device.process_index for device in devices} == {0, 1}
    assert chips.DEVICE_KINDS[devices[0].device_kind] == "v5p"
    devices = slices.parse("v6e-8", num_slices=2).compile_devices()
    assert len(devices) == 16
    assert {device.slice_index for device in devices} == {0, 1}


def test_multislice_mesh_spans_slices_along_the_data_axis_only():
    from bertjax import sharding

    devices = slices.parse("v6e-8", num_slices=2).compile_devices()
    mesh = sharding.make_mesh({"data": -1, "fsdp": 2, "tensor": 1}, devices)
    assert dict(mesh.shape) == {"data": 8, "fsdp": 2, "tensor": 1}
    slice_index = np.vectorize(lambda device: device.slice_index)(mesh.devices)
    assert (slice_index[:4] == 0).all() and (slice_index[4:] == 1).all()
    with pytest.raises(sharding.MeshError, match="must be a multiple of the 2 slices"):
        sharding.make_mesh({"data": 1, "fsdp": -1, "tensor": 1}, devices)


@pytest.mark.integration
def test_libtpu_settings_are_made_when_a_tool_starts_not_when_bertjax_is_imported():
    import os
    import subprocess
    import sys

    ours = ("TPU_SKIP_MDS_QUERY", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES")
    env = {k: v for k, v in os.environ.items() if k not in (*ours, "ALLOW_MULTIPLE_LIBTPU_LOAD")}
    # (TensorFlow's import sets TPU_SKIP_MDS_QUERY itself; the other two are ours alone.)
    script = (
        "import os; from bertjax import main; "
        "assert 'TPU_WORKER_HOSTNAMES' not in os.environ; "
        "from bertjax import program; program.libtpu_without_tpu(); "
        "print(os.environ.get('TPU_WORKER_HOSTNAMES'))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    # libtpu is installed here (the aot tests need it) and this host has no TPU.
    assert result.stdout.strip() == "localhost", result.stderr[-2000:]
