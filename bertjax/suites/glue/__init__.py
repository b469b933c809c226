"""The GLUE suite (suite.py) and what it needs of GLUE: each trial's program (trial.py)
and what it adds to its run (predictions.py), the files the GLUE server takes
(submission.py), the published scores to compare with (published.py) and the averages
the leaderboard and the paper compute (benchmark.py)."""
