"""`prm-distill rollout` stopped: SIGTERM exits 130 within a token, writing the finished samples of
the shard in hand; a policy server that dies mid-run exits 4; either way the finished samples are
kept and a rerun generates only the rest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from prm_distill import exits
from prm_distill.cli import main

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def _wait_for(pred, proc: subprocess.Popen, timeout: float = 240) -> None:
    t0 = time.time()
    while not pred():
        assert proc.poll() is None, f"exited early with {proc.returncode}"
        assert time.time() - t0 < timeout, "timed out"
        time.sleep(0.05)


def _rollout_cmd(policy: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "prm_distill.cli", "rollout", "--policy", str(policy), "--backend", "transformers", "--problems",
            "embedded:12", "--k", "1", "--max-new-tokens", "24", "--output", str(out), "shard_problems=1", "progress=false"]


def test_sigterm_stops_rollout_keeping_the_finished_samples_and_a_rerun_generates_only_the_rest(tiny_backbone, tmp_path):
    out = tmp_path / "ro"
    proc = subprocess.Popen(_rollout_cmd(tiny_backbone, out), cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: any(out.glob("rollouts-*.jsonl")), proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == exits.INTERRUPTED, err[-3000:]
    assert "prm-distill rollout: interrupted: stopped by SIGTERM" in err and f"every finished sample is kept in {out}" in err
    shards = sorted(out.glob("rollouts-*.jsonl"))
    kept = [json.loads(line) for s in shards for line in s.read_text().splitlines()]
    assert 1 <= len(kept) < 12 and len(shards) == len(kept)  # one sample per shard: the one cut short is dropped
    assert not (out / "rollouts.jsonl").exists()

    again = subprocess.run(_rollout_cmd(tiny_backbone, out), cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["samples"] == 12 and summary["this_run"]["samples_generated"] == 12 - len(kept)
    merged = {json.loads(line)["id"]: json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()}
    assert len(merged) == 12 and all(merged[r["id"]] == r for r in kept)  # the kept samples, untouched


def test_rollout_exits_4_when_the_policy_server_dies_mid_run_and_resumes_on_another(openai_double, tmp_path, capsys):
    answer = "Step 1: 2 + 2 = 4.\nStep 2: The answer is 4."
    first = openai_double(models=["pol"])
    served = []

    def answer_then_die(body: dict) -> str:
        served.append(body)
        if len(served) == 3:  # the third answer is the last: the server stops listening, then sends it
            first.close()
        return answer

    first.answer = answer_then_die
    out = tmp_path / "ro"
    args = ["rollout", "--policy", "pol", "--backend", "openai", "--problems", "embedded:6", "--k", "1", "--output", str(out),
            "shard_problems=1", "policy.concurrency=1", "policy.max_retries=1", "policy.backoff_s=0.01", "progress=false"]
    assert main([*args, "--base-url", first.base_url]) == exits.UNAVAILABLE
    err = capsys.readouterr().err
    assert "prm-distill rollout: policy unavailable:" in err and f"every finished sample is kept in {out}; rerun the same command to resume" in err
    assert len(list(out.glob("rollouts-*.jsonl"))) == 3

    second = openai_double(models=["pol"], answer=lambda body: answer)
    assert main([*args, "--base-url", second.base_url]) == exits.OK
    assert len(second.bodies) == 3 and len((out / "rollouts.jsonl").read_text().splitlines()) == 6
