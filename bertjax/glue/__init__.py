"""The GLUE benchmark as the paper evaluates it: the submission files the GLUE server
takes (submission.py)."""
