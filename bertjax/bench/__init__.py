"""Benchmarks that print numbers: the train step (`python -m bertjax.bench.step`, against
Hugging Face's Flax BERT with hf_flax.py), packing (`bertjax.bench.packed_step`) and the
attention kernels (`bertjax.bench.attention_kernels`)."""
