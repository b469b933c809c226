"""The sample GLUE folder (data_pipeline/finetune/glue_sample.py) under the tests' name."""

from data_pipeline.finetune.glue_sample import SENTENCES, write

write_glue_dir = write
__all__ = ["SENTENCES", "write_glue_dir"]
