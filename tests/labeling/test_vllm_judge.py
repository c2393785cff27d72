"""Against a REAL judge: a vLLM OpenAI-compatible server with the SmolLM2-135M-Instruct weights
(started once per session; skipped without .venv-vllm). A counting proxy in front of it records
every request, so "no prompt sent twice" is checked at the wire."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from prm_distill.records import read_jsonl

from .conftest import ROOT

pytestmark = pytest.mark.slow
SENTINEL = "ANSWERKEY4242"


def test_kill_and_resume_against_vllm_loses_nothing_and_never_reasks(vllm_judge_server, openai_double, rollouts, tmp_path):
    path = rollouts(n=3, seed=5, min_events=1, max_events=2)
    rows = [json.loads(line) for line in open(path)]
    path.write_text("".join(json.dumps({**r, "answer": SENTINEL}) + "\n" for r in rows))
    proxy = openai_double(upstream=vllm_judge_server)
    args = [sys.executable, "-m", "prm_distill.cli", "label", f"input={path}", f"output={tmp_path / 'out'}",
            f"judge.base_url={proxy.base_url}", "judge.model=smollm2", "judge.concurrency=4", "judge.max_tokens=40",
            "votes=2", "max_invalid_retries=1", "shard_size=1", "progress=false"]
    first_round = sum(len(r["steps"]) for r in rows) * 2
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    while len(proxy.bodies) < first_round // 3:
        assert proc.poll() is None and time.time() - t0 < 300, "job ended or stalled before the kill"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    asked_before = len(proxy.bodies)
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert len(proxy.bodies) > asked_before and proxy.duplicates() == 0  # resumed, and nothing asked twice

    recs = read_jsonl(tmp_path / "out" / "labels.jsonl")
    assert sorted(x.id for x in recs) == sorted(r["id"] for r in rows)
    for x in recs:
        assert x.judge["prompt_version"] == "prefix.v1"
        for lab, votes in zip(x.labels, x.votes):
            assert set(votes) <= {0.0, 0.5, 1.0}
            assert lab is None if len(votes) < 2 else lab == pytest.approx(sum(votes) / len(votes))
    for body in proxy.bodies:
        text = json.dumps(body["messages"])
        assert SENTINEL not in text and "outcome" not in text
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["records"] == 3 and summary["invalid_votes"] + sum(len(v) for x in recs for v in x.votes) >= first_round
    asked = len(proxy.bodies)
    rerun = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0 and len(proxy.bodies) == asked  # after completion: no request at all
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["this_run"]["requests_sent"] == 0
