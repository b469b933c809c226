"""Cloud TPU: slices and chips (slices.py), compiling for a slice on any host
(`python -m bertjax.tpu.aot`) and creating and driving slices (`python -m bertjax.tpu.launch`)."""
