r"""Compiles an experiment's train and eval steps for a Cloud TPU slice, on any host.

    python -m bertjax.tpu.aot --config experiments/pretrain/bert_base.py --topology v5p-8 \
        [--num_slices N] [--find_batch] [--json] [--config.KEY=VALUE ...]

The steps are the ones `bertjax.main` runs (train.build_run and train.jit_steps:
the same model, optimizer, mesh and shardings), lowered for the slice's devices
and compiled by the TPU compiler in the installed libtpu (`pip install -e .[tpu]`);
no TPU and no network are needed. Pretraining configs need none of their data
either: the vocabulary is a placeholder of the configured size and phase 2's
init checkpoint is left out (it sets values, not shapes). Fine-tuning configs
read their init checkpoint and data, as a run would, for the model and batch shapes,
with two exceptions: `--config.init_checkpoint=experiments/pretrain/FILE.py` stands
for the run that config will make (its architecture, no parameters), and the
retrieval task compiles with placeholder pairs of its configured lengths.

Printed, per chip: HBM (arguments, temporaries, peak) against the chip's
capacity; FLOPs per step from XLA next to the analytic count; bytes accessed;
XLA's own time estimate; a roofline step time, max(FLOPs / peak FLOP/s, bytes /
HBM bandwidth), with the tokens/s and model FLOPs utilisation it implies. The
roofline is a bound, not a measurement: real steps also wait on collectives
and the host. A step that does not fit exits with status 1 and names the config
keys to change; --find_batch adds the largest per-chip batch that fits.

A compile takes minutes for the larger configs: stderr says which step compiles as it
starts, then every 30 s how long it has taken (--find_batch's compiles: also about how
long is left, at the time the config's own batch took).
"""

from absl import flags
from ml_collections import config_flags

from bertjax import program


def define_flags() -> None:
    config_flags.DEFINE_config_file("config", None, "Experiment config file.", lock_config=True)
    flags.DEFINE_string("topology", None, "TPU slice: v4-8, v5e-8, v5p-8, v6e-8, v5p-32, ...")
    flags.DEFINE_integer("num_slices", 1, "Slices joined over the data-center network.")
    flags.DEFINE_bool("eval", True, "Also compile the eval step.")
    flags.DEFINE_bool("find_batch", False, "Also find the largest per-chip batch that fits.")
    flags.DEFINE_bool("json", False, "Print one JSON object instead of the table.")
    flags.mark_flags_as_required(["config", "topology"])


if __name__ == "__main__":
    program.run("bertjax.tpu.compile_report:main", define_flags)
