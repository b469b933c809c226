"""Cloud TPU: slices of the chips (slices.py; the chips themselves are bertjax/chips.py),
compiling for a slice on any host (`python -m bertjax.tpu.aot`) and creating and driving
slices (`python -m bertjax.tpu.launch`)."""
