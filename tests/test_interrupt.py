"""The job spine of every command: one exception -> exit code table, SIGTERM/SIGINT -> 130 with the
work done so far kept (train: a resumable checkpoint), and a rerun of the same command resumes.
Rollout's part (SIGTERM, a dead server) is in tests/rollout/test_rollout_stop.py, labeling's in
tests/labeling/test_job.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from prm_distill import exits, stop
from prm_distill.cli import exit_code, main

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def _wait_for(pred, proc: subprocess.Popen, timeout: float = 240) -> None:
    t0 = time.time()
    while not pred():
        assert proc.poll() is None, f"exited early with {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}"
        assert time.time() - t0 < timeout, "timed out"
        time.sleep(0.05)


def test_one_table_maps_every_failure_kind_to_its_exit_code():
    from prm_distill.config import ConfigError
    from prm_distill.generate import PolicyUnavailable
    from prm_distill.labeling.judges import Interrupted, JudgeUnavailable
    from prm_distill.records import RecordError
    from prm_distill.select.backend import ScoringUnavailable

    assert Interrupted is exits.Interrupted  # labeling's stop is the ground floor's
    cases = {ConfigError("k"): 2, RecordError("r"): 2, FileNotFoundError("f"): 2, ValueError("v"): 2,
             JudgeUnavailable("j"): 4, PolicyUnavailable("p"): 4, ScoringUnavailable("s"): 4, exits.Unavailable("u"): 4,
             Interrupted("i"): 130, KeyboardInterrupt(): 130}
    assert {type(e).__name__: exit_code(e)[0] for e in cases} == {type(e).__name__: c for e, c in cases.items()}
    assert exit_code(JudgeUnavailable("j"))[1] == "judge unavailable" and exit_code(ScoringUnavailable("s"))[1] == "scoring server unavailable"
    assert exit_code(RuntimeError("a bug")) is None  # not in the table: a traceback, never a silent code


def test_a_stop_request_is_cooperative_inside_a_section_and_immediate_outside(monkeypatch):
    with stop.handle_signals():
        seen = []
        with stop.cooperative(lambda: seen.append("asked")):
            os.kill(os.getpid(), signal.SIGTERM)  # the first signal only asks ...
            time.sleep(0.01)
            assert stop.requested() and seen == ["asked"]
            with pytest.raises(exits.Interrupted, match="stopped by SIGTERM at the safe point"):
                stop.check("at the safe point")  # ... the job stops where its work is kept
        with pytest.raises(exits.Interrupted, match="SIGINT"):
            os.kill(os.getpid(), signal.SIGINT)  # outside a section (or a second signal): at once
            time.sleep(1)
    assert not stop.requested() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored
    with pytest.raises(exits.Interrupted), stop.cooperative():  # a job called from Python installs the handler itself
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)
        stop.check()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.parametrize("command", ["eval", "score"])
def test_sigterm_during_a_short_command_exits_130(command, tiny_checkpoint, synthetic_files, tmp_path, capsys, monkeypatch):
    import prm_distill.serve.engine as engine_module

    real = engine_module.PRMEngine.score

    def score_then_sigterm(self, items):  # the real scores, then the signal lands mid-command
        out = real(self, items)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
        return out

    monkeypatch.setattr(engine_module.PRMEngine, "score", score_then_sigterm)
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"question": "What is 2 + 3?", "steps": ["2 + 3 = 5.", "So 5."]}) + "\n")
    args = {"eval": ["eval", "--model", str(tiny_checkpoint), "--data", str(synthetic_files["test"]), "--limit", "2", "--threshold", "0.5"],
            "score": ["score", "--model", str(tiny_checkpoint), "--input", str(inp), "--output", str(tmp_path / "out.jsonl")]}[command]
    assert main(args) == exits.INTERRUPTED
    assert f"prm-distill {command}: interrupted: stopped by SIGTERM" in capsys.readouterr().err
    assert not (tmp_path / "out.jsonl").exists()  # nothing half-written


def _train_cmd(train_overrides, backbone: Path, files: dict, out: Path, max_steps: int) -> list[str]:
    return [sys.executable, "-m", "prm_distill.cli", "train", *train_overrides(backbone, files, out, **{"optim.max_steps": max_steps, "optim.batch_size": 2})]


def test_sigterm_stops_train_with_a_resumable_checkpoint_that_a_rerun_resumes(tiny_backbone, synthetic_files, train_overrides, tmp_path):
    """save_steps 0 (as in the pipeline): the stop itself saves the checkpoint; the rerun continues the step count."""
    out = tmp_path / "m"
    cmd = _train_cmd(train_overrides, tiny_backbone, synthetic_files, out, max_steps=400)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    errs: list[str] = []
    # one reader per pipe (communicate() would read stdout too and close it under the stdout reader's feet)
    readers = [threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True),
               threading.Thread(target=lambda: errs.extend(proc.stderr), daemon=True)]
    for reader in readers:
        reader.start()
    _wait_for(lambda: any(line.startswith("step 2/") for line in lines), proc)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    for reader in readers:
        reader.join(10)
    err = "".join(errs)
    assert proc.returncode == exits.INTERRUPTED, err[-3000:]
    (saved,) = sorted((out / "checkpoints").glob("step-*"))
    state = json.loads((saved / "trainer_state.json").read_text())
    k = state["step"]
    assert saved.name == f"step-{k}" and 2 <= k < 400 and [h["step"] for h in state["history"]] == list(range(1, k + 1))
    assert "prm-distill train: interrupted: stop requested at step" in err and f"{out / 'checkpoints'}; rerun the same command to resume" in err
    assert not (out / "prm_distill.json").exists()  # stopped, not finished: nothing exported

    again = subprocess.run(_train_cmd(train_overrides, tiny_backbone, synthetic_files, out, max_steps=k + 2), cwd=ROOT, env=ENV, capture_output=True,
                           text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resumed from {saved} at step {k}" in again.stdout
    training = json.loads((out / "prm_distill.json").read_text())["training"]
    assert training["steps"] == k + 2 and [h["step"] for h in training["history"] if "loss" in h] == list(range(1, k + 3))


def test_sigterm_during_a_pipeline_stage_exits_130_records_the_stage_and_prints_the_report(tmp_path, capsys, monkeypatch):
    import dataclasses

    from prm_distill.pipeline import run, stages

    def data_then_sigterm(ctx, out):  # the real data stage, then the signal lands before it returns
        summary = data_stage.run(ctx, out)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
        return summary

    data_stage = stages.STAGES[0]
    assert data_stage.name == "data"
    monkeypatch.setattr(run, "STAGES", [dataclasses.replace(data_stage, run=data_then_sigterm), *stages.STAGES[1:]])
    args = ["pipeline", "name=t", f"root={tmp_path}", "data.synthetic_train=4", "data.synthetic_dev=2", "data.heldout_size=4"]
    assert main(args) == exits.INTERRUPTED
    captured = capsys.readouterr()
    it = tmp_path / "t" / "iter-1"
    assert captured.out.strip().splitlines()[-1] == f"report: {it / 'report.md'}"
    assert "prm-distill pipeline: interrupted: stopped by SIGTERM" in captured.err and "completed stages are kept" in captured.err
    m = json.loads((it / "manifest.json").read_text())
    assert m["stages"]["data"]["status"] == "failed" and m["stages"]["data"]["error"].startswith("Interrupted")
    assert m["invocations"][-1]["failed"] == "data" and m["invocations"][-1]["ran"] == []
