"""Published GLUE test scores to compare a run with, each with its source. Scores are x100;
a pair is (F1, accuracy) for MRPC and QQP and (Pearson, Spearman) for STS-B, as the GLUE
leaderboard shows them.

- BERT-Base and BERT-Large: the paper, Table 1 (F1 alone for MRPC and QQP, Spearman
  alone for STS-B; no WNLI or AX; its average leaves WNLI out).
- BERT-Tiny, Mini, Small and Medium (Turc et al., "Well-Read Students Learn Better"):
  the original repository's README.md, best of batch {8, 16, 32, 64, 128} x lr
  {3e-4, 1e-4, 5e-5, 3e-5}, 4 epochs each; the score is the official GLUE score,
  WNLI included.
"""

PAPER = "Devlin et al. 2018, Table 1 (GLUE test)"
TURC = "google-research/bert README.md (Turc et al. 2019; GLUE test)"

# model -> (source, overall score, {column: score or (score, score)})
SCORES = {
    "bert-base": (PAPER, 79.6, {
        "mnli-m": 84.6, "mnli-mm": 83.4, "qqp": (71.2, None), "qnli": 90.5, "sst2": 93.5,
        "cola": 52.1, "stsb": (None, 85.8), "mrpc": (88.9, None), "rte": 66.4,
    }),
    "bert-large": (PAPER, 82.1, {
        "mnli-m": 86.7, "mnli-mm": 85.9, "qqp": (72.1, None), "qnli": 92.7, "sst2": 94.9,
        "cola": 60.5, "stsb": (None, 86.5), "mrpc": (89.3, None), "rte": 70.1,
    }),
    "bert-tiny": (TURC, 64.2, {
        "cola": 0.0, "sst2": 83.2, "mrpc": (81.1, 71.1), "stsb": (74.3, 73.6),
        "qqp": (62.2, 83.4), "mnli-m": 70.2, "mnli-mm": 70.3, "qnli": 81.5, "rte": 57.2,
        "wnli": 62.3, "ax": 21.0,
    }),
    "bert-mini": (TURC, 65.8, {
        "cola": 0.0, "sst2": 85.9, "mrpc": (81.1, 71.8), "stsb": (75.4, 73.3),
        "qqp": (66.4, 86.2), "mnli-m": 74.8, "mnli-mm": 74.3, "qnli": 84.1, "rte": 57.9,
        "wnli": 62.3, "ax": 26.1,
    }),
    "bert-small": (TURC, 71.2, {
        "cola": 27.8, "sst2": 89.7, "mrpc": (83.4, 76.2), "stsb": (78.8, 77.0),
        "qqp": (68.1, 87.0), "mnli-m": 77.6, "mnli-mm": 77.0, "qnli": 86.4, "rte": 61.8,
        "wnli": 62.3, "ax": 28.6,
    }),
    "bert-medium": (TURC, 73.5, {
        "cola": 38.0, "sst2": 89.6, "mrpc": (86.6, 81.6), "stsb": (80.4, 78.4),
        "qqp": (69.6, 87.9), "mnli-m": 80.0, "mnli-mm": 79.1, "qnli": 87.7, "rte": 62.2,
        "wnli": 62.3, "ax": 30.5,
    }),
}  # fmt: skip
