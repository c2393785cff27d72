"""The labeling job end to end against a real HTTP server that speaks the OpenAI chat API (the
OpenAIDouble test double in conftest.py): files, resume, retries, invalid votes, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from prm_distill.config import load_config
from prm_distill.labeling import LabelJobConfig, run_label_job
from prm_distill.labeling.judges import JudgeUnavailable
from prm_distill.records import read_jsonl

from .conftest import ROOT, free_port, run_cli

SCALE = {0.0, 0.5, 1.0}


def _cfg(rollouts_path, out, base_url, *extra: str) -> LabelJobConfig:
    return load_config(LabelJobConfig, None, [f"input={rollouts_path}", f"output={out}", f"judge.base_url={base_url}",
                                              "judge.backoff_s=0.01", "progress=false", *extra])


def _n_steps(path) -> int:
    return sum(len(json.loads(line)["steps"]) for line in open(path))


def test_job_writes_one_record_per_rollout_with_vote_means_and_a_summary(rollouts, openai_double, tmp_path):
    path = rollouts(n=4)
    d = openai_double()
    s = run_label_job(_cfg(path, tmp_path / "out", d.base_url))
    recs = read_jsonl(tmp_path / "out" / "labels.jsonl")  # the trainer's reader
    assert sorted(r.id for r in recs) == sorted(json.loads(line)["id"] for line in open(path))
    assert len(d.bodies) == _n_steps(path) * 3  # prefix mode: one request per step and vote
    for r in recs:
        assert r.judge["prompt_version"] == "prefix.v1" and r.judge["mode"] == "prefix"
        for lab, votes in zip(r.labels, r.votes):
            assert len(votes) == 3 and set(votes) <= SCALE and lab == pytest.approx(sum(votes) / 3)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary == s
    assert summary["labelled_steps"] == _n_steps(path) and summary["label_distribution"]["1"] == _n_steps(path)
    assert summary["invalid_vote_rate"] == 0.0 and summary["vote_agreement"] == 1.0
    assert summary["answers_per_labelled_step"] == 3.0
    assert set(summary["mean_label_by_position"]) == {"0-20%", "20-40%", "40-60%", "60-80%", "80-100%"}
    assert not list((tmp_path / "out").glob("labels-*.jsonl"))  # shards merged away


def test_rerun_after_completion_sends_no_request(rollouts, openai_double, tmp_path):
    path, d = rollouts(n=2), openai_double()
    cfg = _cfg(path, tmp_path / "out", d.base_url)
    run_label_job(cfg)
    before, labels = len(d.bodies), (tmp_path / "out" / "labels.jsonl").read_text()
    s = run_label_job(cfg)
    assert len(d.bodies) == before and s["this_run"]["requests_sent"] == 0
    assert (tmp_path / "out" / "labels.jsonl").read_text() == labels


def test_429_5xx_garbage_and_timeouts_are_retried_with_backoff(rollouts, openai_double, tmp_path):
    path = rollouts(n=1)
    d = openai_double(script=["429", "500", "garbage", "sleep:1.5"])
    s = run_label_job(_cfg(path, tmp_path / "out", d.base_url, "judge.concurrency=1", "judge.timeout_s=0.5", "judge.max_retries=4"))
    assert s["labelled_steps"] == _n_steps(path)
    assert len(d.bodies) == _n_steps(path) * 3 + 4  # each failure cost exactly one more request
    assert s["invalid_votes"] == 0  # transport failures are not votes


def test_invalid_answers_are_counted_reasked_and_never_coerced(rollouts, openai_double, tmp_path):
    path = rollouts(n=1)
    d = openai_double(script=["invalid", "offscale"])
    s = run_label_job(_cfg(path, tmp_path / "a", d.base_url, "judge.concurrency=1"))
    assert s["invalid_votes"] == 2 and s["labelled_steps"] == _n_steps(path)  # both re-asked, then valid
    assert s["invalid_vote_rate"] == pytest.approx(2 / (2 + _n_steps(path) * 3), abs=1e-4)
    # No retries, one vote: the first step's only answer is invalid, so that step stays unsupervised.
    d2 = openai_double(script=["offscale"])
    run_label_job(_cfg(path, tmp_path / "b", d2.base_url, "judge.concurrency=1", "votes=1", "max_invalid_retries=0"))
    (r,) = read_jsonl(tmp_path / "b" / "labels.jsonl")
    assert r.labels[0] is None and r.votes[0] == [] and r.labels[1:] == [1.0] * (len(r.steps) - 1)


def test_bad_lines_are_reported_with_their_line_number_and_skipped(rollouts, openai_double, tmp_path):
    path = rollouts(n=2)
    good = path.read_text().splitlines()
    bad = ["{not json", json.dumps({"id": "x1", "steps": ["a step"]}), json.dumps({"id": "x2", "question": "q", "steps": []}),
           good[0], json.dumps({"question": "q", "steps": ["s"]}), json.dumps(["a", "list"])]
    path.write_text("\n".join([good[0], good[1], *bad]) + "\n")
    d = openai_double()
    s = run_label_job(_cfg(path, tmp_path / "out", d.base_url))
    assert s["records"] == 2 and s["skipped_lines"] == 6
    assert [x["line"] for x in s["skipped"]] == [3, 4, 5, 6, 7, 8]
    assert "question" in s["skipped"][1]["error"] and "duplicate id" in s["skipped"][3]["error"]


def test_response_input_is_split_with_the_shared_splitter(openai_double, tmp_path):
    from prm_distill.steps import split_steps

    response = "Step 1: Tom has 3 apples.\nStep 2: He buys 4 more, so 3 + 4 = 7.\nStep 3: The answer is 7."
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"id": "a", "question": "Tom has 3 apples and buys 4. How many?", "response": response}) + "\n")
    run_label_job(_cfg(path, tmp_path / "out", openai_double().base_url))
    (r,) = read_jsonl(tmp_path / "out" / "labels.jsonl")
    assert r.steps == split_steps(response) and len(r.steps) == 3


def test_unreachable_judge_fails_fast_and_keeps_completed_work(rollouts, openai_double, tmp_path):
    path = rollouts(n=4)
    d = openai_double()
    # 3 of the 4 rollouts first: a completed shard to protect.
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:3]) + "\n")
    run_label_job(_cfg(path, tmp_path / "out", d.base_url, "shard_size=1"))
    done = (tmp_path / "out" / "labels.jsonl").read_text()
    path.write_text("\n".join(lines) + "\n")
    dead = f"http://127.0.0.1:{free_port()}/v1"
    t0 = time.time()
    with pytest.raises(JudgeUnavailable, match="failed after 3 attempts: connection error"):
        run_label_job(_cfg(path, tmp_path / "out", dead, "judge.max_retries=2", "judge.backoff_s=0.05"))
    assert time.time() - t0 < 10
    assert (tmp_path / "out" / "labels.jsonl").read_text() == done
    sent = len(d.bodies)
    s = run_label_job(_cfg(path, tmp_path / "out", d.base_url))
    assert s["records"] == 4 and len(d.bodies) - sent == len(json.loads(lines[3])["steps"]) * 3


def test_cli_exit_codes_and_api_key_never_written(rollouts, openai_double, tmp_path):
    path, d = rollouts(n=1), openai_double()
    secret = "sk-test-5f3a9c"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MY_JUDGE_KEY": secret}
    r = subprocess.run([sys.executable, "-m", "prm_distill.cli", "-v", "label", "--config", str(ROOT / "configs" / "label.yaml"),
                        f"input={path}", f"output={tmp_path / 'out'}", f"judge.base_url={d.base_url}", "judge.api_key_env=MY_JUDGE_KEY"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert all(h.get("Authorization") == f"Bearer {secret}" for h in d.headers)
    assert secret not in r.stdout + r.stderr
    for f in (tmp_path / "out").rglob("*"):
        if f.is_file():
            assert secret not in f.read_text()
    dead = run_cli(f"input={path}", f"output={tmp_path / 'dead'}", f"judge.base_url=http://127.0.0.1:{free_port()}/v1",
                   "judge.max_retries=1", "judge.backoff_s=0.01", "progress=false")
    assert dead.returncode == 4 and "judge unavailable" in dead.stderr  # exits.UNAVAILABLE, as every command and "rerun to resume" in dead.stderr


def _wait_for(pred, timeout: float = 60) -> None:
    t0 = time.time()
    while not pred():
        assert time.time() - t0 < timeout, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_job_resumes_without_losing_duplicating_or_reasking(sig, rollouts, openai_double, tmp_path):
    """SIGTERM: in-flight answers are delivered and cached, so no request is ever repeated. SIGKILL:
    at most the requests in flight at the kill (<= concurrency) are asked again."""
    path = rollouts(n=6)
    expected = _n_steps(path) * 3
    d = openai_double(delay_s=0.05)
    args = [sys.executable, "-m", "prm_distill.cli", "label", f"input={path}", f"output={tmp_path / 'out'}",
            f"judge.base_url={d.base_url}", "judge.concurrency=4", "shard_size=2", "progress=false"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: len(d.bodies) >= expected // 2)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == (130 if sig == signal.SIGTERM else -signal.SIGKILL), err
    assert len(d.bodies) < expected
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    recs = read_jsonl(tmp_path / "out" / "labels.jsonl")  # raises on a duplicate id
    assert sorted(x.id for x in recs) == sorted(json.loads(line)["id"] for line in open(path))
    assert all(len(v) == 3 for x in recs for v in x.votes)
    if sig == signal.SIGTERM:
        assert d.duplicates() == 0 and len(d.bodies) == expected
    else:
        assert d.duplicates() <= 4 and len(d.bodies) == expected + d.duplicates()


@pytest.mark.parametrize("mode,answers_per_record", [("trajectory", 3), ("first_error", 3)])
def test_one_request_per_solution_and_vote_in_trajectory_and_first_error_modes(mode, answers_per_record, rollouts, openai_double, tmp_path):
    path, d = rollouts(n=3), openai_double()
    s = run_label_job(_cfg(path, tmp_path / "out", d.base_url, f"mode={mode}"))
    assert len(d.bodies) == 3 * answers_per_record
    assert s["labelled_steps"] == _n_steps(path) and s["mean_label"] == 1.0
    assert all(r.judge["prompt_version"] == f"{mode}.v1" for r in read_jsonl(tmp_path / "out" / "labels.jsonl"))


def test_first_error_verdicts_label_before_one_at_zero_and_leave_later_steps_unsupervised(openai_double, tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"id": "a", "question": "Add 2 and 3, then double.", "steps": ["2 + 3 = 5.", "5 x 2 = 12.", "So 12.", "Done: 12."]}) + "\n")
    d = openai_double(answer=lambda body: "Step 2 doubles wrongly.\nFirst error: step 2")
    run_label_job(_cfg(path, tmp_path / "out", d.base_url, "mode=first_error"))
    (r,) = read_jsonl(tmp_path / "out" / "labels.jsonl")
    assert r.labels == [1.0, 0.0, None, None] and r.votes == [[1.0] * 3, [0.0] * 3, [], []]


def test_judges_vote_together_and_per_judge_agreement_is_reported(rollouts, openai_double, tmp_path):
    path = rollouts(n=2)
    yes, no = openai_double(), openai_double(answer=lambda body: "Score: 0")
    cfg = _cfg(path, tmp_path / "out", yes.base_url, "judge.name=pro", "votes=2", f"judges=[{{name: con, base_url: '{no.base_url}'}}]")
    s = run_label_job(cfg)
    recs = read_jsonl(tmp_path / "out" / "labels.jsonl")
    assert all(lab == 0.5 for r in recs for lab in r.labels)  # two 1s and two 0s per step
    assert set(recs[0].judge["by_judge"]) == {"pro", "con"}
    assert s["judge_agreement_with_ensemble"] == {}  # a 2-2 tie has no ensemble majority
    assert len(yes.bodies) == len(no.bodies) == _n_steps(path) * 2


def test_verifier_vetoes_false_arithmetic_and_can_label_alone(openai_double, tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"id": "a", "question": "Add 2 and 3, then double.", "steps": ["Start with 2.", "2 + 3 = 5.", "5 x 2 = 12."]}) + "\n")
    d = openai_double()
    run_label_job(_cfg(path, tmp_path / "ens", d.base_url, "verifier.enabled=true"))
    (r,) = read_jsonl(tmp_path / "ens" / "labels.jsonl")
    assert r.labels == [1.0, 1.0, 0.0] and r.judge["vetoed_steps"] == [2]
    assert r.judge["by_judge"]["arithmetic-verifier"] == [[], [], [0.0]]  # true arithmetic gets no vote: it refutes, never confirms
    sent = len(d.bodies)
    s = run_label_job(_cfg(path, tmp_path / "alone", d.base_url, "verifier.alone=true"))
    (r,) = read_jsonl(tmp_path / "alone" / "labels.jsonl")
    assert r.labels == [None, 1.0, 0.0] and len(d.bodies) == sent and s["this_run"]["requests_sent"] == 0


def test_true_arithmetic_never_outvotes_judges_that_call_the_step_wrong(openai_double, tmp_path):
    """Three judge votes of 0 on a step whose equation holds (a wrong operand computed correctly) give 0:
    the verifier adds no 1 vote (which made it 1/4 = 0.25 before), it can only veto."""
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"id": "a", "question": "Tom has 4 apples and buys 3 more. How many?", "steps": ["4 + 2 = 6 apples."]}) + "\n")
    d = openai_double(answer=lambda body: "The second number is wrong.\nScore: 0")
    run_label_job(_cfg(path, tmp_path / "out", d.base_url, "verifier.enabled=true", "votes=3"))
    (r,) = read_jsonl(tmp_path / "out" / "labels.jsonl")
    assert r.labels == [0.0] and r.votes == [[0.0, 0.0, 0.0]]


def test_an_output_folder_never_mixes_modes(rollouts, openai_double, tmp_path):
    path, d = rollouts(n=1), openai_double()
    run_label_job(_cfg(path, tmp_path / "out", d.base_url))
    with pytest.raises(ValueError, match="use a new output folder"):
        run_label_job(_cfg(path, tmp_path / "out", d.base_url, "mode=trajectory"))


def test_anchoring_drops_wrong_answers_judged_all_good_and_hard_negatives_join_the_output(rollouts, openai_double, tmp_path):
    pytest.importorskip("math_verify")
    path = rollouts(n=6, corrupt_rate=0.5, seed=4)
    rows = [json.loads(line) for line in open(path)]
    wrong = {r["id"] for r in rows if r["steps"][-1] != f"The answer is {r['answer']}."}
    assert 0 < len(wrong) < len(rows)
    d = openai_double()  # judges every step 1
    s = run_label_job(_cfg(path, tmp_path / "out", d.base_url, "anchor.enabled=true", "negatives.padded_rate=1", "negatives.error_rate=1"))
    recs = read_jsonl(tmp_path / "out" / "labels.jsonl")
    kept = {r.id for r in recs if "hard_negative" not in r.metadata}
    assert kept == {r["id"] for r in rows} - wrong and s["anchor_dropped"] == len(wrong)
    assert all(r.metadata["answer_correct"] and r.outcome == 1.0 for r in recs if r.id in kept)
    assert s["hard_negatives"] == {"padded": len(kept), "injected_error": len(kept)}
    assert {r.metadata["hard_negative"]["source_id"] for r in recs if "hard_negative" in r.metadata} == kept
    sent = len(d.bodies)
    run_label_job(_cfg(path, tmp_path / "out", d.base_url, "anchor.enabled=true", "negatives.padded_rate=1", "negatives.error_rate=1"))
    assert len(d.bodies) == sent  # dropped records are replayed from the cache, not re-asked
