"""The GLUE benchmark as the paper evaluates it: the files the GLUE server takes
(submission.py), the published scores to compare with (published.py) and the averages
the leaderboard and the paper compute (benchmark.py)."""
