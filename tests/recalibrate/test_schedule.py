"""The schedule never blocks the training step, runs one round at a time, reports failures."""

import json
import logging
import threading

import pytest

from prm_distill.recalibrate import RecalibrateConfig, RecalibrationSchedule


def test_maybe_run_returns_at_once_and_skips_a_due_step_while_a_round_runs():
    release, started = threading.Event(), threading.Event()
    calls = []

    def slow(step):
        calls.append(step)
        started.set()
        release.wait(10)
        return {"step": step}

    sched = RecalibrationSchedule(every_steps=10, run=slow)
    assert sched.maybe_run(10) is True
    # the training step goes on while the round runs: the round is still blocked on `release` here
    assert started.wait(5) and sched.running
    for step in range(11, 20):
        assert sched.maybe_run(step) is False  # not due
    assert sched.maybe_run(20) is False  # due, but a round is in flight: skipped, counted (and not waited for: still running)
    assert sched.running
    assert sched.maybe_run(20) is False and sched.skipped == 1 and sched.skipped_steps == [20]  # same step again: not counted twice
    assert calls == [10] and sched.results[0].ok is None
    release.set()
    assert sched.wait(5)
    assert sched.results[0].ok is True and sched.results[0].result == {"step": 10} and sched.last_result.step == 10
    assert sched.maybe_run(30) is True
    sched.close(5)
    assert calls == [10, 30] and sched.maybe_run(40) is False  # closed: no new rounds


def test_a_failing_round_is_logged_and_kept_never_raised(caplog):
    def boom(step):
        raise RuntimeError(f"judge down at step {step}")

    sched = RecalibrationSchedule(every_steps=5, run=boom)
    with caplog.at_level(logging.ERROR, logger="prm_distill.recalibrate.schedule"):
        assert sched.maybe_run(5) is True  # no exception reaches the caller
        assert sched.wait(5)
    rec = sched.results[0]
    assert rec.ok is False and rec.error == "RuntimeError: judge down at step 5" and sched.last_error == rec.error
    assert sched.failures == 1 and rec.finished_at >= rec.started_at
    assert any("failed" in r.getMessage() for r in caplog.records)
    assert sched.maybe_run(10) is True and sched.close(5) and sched.failures == 2  # the next round still runs


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="every_steps"):
        RecalibrationSchedule(every_steps=0, run=lambda s: None)
    with pytest.raises(TypeError, match="callable"):
        RecalibrationSchedule(every_steps=3, run="not callable")


def test_for_checkpoint_writes_rounds_into_history_and_compares_them(tiny_checkpoint, synthetic_files, tmp_path):
    history = tmp_path / "recal"
    cfg = RecalibrateConfig()
    cfg.audit.max_trajectories = 4
    with RecalibrationSchedule.for_checkpoint(2, model=tiny_checkpoint, heldout=synthetic_files["test"], history=history, config=cfg) as sched:
        assert sched.maybe_run(2)
        assert sched.wait(120)
        assert sched.maybe_run(4)
    assert [r.ok for r in sched.results] == [True, True], sched.last_error
    first = json.loads((history / "step-00000002" / "report.json").read_text())
    second = json.loads((history / "step-00000004" / "report.json").read_text())
    assert first["previous"] is None
    assert second["previous"]["path"] == str(history / "step-00000002" / "report.json")
    assert second["previous"]["deltas"]["auroc"] == pytest.approx(0.0, abs=1e-9)  # same model, same held-out set
    assert second["drift"] == [] and sched.results[1].result["drift"] == []
