"""Released BERT checkpoints in and out: import and export (import_export.py, run as
`python -m bertjax.convert`), the rename table (names.py) and the checkpoints'
config files (config_json.py)."""
