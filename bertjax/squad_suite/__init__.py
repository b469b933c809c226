"""SQuAD 1.1 and 2.0 as the original repository runs them, with seeds, as one sweep
(command.py), and its report beside the paper's numbers (report.py)."""
