"""Monte-Carlo step labels (Math-Shepherd) and consensus with the LLM judge (Qwen PRM recipe).

The policy is reached over real HTTP (the OpenAI-compatible double answers by prompt and seed, so
every expected label is computed by hand) and, for the in-process path, a tiny real model."""

from __future__ import annotations

import json

import pytest

from prm_distill.config import load_config
from prm_distill.labeling import LabelJobConfig, run_label_job
from prm_distill.labeling.judges import JudgeUnavailable
from prm_distill.labeling.montecarlo import consensus
from prm_distill.records import read_jsonl

STEPS = ["Tom starts with 2 apples.", "He buys 3 more, so 2 + 3 = 5.", "The answer is 5."]


def _policy_answer(body: dict) -> str:
    """After step 1 the policy reaches 5 only on even seeds (2 of 4 completions); after step 2 always."""
    prefix = body["messages"][-1]["content"]
    if "2 + 3 = 5" in prefix:
        return "So the total is 5.\nThe answer is 5."
    return "The answer is 5." if body["seed"] % 2 == 0 else "He has 6 apples. The answer is 6."


def _write(tmp_path, rows: list[dict]):
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _cfg(path, out, url, *extra):
    return load_config(LabelJobConfig, None, [f"input={path}", f"output={out}", "progress=false", "judge.backend=montecarlo",
                                              "judge.policy=pol", "judge.policy_backend=openai", f"judge.base_url={url}", "judge.n=4",
                                              "judge.temperature=0.8", "judge.concurrency=1", *extra])


def test_soft_and_hard_estimates_from_completions_of_each_step_prefix(openai_double, tmp_path):
    path = _write(tmp_path, [{"id": "a", "question": "Tom has 2 apples and buys 3. How many?", "steps": STEPS, "answer": "5"},
                             {"id": "b", "question": "Tom has 2 apples and buys 3. How many?", "steps": STEPS[:2] + ["The answer is 6."], "answer": "5"}])
    d = openai_double(answer=_policy_answer, models=["pol"])
    s = run_label_job(_cfg(path, tmp_path / "soft", d.base_url))
    a, b = read_jsonl(tmp_path / "soft" / "labels.jsonl")
    # step 1: 2 of 4 completions reach 5; step 2: 4 of 4; the last step: the solution's own answer (no sampling)
    assert a.labels == [0.5, 1.0, 1.0] and b.labels == [0.5, 1.0, 0.0]
    assert a.judge["montecarlo"]["montecarlo:pol"] == {"n": 4, "estimate": "soft", "correct": [2, 4, 1], "completions": [4, 4, 0]}
    assert len(d.bodies) == 2 * 2 * 4 and {b["seed"] for b in d.bodies} == {0, 1, 2, 3}
    assert all(body["continue_final_message"] and body["messages"][-1]["role"] == "assistant" for body in d.bodies)
    assert all("5" not in body["messages"][0]["content"].split("How many?")[1] for body in d.bodies)  # no answer key in the prompt
    assert s["montecarlo"]["montecarlo:pol"] == {"completions": 16, "reached_gold": 12, "prefixes_sampled": 4, "share_reaching_gold": 0.75}
    run_label_job(_cfg(path, tmp_path / "hard", d.base_url, "judge.estimate=hard"))
    a, b = read_jsonl(tmp_path / "hard" / "labels.jsonl")
    assert a.labels == [1.0, 1.0, 1.0] and b.labels == [1.0, 1.0, 0.0]  # any completion reaching 5 makes a step good


def test_records_without_a_gold_answer_are_refused_before_any_request(openai_double, tmp_path, capsys):
    path = _write(tmp_path, [{"id": "a", "question": "Q?", "steps": STEPS, "answer": "5"}, {"id": "open", "question": "Q?", "steps": STEPS}])
    d = openai_double(answer=_policy_answer, models=["pol"])
    with pytest.raises(ValueError, match=r"needs a gold `answer` on every rollout; 1 of 2 have none \(open\)"):
        run_label_job(_cfg(path, tmp_path / "out", d.base_url))
    from prm_distill.cli import main

    rc = main(["label", f"input={path}", f"output={tmp_path / 'cli'}", "judge.backend=montecarlo", "judge.policy=pol",
               "judge.policy_backend=openai", f"judge.base_url={d.base_url}", "judge.n=2"])
    assert rc == 2 and "needs a gold `answer`" in capsys.readouterr().err
    assert d.bodies == []


def test_a_policy_server_dying_mid_job_loses_no_paid_completion(openai_double, tmp_path):
    path = _write(tmp_path, [{"id": "a", "question": "Q?", "steps": STEPS, "answer": "5"}])
    d = openai_double(answer=_policy_answer, models=["pol"], script=["ok", "ok", "ok", "500"])
    with pytest.raises(JudgeUnavailable, match="Monte-Carlo policy 'pol'"):
        run_label_job(_cfg(path, tmp_path / "out", d.base_url, "judge.max_retries=0"))
    assert len(d.bodies) == 4
    s = run_label_job(_cfg(path, tmp_path / "out", d.base_url, "judge.max_retries=0"))
    (r,) = read_jsonl(tmp_path / "out" / "labels.jsonl")
    assert r.labels == [0.5, 1.0, 1.0]
    assert len(d.bodies) == 4 + 5 and d.duplicates() == 1  # only the failed request was asked again
    assert s["this_run"]["cache_hits"] == 3


def test_consensus_keeps_only_steps_where_montecarlo_and_the_judge_agree(openai_double, tmp_path):
    path = _write(tmp_path, [{"id": "a", "question": "Tom has 2 apples and buys 3. How many?", "steps": STEPS, "answer": "5"}])
    pol = openai_double(answer=lambda body: "The answer is 5." if "2 + 3 = 5" in body["messages"][-1]["content"] else "The answer is 6.",
                        models=["pol"])
    judge = openai_double()  # every step "Score: 1"
    extra = ["judge.n=2", f"judges=[{{name: llm, base_url: '{judge.base_url}', model: j}}]", "votes=3", "consensus.enabled=true"]
    s = run_label_job(_cfg(path, tmp_path / "step", pol.base_url, *extra))
    (r,) = read_jsonl(tmp_path / "step" / "labels.jsonl")
    # Monte-Carlo [0, 1, 1] vs judge [1, 1, 1]: step 1 disagrees and loses its label
    assert r.judge["consensus"]["montecarlo"] == [0.0, 1.0, 1.0] and r.judge["consensus"]["judge"] == [1.0, 1.0, 1.0]
    assert r.labels == [None, 1.0, 1.0] and r.judge["consensus"]["kept"] == [False, True, True]
    assert s["consensus"] == {"rule": "step", "steps_compared": 3, "steps_kept": 2, "kept_share": 0.6667, "agreement": 0.6667,
                              "matrix": {"montecarlo_good": {"judge_good": 2, "judge_bad": 0}, "montecarlo_bad": {"judge_good": 1, "judge_bad": 0}}}
    s = run_label_job(_cfg(path, tmp_path / "first", pol.base_url, *extra, "consensus.rule=first_error"))
    (r,) = read_jsonl(tmp_path / "first" / "labels.jsonl")
    assert r.labels == [None, None, None] and s["consensus"]["kept_share"] == 0.0  # first errors at step 1 vs none
    with pytest.raises(ValueError, match="exactly one judge with backend=montecarlo and at least one LLM judge"):
        _cfg(path, tmp_path / "x", pol.base_url, "consensus.enabled=true")


def test_consensus_rules_by_hand():
    mc, judge = [1.0, 0.75, 0.25, 0.0], [1.0, 0.0, 0.0, None]
    assert consensus(mc, judge, "step", 0.5, "hard") == ([1.0, None, 0.0, None], [True, False, True, None])
    assert consensus(mc, judge, "step", 0.5, "mean") == ([1.0, None, 0.125, None], [True, False, True, None])
    assert consensus([1.0, 1.0, 0.0, 0.0], [1.0, 0.75, 0.0, 1.0], "first_error", 0.5, "montecarlo") == ([1.0, 1.0, 0.0, None], [True, True, True, None])
    assert consensus([1.0, 0.0], [1.0, 1.0], "first_error", 0.5, "hard") == ([None, None], [False, False])
    assert consensus([1.0, 1.0], [1.0, 1.0], "first_error", 0.5, "judge") == ([1.0, 1.0], [True, True])


def test_montecarlo_with_a_tiny_in_process_policy_resumes_from_its_cache(tiny_backbone, rollouts, tmp_path):
    path = rollouts(n=2, seed=5, corrupt_rate=0.5)
    rows = [json.loads(line) for line in open(path)]
    cfg = load_config(LabelJobConfig, None, [f"input={path}", f"output={tmp_path / 'out'}", "progress=false", "judge.backend=montecarlo",
                                             f"judge.policy={tiny_backbone}", "judge.policy_backend=transformers", "judge.n=2",
                                             "judge.max_tokens=4", "judge.batch_size=8"])
    s = run_label_job(cfg)
    recs = read_jsonl(tmp_path / "out" / "labels.jsonl")
    sent = sum((len(r["steps"]) - 1) * 2 for r in rows)
    assert s["this_run"]["requests_sent"] == sent and s["montecarlo"][f"montecarlo:{tiny_backbone}"]["completions"] == sent
    for r, row in zip(recs, rows):
        assert r.labels[-1] == row["outcome"]  # the last step: whether the rollout's own answer is right
        assert all(lab in (0.0, 0.5, 1.0) for lab in r.labels)
    (tmp_path / "out" / "labels.jsonl").unlink()  # lose the labels, keep the cache: nothing is generated again
    s = run_label_job(cfg)
    assert s["this_run"]["requests_sent"] == 0 and s["this_run"]["cache_hits"] == sent
    again = read_jsonl(tmp_path / "out" / "labels.jsonl")
    assert [(r.labels, r.votes, r.judge["montecarlo"]) for r in again] == [(r.labels, r.votes, r.judge["montecarlo"]) for r in recs]
    assert recs[0].judge["mode"] == "montecarlo" and recs[0].judge["prompt_version"] == "montecarlo.v1"


def test_judge_requests_go_round_robin_over_healthy_servers(rollouts, openai_double, tmp_path):
    from .conftest import free_port

    path = rollouts(n=2)
    a, b = openai_double(), openai_double()
    dead = f"http://127.0.0.1:{free_port()}/v1"
    cfg = load_config(LabelJobConfig, None, [f"input={path}", f"output={tmp_path / 'out'}", "progress=false", "votes=2",
                                             f"judge.base_url={a.base_url},{dead},{b.base_url}", "judge.concurrency=1"])
    s = run_label_job(cfg)
    steps = sum(len(json.loads(line)["steps"]) for line in open(path))
    assert len(a.bodies) == len(b.bodies) == steps and s["this_run"]["requests_sent"] == 2 * steps
    with pytest.raises(JudgeUnavailable, match="no endpoint answered GET /models"):
        run_label_job(load_config(LabelJobConfig, None, [f"input={path}", f"output={tmp_path / 'x'}", "progress=false",
                                                         f"judge.base_url={dead},{dead.replace('/v1', '/w/v1')}"]))


def test_rollout_output_feeds_montecarlo_labeling(openai_double, tmp_path):
    """`prm-distill rollout` writes what `prm-distill label judge.backend=montecarlo` reads: one server plays the policy for both."""
    from prm_distill.rollout import RolloutConfig, run_rollout

    d = openai_double(answer=lambda body: ("So 2 + 3 = 5.\n\nThe answer is 5." if body["messages"][-1]["role"] == "user"
                                           else "The answer is 5."), models=["pol"])
    probs = tmp_path / "problems.jsonl"
    probs.write_text(json.dumps({"id": "p", "question": "Tom has 2 apples and buys 3. How many?", "answer": "#### 5"}) + "\n")
    run_rollout(load_config(RolloutConfig, None, [f"problems={probs}", f"output={tmp_path / 'ro'}", "k=2", "progress=false",
                                                  "policy.backend=openai", "policy.policy=pol", f"policy.base_url={d.base_url}"]))
    s = run_label_job(_cfg(tmp_path / "ro" / "rollouts.jsonl", tmp_path / "lab", d.base_url, "judge.n=2"))
    recs = read_jsonl(tmp_path / "lab" / "labels.jsonl")
    assert [r.id for r in recs] == ["p#0", "p#1"] and all(r.labels == [1.0, 1.0] and r.outcome == 1.0 for r in recs)
    assert recs[0].metadata["generator"] == "openai:pol" and s["montecarlo"]["montecarlo:pol"]["completions"] == 4
