"""The evaluation suites: a benchmark run as the paper runs it on a pretrained checkpoint,
as one resumable sweep (`python -m bertjax.suites glue|squad ...`, command.py). What a
suite is and what differs between suites: contract.py; what one found: report.py; the
suites: GLUE (glue/, with its submission files, published scores and trial program) and
SQuAD (squad.py)."""
