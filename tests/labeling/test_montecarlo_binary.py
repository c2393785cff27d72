"""Monte-Carlo labels by binary search (OmegaPRM, `judge.mc_search=binary`): the first prefix from
which no completion reaches the gold answer, found with O(log n) sampled prefixes instead of n - 1.

The policy is the OpenAI-compatible TEST DOUBLE of conftest (a real HTTP server, not a model) that
answers by prefix and seed, so every sampled prefix, request count and label is worked out by hand."""

from __future__ import annotations

import json

import pytest

from prm_distill.config import load_config
from prm_distill.labeling import LabelJobConfig, run_label_job
from prm_distill.labeling.montecarlo import binary_labels, next_prefix
from prm_distill.records import read_jsonl

Q = "Tom has 1 apple and gets 1 more apple five times, then counts them. How many apples does he have?"
# a wrong rollout of 8 steps whose first error is step 5 (5 + 1 = 7)
STEPS = ["Tom has 1 apple.", "He gets one: 1 + 1 = 2.", "Another: 2 + 1 = 3.", "Another: 3 + 1 = 4.", "Another: 4 + 1 = 5.",
         "Another: 5 + 1 = 7.", "Counting once more, 7 + 1 = 8... no, he has 7 + 2 = 9.", "The answer is 9."]
GOLD = "6"


def _policy(body: dict) -> str:
    """After the error nothing reaches 6; from the prefix ending at step 4 only even seeds do (2 of 4); earlier always."""
    prefix = body["messages"][-1]["content"]
    if "5 + 1 = 7" in prefix:
        return "So he has 9. The answer is 9."
    if "4 + 1 = 5" in prefix:
        return "Then 5 + 1 = 6. The answer is 6." if body["seed"] % 2 == 0 else "The answer is 5."
    return "He keeps adding one until he has 6. The answer is 6."


def _outcomes(k: int) -> list[float]:
    """What _policy's completions from prefix k score (seeds 0..3)."""
    return [0.0] * 4 if k >= 5 else [1.0, 0.0, 1.0, 0.0] if k == 4 else [1.0] * 4


def test_the_search_samples_three_of_seven_prefixes_by_hand():
    evaluated: dict[int, list[float]] = {}
    asked = []
    while (k := next_prefix(evaluated, len(STEPS), 0.0)) is not None:
        asked.append(k)
        evaluated[k] = _outcomes(k)
    # lo=0, hi=7 (the wrong answer): mid 3 reaches -> lo 4; mid 5 does not -> hi 5; mid 4 reaches (2 of 4) -> lo 5 = the first error
    assert asked == [3, 5, 4]
    labels, e = binary_labels(evaluated, len(STEPS), 0.0, "soft")
    assert e == 5 and labels == [1.0, 1.0, 1.0, 1.0, 0.5, 0.0, None, None]  # steps 0-2 carry step 3's estimate
    assert binary_labels(evaluated, len(STEPS), 0.0, "hard")[0] == [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, None, None]
    assert next_prefix({}, len(STEPS), 1.0) is None and binary_labels({}, 3, 1.0, "soft") == ([1.0, 1.0, 1.0], None)
    # first error at step 0 and at the last step (every prefix still reaches the answer: the conclusion is wrong)
    assert next_prefix({3: [0.0], 1: [0.0]}, 8, 0.0) == 0 and binary_labels({3: [0.0], 1: [0.0], 0: [0.0]}, 8, 0.0, "soft") == ([0.0] + [None] * 7, 0)
    ev = {3: [1.0], 5: [1.0], 6: [1.0]}
    assert next_prefix(ev, 8, 0.0) is None and binary_labels(ev, 8, 0.0, "soft") == ([1.0] * 7 + [0.0], 7)
    with pytest.raises(ValueError, match="prefix 3 not sampled"):
        binary_labels({}, 8, 0.0, "soft")


def _write(tmp_path, rows):
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _cfg(path, out, url, *extra):
    return load_config(LabelJobConfig, None, [f"input={path}", f"output={out}", "progress=false", "judge.backend=montecarlo",
                                              "judge.policy=pol", "judge.policy_backend=openai", f"judge.base_url={url}", "judge.n=4",
                                              "judge.temperature=0.8", "judge.concurrency=1", *extra])


def test_binary_search_job_sends_three_prefixes_where_all_sends_seven(openai_double, tmp_path):
    right = STEPS[:5] + ["Another: 5 + 1 = 6.", "He has 6 apples.", "The answer is 6."]
    path = _write(tmp_path, [{"id": "wrong", "question": Q, "steps": STEPS, "answer": GOLD}, {"id": "right", "question": Q, "steps": right, "answer": GOLD}])
    d = openai_double(answer=_policy, models=["pol"])
    s = run_label_job(_cfg(path, tmp_path / "bin", d.base_url, "judge.mc_search=binary"))
    wrong, ok = read_jsonl(tmp_path / "bin" / "labels.jsonl")
    assert wrong.labels == [1.0, 1.0, 1.0, 1.0, 0.5, 0.0, None, None] and ok.labels == [1.0] * 8
    assert wrong.judge["montecarlo"]["montecarlo:pol"] == {"n": 4, "estimate": "soft", "correct": [0, 0, 0, 4, 2, 0, 0, 0],
                                                          "completions": [0, 0, 0, 4, 4, 4, 0, 0], "search": "binary",
                                                          "prefixes_sampled": 3, "first_error": 5}
    assert len(d.bodies) == 3 * 4 and s["this_run"]["requests_sent"] == 12  # the right rollout costs nothing
    assert sorted({b["messages"][-1]["content"].count("Another") for b in d.bodies}) == [2, 3, 4]  # prefixes 3, 4, 5
    assert s["montecarlo"]["montecarlo:pol"] == {"completions": 12, "reached_gold": 6, "prefixes_sampled": 3, "share_reaching_gold": 0.5}
    # the full estimate samples every prefix but the last: 7 x 4 requests for the wrong rollout, 7 x 4 for the right one
    sent = len(d.bodies)
    run_label_job(_cfg(path, tmp_path / "all", d.base_url))
    (full, _) = read_jsonl(tmp_path / "all" / "labels.jsonl")
    assert len(d.bodies) - sent == 2 * 7 * 4
    assert full.labels == [1.0, 1.0, 1.0, 1.0, 0.5, 0.0, 0.0, 0.0]  # the same first error, found with 3 prefixes instead of 7
    # resume: the search replays from the cache and asks nothing again
    (tmp_path / "bin" / "labels.jsonl").unlink()
    s = run_label_job(_cfg(path, tmp_path / "bin", d.base_url, "judge.mc_search=binary"))
    assert s["this_run"]["requests_sent"] == 0 and s["this_run"]["cache_hits"] == 12
    assert read_jsonl(tmp_path / "bin" / "labels.jsonl")[0].labels == wrong.labels
    with pytest.raises(ValueError, match="judge.mc_search must be one of"):
        _cfg(path, tmp_path / "x", d.base_url, "judge.mc_search=linear")


def test_binary_montecarlo_and_the_reference_rule_agree_under_consensus(openai_double, tmp_path):
    natalia_q = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
                 "How many clips did Natalia sell altogether in April and May?")
    ref = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
    rows = [{"id": "twice", "question": natalia_q, "steps": ["In May she sold 48 * 2 = 96 clips.", "Altogether 48 + 96 = 144 clips.", "The answer is 144."],
             "answer": "72", "reference": ref},
            {"id": "late", "question": natalia_q, "steps": ["In May she sold 48 / 2 = 24 clips.", "The answer is 24."], "answer": "72", "reference": ref}]
    path = _write(tmp_path, rows)
    d = openai_double(answer=lambda body: "The answer is 144." if "96" in body["messages"][-1]["content"] else "So 48 + 24 = 72. The answer is 72.",
                      models=["pol"])
    s = run_label_job(_cfg(path, tmp_path / "out", d.base_url, "judge.mc_search=binary", "judges=[{backend: reference}]",
                           "consensus.enabled=true", "consensus.rule=first_error"))
    twice, late = read_jsonl(tmp_path / "out" / "labels.jsonl")
    # twice: prefixes 1 then 0 hold 96 (no completion reaches 72): Monte-Carlo and the rule both put the error at step 0
    assert twice.judge["consensus"]["montecarlo"] == [0.0, None, None] and twice.judge["consensus"]["judge"] == [0.0, None, None]
    assert twice.labels == [0.0, None, None]
    # late: prefix 0 reaches 72, so Monte-Carlo blames the conclusion (step 1), as the rule does (24 is on the gold chain)
    assert late.judge["consensus"]["montecarlo"] == [1.0, 0.0] and late.judge["consensus"]["judge"] == [1.0, 0.0] and late.labels == [1.0, 0.0]
    assert s["consensus"]["kept_share"] == 1.0 and s["consensus"]["steps_compared"] == 3
    assert len(d.bodies) == 4 * (2 + 1)  # twice: prefixes 1 and 0; late: prefix 0
