"""The select commands against a real `prm-distill serve` process on 127.0.0.1: the same output as
in-process, exit 4 with a clear message when the server dies mid-run, and a rerun that resumes."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from prm_distill.cli import main
from prm_distill.health import wait_until_ready
from prm_distill.select import backend

from .conftest import read_jsonl


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(checkpoint: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "prm_distill.cli", "serve", "--model", str(checkpoint), "--port", str(port),
         "--device", "cpu", "--dtype", "float32", "--max-wait-ms", "0"],
        env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    if asyncio.run(wait_until_ready(url, timeout_s=180, interval_s=0.25, alive=lambda: proc.poll() is None)):
        return proc, url
    proc.kill()
    raise RuntimeError(f"prm-distill serve did not become ready (exit {proc.poll()})")


def test_an_unreachable_server_is_exit_4_with_a_clear_message(rollouts, tmp_path, capsys):
    url = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    assert main(["rerank", "--url", url, "--input", str(rollouts), "--output", str(tmp_path / "r.jsonl")]) == 4
    err = capsys.readouterr().err
    assert "scoring server unavailable" in err and url in err and "rerun the same command to resume" in err


@pytest.mark.slow
def test_url_equals_model_and_a_server_dying_mid_run_is_resumed(tiny_checkpoint, rollouts, tmp_path, monkeypatch, capsys):
    local = tmp_path / "local"
    assert main(["rerank", "--model", str(tiny_checkpoint), "--input", str(rollouts), "--output", str(local / "ranked.jsonl"), "--device", "cpu"]) == 0
    assert main(["pairs", "--model", str(tiny_checkpoint), "--input", str(rollouts), "--output", str(local / "pairs.jsonl"),
                 "--min-margin", "0", "--device", "cpu"]) == 0

    proc, url = _serve(tiny_checkpoint)
    try:
        remote = tmp_path / "remote"
        assert main(["rerank", "--url", url, "--input", str(rollouts), "--output", str(remote / "ranked.jsonl")]) == 0
        for mine, theirs in zip(read_jsonl(remote / "ranked.jsonl"), read_jsonl(local / "ranked.jsonl"), strict=True):
            assert mine["best"] == theirs["best"]
            for a, b in zip(mine["samples"], theirs["samples"], strict=True):
                assert a["step_scores"] == pytest.approx(b["step_scores"], abs=1e-5)

        # The server is killed right after answering the first problem's request.
        real_score = backend.SyncClient.score

        def score_then_crash(self, items):
            out = real_score(self, items)
            proc.kill()
            proc.wait(30)
            return out

        monkeypatch.setattr(backend.SyncClient, "score", score_then_crash)
        pairs = remote / "pairs.jsonl"
        argv = ["pairs", "--input", str(rollouts), "--output", str(pairs), "--min-margin", "0"]
        capsys.readouterr()
        assert main([*argv, "--url", url]) == 4
        err = capsys.readouterr().err
        assert "scoring server unavailable" in err and str(pairs) in err and "rerun" in err
        assert len(read_jsonl(remote / "pairs.progress.jsonl")) == 1  # the first problem is done and kept
    finally:
        proc.kill()
        proc.wait(30)

    monkeypatch.setattr(backend.SyncClient, "score", real_score)
    proc, url = _serve(tiny_checkpoint)
    try:
        assert main([*argv, "--url", url]) == 0
    finally:
        proc.kill()
        proc.wait(30)
    resumed, reference = read_jsonl(pairs), read_jsonl(local / "pairs.jsonl")
    assert [(r["group"], r["chosen"], r["rejected"]) for r in resumed] == [(r["group"], r["chosen"], r["rejected"]) for r in reference]
    assert len(read_jsonl(remote / "pairs.progress.jsonl")) == 3
    summary = json.loads((remote / "pairs.summary.json").read_text())
    assert summary["this_run"] == {"problems_scored": 2, "problems_already_done": 1}
