"""Released BERT checkpoints in and out: import and export (import_export.py; the command,
`python -m bertjax.convert`, is command.py), the rename table (param_names.py) and the
checkpoints' config files (config_json.py)."""
