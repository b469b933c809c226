"""Benchmarks that print numbers, each a program (`python -m bertjax.bench.NAME --help`):

throughput         the real train step: time, tokens/s, MFU (against Hugging Face's
                   Flax BERT with --compare_hf_flax, hf_flax.py)
packed_step        packing's train step against unpacked rows
attention_kernels  the attention implementations
events             what the event log and the input-wait timing add to a step
checkpoint         saving and restoring a train state
encoders           BERT-Tiny against the modern encoder recipe at equal FLOPs
embedding          contrastive fine-tuning's pairs/s against sentence-transformers
"""
