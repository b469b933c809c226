"""The published GLUE scores against the averages the benchmark and the paper compute
from them: the table and the two averages check each other."""

import pytest

from bertjax.suites import report
from bertjax.suites.glue import benchmark, published


@pytest.mark.parametrize("model", ["bert-tiny", "bert-mini", "bert-small", "bert-medium"])
def test_the_compact_models_glue_score_is_the_mean_of_their_task_scores(model):
    source, score, tasks = published.SCORES[model]
    assert source == published.TURC
    # The leaderboard averages unrounded scores: within rounding of the published one.
    assert benchmark.glue_score(tasks) == pytest.approx(score, abs=0.1)


@pytest.mark.parametrize("model", ["bert-base", "bert-large"])
def test_the_papers_average_is_the_mean_of_its_nine_numbers(model):
    source, average, tasks = published.SCORES[model]
    assert source == published.PAPER
    assert round(benchmark.paper_average(tasks), 1) == average


def test_a_checkpoint_shape_finds_its_published_model():
    assert set(report.PUBLISHED_SHAPES.values()) == set(published.SCORES)
    assert report.PUBLISHED_SHAPES[(2, 128)] == "bert-tiny"
    assert report.PUBLISHED_SHAPES[(12, 768)] == "bert-base"
    assert (6, 384) not in report.PUBLISHED_SHAPES  # MiniLM: nothing published in this table
