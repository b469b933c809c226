"""bertjax.train's loop, piece by piece: when a run logs, evaluates and saves (Session),
and the hooks the loop calls after each step, with fakes for the run around them."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from bertjax import events, metrics, train, workdir
from bertjax.hooks import Hook
from data_pipeline import streams
from data_pipeline.errors import ConfigError


def make_session(
    *,
    num_steps=25,
    last_step=25,
    log_every=10,
    eval_every=10,
    checkpoint_every=0,
    checkpoint_each=False,
    **held,
):
    run = SimpleNamespace(
        config=SimpleNamespace(log_every_steps=log_every, checkpoint_every_steps=checkpoint_every),
        setup=SimpleNamespace(
            objective=SimpleNamespace(num_train_steps=num_steps),
            evaluation=SimpleNamespace(every_steps=eval_every, checkpoint_each=checkpoint_each),
            init=SimpleNamespace(checkpoint=None),
        ),
        task=SimpleNamespace(
            best_metric=lambda config: SimpleNamespace(name="loss", higher_is_better=False)
        ),
    )
    fields = dict(workdir="/nowhere", start_step=0, last_step=last_step, state=None)
    fields |= dict(batches=None, manager=None, claim=None, stop=None, event_log=None)
    return train.Session(run, **fields | held)


def steps_where(predicate, last=25):
    return [step for step in range(1, last + 1) if predicate(step)]


def test_train_lines_every_log_step_and_at_the_last():
    session = make_session(num_steps=25, log_every=10)
    assert steps_where(session.logs) == [10, 20, 25]


def test_evaluations_every_eval_step_and_at_the_last_or_never():
    assert steps_where(make_session(num_steps=25, eval_every=10).evaluates) == [10, 20, 25]
    assert steps_where(make_session(num_steps=25, eval_every=0).evaluates) == []


def test_checkpoints_every_checkpoint_step_at_evaluations_if_asked_and_at_the_last():
    # stop_after=15: the last step this process trains is saved, the run's last not reached.
    session = make_session(num_steps=25, last_step=15, eval_every=10, checkpoint_every=7)
    assert steps_where(session.saves, last=15) == [7, 14, 15]
    session = make_session(num_steps=25, last_step=25, eval_every=10, checkpoint_each=True)
    assert steps_where(session.saves) == [10, 20, 25]
    assert steps_where(make_session(eval_every=0, last_step=25).saves) == [25]


def test_the_claim_is_renewed_after_every_step_and_keeps_the_workdir_from_the_first(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(RuntimeError), workdir.claim(str(run)) as claim:
        session = make_session(claim=claim)
        session.renew_claim(1, state=None)
        assert claim.trained
        raise RuntimeError("after the first step")
    assert (run / workdir.LOCK_FILE).exists()  # kept: the run trained a step


def test_train_batches_keep_the_position_of_the_last_batch_taken():
    positions = [np.array([4, 7]), np.array([5, 9])]
    batches = train.TrainBatches(
        iter([{"input_ids": 1}, *({streams.POSITIONS: p} for p in positions)]), how="plan"
    )
    assert next(batches) == {"input_ids": 1}
    assert batches.position is None  # a stream without positions leaves it None
    next(batches)
    next(batches)
    assert batches.position is positions[1]
    assert batches.how == "plan"


class FakeStop:
    def __init__(self, requested_at=(), pending_at=()):
        self.requested_at, self.pending_at, self.step = requested_at, pending_at, None
        self.signal_name = None

    def requested(self, step):
        self.step = step
        return step in self.requested_at

    @property
    def pending(self):
        return self.step in self.pending_at


def recording_saver(session):
    """A Saver whose save and save_and_stop record their calls instead."""
    saver = train.Saver(session, log=None)
    saver.calls = []
    saver.save = lambda step, state: saver.calls.append(("save", step))
    saver.save_and_stop = lambda step, state, *, saved: saver.calls.append(("stop", step, saved))
    return saver


def test_a_stop_request_saves_and_stops_at_its_step():
    saver = recording_saver(make_session(stop=FakeStop(requested_at=(3,))))
    for step in (1, 2, 3):
        saver.stop_if_requested(step, state=None)
    assert saver.calls == [("stop", 3, False)]


def test_saves_at_checkpoint_steps_and_a_request_seen_during_an_evaluation_stops():
    stop = FakeStop(pending_at=(10, 13))
    saver = recording_saver(make_session(checkpoint_every=5, stop=stop))
    for step in range(1, 14):
        stop.step = step
        saver.save_if_due(step, state=None)
    # At step 10 the checkpoint is the one the stop keeps; at 13 there is none yet.
    assert saver.calls == [("save", 5), ("save", 10), ("stop", 10, True), ("stop", 13, False)]


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_an_evaluation_is_left_out_of_the_train_window_and_is_a_span_of_its_own(tmp_path):
    event_log = events.EventLog(str(tmp_path))
    clock = FakeClock()
    log = SimpleNamespace(
        writer=None,
        window=metrics.TrainWindow(0, clock=clock),
        times=events.StepTimes(event_log, 0, peak_flops=None),
    )
    best_steps = []  # what rotation is told to spare
    manager = SimpleNamespace(keep_best=best_steps.append)
    session = make_session(num_steps=25, eval_every=10, workdir=str(tmp_path), manager=manager)
    evaluator = train.Evaluator(session, jitted_eval_step=None, log=log)
    recorded = []

    def record(step, params):
        clock.now += 30.0  # the evaluation's time
        recorded.append((step, params))

    evaluator.record = record
    for step in (9, 10):
        evaluator.evaluate_if_due(step, SimpleNamespace(params="params"))
    event_log.close()
    assert recorded == [(10, "params")]
    assert log.window.start == 130.0  # moved past the evaluation
    lines = (tmp_path / workdir.EVENTS_FILE).read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["steps", "eval"]
    assert json.loads(lines[-1])["step"] == 10
    assert evaluator.results["best_metric"] == {"name": "loss", "higher_is_better": False}


def test_the_loops_hooks_run_in_their_order_with_the_ones_from_outside_before_the_save():
    calls = []

    def record(name):
        return lambda step, state: calls.append(name)

    def mine(collective):
        return lambda session: Hook(record(f"mine, {collective=}"), collective=collective)

    session = make_session(
        claim=SimpleNamespace(stepped=lambda: calls.append("claim")),
        hook_factories=(mine(False), mine(True)),
    )
    hooks = train._hooks(
        session,
        profiler=SimpleNamespace(after=record("profiler")),
        log=SimpleNamespace(write=record("train line")),
        evaluator=SimpleNamespace(evaluate_if_due=record("evaluation")),
        saver=SimpleNamespace(stop_if_requested=record("stop check"), save_if_due=record("save")),
    )
    for hook in hooks:
        hook.call(1, state=None)
    assert calls == [
        "profiler",
        "claim",
        "train line",
        "stop check",
        "evaluation",
        "mine, collective=False",
        "mine, collective=True",
        "save",
    ]
    # What each needs of the other hosts (collective, stops, saves): the stop check and
    # the save end the run on every host alike.
    host_local, collective = (False, False, False), (True, False, False)
    assert [(h.collective, h.stops, h.saves) for h in hooks] == [
        *[host_local] * 3,
        (True, True, False),
        collective,
        host_local,
        collective,
        (True, True, True),
    ]


def test_a_hook_from_outside_that_breaks_a_rule_is_refused_before_the_first_step():
    def own_save(session):
        return Hook(lambda step, state: None, collective=True, saves=True)

    def stop_here_alone(session):
        return Hook(lambda step, state: None, collective=False, stops=True)

    loop_objects = dict(
        profiler=SimpleNamespace(after=None),
        log=SimpleNamespace(write=None),
        evaluator=SimpleNamespace(evaluate_if_due=None),
        saver=SimpleNamespace(stop_if_requested=None, save_if_due=print),
    )
    with pytest.raises(ConfigError, match=r"^hooks: 2 saves \(.*own_save.*, builtins.print\)"):
        train._hooks(make_session(hook_factories=(own_save,)), **loop_objects)
    with pytest.raises(ConfigError, match="stop_here_alone.*may stop the run but is host-local"):
        train._hooks(make_session(hook_factories=(stop_here_alone,)), **loop_objects)
