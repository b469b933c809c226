"""Fine-tuning inputs: what they share (records.py) and one module per kind of task
(classification_input.py, tagging_input.py, squad_input.py)."""
