"""Cloud TPU: slices and chips (chips.py), compiling for a slice on any host
(`python -m bertjax.tpu.aot`) and creating and driving slices (`python -m bertjax.tpu.launch`)."""
