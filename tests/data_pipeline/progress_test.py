"""data_pipeline.progress: a line at most every 30 s of what runs, how far and how long is left."""

import io
import threading

import pytest

from data_pipeline import progress


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def lines(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


@pytest.mark.parametrize(
    "seconds, shown", [(59.9, "0:59"), (61, "1:01"), (3600, "1:00:00"), (-5, "0:00")]
)
def test_format_duration(seconds, shown):
    assert progress.format_duration(seconds) == shown


def test_a_count_is_told_at_most_every_interval_with_the_time_left():
    clock, out = FakeClock(), io.StringIO()
    shards = progress.Progress("writing the train split", 16, unit="shards", out=out, clock=clock)
    clock.now += 29
    shards.update(1)
    assert lines(out) == []  # not yet due
    clock.now += 1  # 30 s: 1 shard, so 15 more take 7:30
    shards.update(1)
    clock.now += 10
    shards.update(2)  # told 10 s ago
    clock.now += 20
    shards.update(3)  # 3 in 60 s: 13 more take 4:20
    shards.finish()
    assert lines(out) == [
        "writing the train split: 1/16 shards (6%), 0:30 so far, about 7:30 left",
        "writing the train split: 3/16 shards (19%), 1:00 so far, about 4:20 left",
        "writing the train split: finished in 1:00",
    ]


def test_work_done_before_the_start_is_left_out_of_the_rate():
    clock, out = FakeClock(), io.StringIO()
    trials = progress.Progress("sweep", 10, unit="trials done", done=6, out=out, clock=clock)
    clock.now += 30
    trials.update(6)
    clock.now += 30
    trials.update(7)  # one trial in 60 s: 3 more take 3:00
    assert lines(out) == [
        "sweep: 6/10 trials done (60%), 0:30 so far, no estimate yet",
        "sweep: 7/10 trials done (70%), 1:00 so far, about 3:00 left",
    ]


def test_without_a_total_the_count_and_time_are_told():
    clock, out = FakeClock(), io.StringIO()
    words = progress.Progress("counting words", unit="words", out=out, clock=clock)
    clock.now += 45
    words.advance(1234567)
    assert lines(out) == ["counting words: 1,234,567 words, 0:45 so far"]


def test_a_short_run_says_only_what_starts():
    clock, out = FakeClock(), io.StringIO()
    step = progress.Progress("compiling the train step", out=out, clock=clock).start()
    clock.now += 29
    step.update(0)
    step.finish()
    assert lines(out) == ["compiling the train step ..."]


def test_nothing_counted_tells_the_time_and_the_expected_time_left():
    clock, out = FakeClock(), io.StringIO()
    step = progress.Progress("compiling the train step", expected=200, out=out, clock=clock)
    clock.now += 150
    step.report()
    clock.now += 60  # past what was expected: no estimate
    step.report()
    assert lines(out) == [
        "still compiling the train step (2:30 so far, about 0:50 left)",
        "still compiling the train step (3:30 so far)",
    ]


class SignallingOut(io.StringIO):
    def __init__(self):
        super().__init__()
        self.written = threading.Event()

    def write(self, text):
        self.written.set()
        return super().write(text)


def test_a_heartbeat_tells_the_time_from_a_thread_until_the_block_ends():
    clock, out = FakeClock(), SignallingOut()
    step = progress.Progress("compiling the train step", out=out, clock=clock)
    with step.heartbeat():
        clock.now += 150  # as if the compile had gone on for 2:30
        assert out.written.wait(10)
    assert lines(out) == [
        "still compiling the train step (2:30 so far)",
        "compiling the train step: finished in 2:30",
    ]
    assert not any(t.name.startswith("progress: ") for t in threading.enumerate())


def test_a_block_that_fails_ends_its_heartbeat_without_finishing():
    clock, out = FakeClock(), io.StringIO()
    step = progress.Progress("compiling the train step", out=out, clock=clock)
    with pytest.raises(RuntimeError), step.heartbeat():
        raise RuntimeError("out of memory")
    assert lines(out) == []
    assert not any(t.name.startswith("progress: ") for t in threading.enumerate())
