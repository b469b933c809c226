"""The two GLUE averages a run is compared by, from per-task scores (x100, in the columns
of published.SCORES).

- The GLUE score (the leaderboard's): the mean over the nine tasks, WNLI included and
  AX not; a task with two metrics counts their mean, MNLI the mean of matched and
  mismatched.
- The paper's average (Table 1): the mean of nine numbers, MNLI matched and
  mismatched each one of them, MRPC and QQP by F1, STS-B by Spearman, WNLI left out.
"""

import statistics

TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")


def glue_score(scores: dict) -> float:
    """The leaderboard's score; every task of TASKS must be there."""
    per_task = []
    for task in TASKS:
        if task == "mnli":
            per_task.append((scores["mnli-m"] + scores["mnli-mm"]) / 2)
        else:
            per_task.append(_mean(scores[task]))
    return statistics.fmean(per_task)


def paper_average(scores: dict) -> float:
    """Table 1's average: MRPC and QQP by F1 (the pair's first), STS-B by Spearman (its
    second), MNLI's two splits apart, WNLI out."""
    values = [
        scores["mnli-m"], scores["mnli-mm"], scores["qqp"][0], scores["qnli"], scores["sst2"],
        scores["cola"], scores["stsb"][1], scores["mrpc"][0], scores["rte"],
    ]  # fmt: skip
    return statistics.fmean(values)


def _mean(score) -> float:
    return statistics.fmean(score) if isinstance(score, tuple) else score
