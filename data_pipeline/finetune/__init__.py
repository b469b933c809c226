"""Fine-tuning inputs: what they share (records.py) and one module per kind of task
(classification.py, tagging.py, squad.py)."""
