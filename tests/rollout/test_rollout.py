"""`prm-distill rollout`: problems in (GSM8K, generic, datasets, embedded), k samples each, steps
split, answers checked against the gold ones, resumable without duplicates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prm_distill.config import load_config
from prm_distill.generate import load_policy
from prm_distill.records import RecordError
from prm_distill.rollout import RolloutConfig, load_problems, run_rollout

FIELDS = {"id", "question", "steps", "response", "answer", "outcome", "metadata"}


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def test_problems_from_gsm8k_generic_datasets_and_the_embedded_generator(problems_file, tmp_path):
    gsm = problems_file([{"question": "Q1?", "answer": "She pays 1,000 + 234 = 1,234.\n#### 1,234"},
                         {"question": "Q2?", "answer": "#### 7"}], "gsm8k.jsonl")
    assert [(p.id, p.answer) for p in load_problems(str(gsm))] == [("gsm8k-1", "1234"), ("gsm8k-2", "7")]
    generic = problems_file([{"id": "a", "problem": "What is 1/2 + 1/2?", "solution": "It is $\\boxed{1}$."},
                             {"id": "b", "question": "Name a prime.", "final_answer": "2"},
                             {"id": "c", "question": "Open question"}])
    assert [(p.id, p.answer) for p in load_problems(str(generic))] == [("a", "1"), ("b", "2"), ("c", None)]
    import datasets

    datasets.DatasetDict({"train": datasets.Dataset.from_list([{"question": "T?", "answer": "#### 3"}]),
                          "test": datasets.Dataset.from_list([{"question": "U?", "answer": "#### 4"}])}).save_to_disk(str(tmp_path / "ds"))
    assert [p.answer for p in load_problems(str(tmp_path / "ds"))] == ["4"]  # test split by default
    assert [p.answer for p in load_problems(str(tmp_path / "ds"), split="train")] == ["3"]
    emb = load_problems("embedded:5")
    assert len(emb) == 5 and all(p.answer is not None and p.answer.lstrip("-").isdigit() for p in emb)
    with pytest.raises(RecordError, match=r"problems.jsonl:2: no question"):
        load_problems(str(problems_file([{"question": "ok"}, {"text": "no question field"}])))
    with pytest.raises(RecordError, match="duplicate problem id 'x'"):
        load_problems(str(problems_file([{"id": "x", "question": "a"}, {"id": "x", "question": "b"}])))
    with pytest.raises(FileNotFoundError, match="problems not found"):
        load_problems(str(tmp_path / "missing.jsonl"))


def test_rollouts_through_a_server_are_split_checked_and_recorded(openai_double, problems_file, tmp_path):
    d = openai_double(answer=lambda body: "Step 1: 2 + 2 = 4.\nStep 2: The answer is 4.", models=["pol"])
    probs = problems_file([{"id": "right", "question": "2 + 2?", "answer": "4"}, {"id": "wrong", "question": "2 + 3?", "answer": "#### 5"},
                           {"id": "open", "question": "Say something."}])
    cfg = load_config(RolloutConfig, None, [f"problems={probs}", f"output={tmp_path / 'out'}", "k=2", "temperature=0.7", "max_new_tokens=64",
                                            "policy.backend=openai", "policy.policy=pol", f"policy.base_url={d.base_url}", "progress=false"])
    s = run_rollout(cfg)
    recs = _read(tmp_path / "out" / "rollouts.jsonl")
    assert [r["id"] for r in recs] == ["right#0", "right#1", "wrong#0", "wrong#1", "open#0", "open#1"]
    assert all(set(r) == FIELDS for r in recs)
    assert [r["outcome"] for r in recs] == [1.0, 1.0, 0.0, 0.0, None, None]
    assert recs[0]["steps"] == ["Step 1: 2 + 2 = 4.", "Step 2: The answer is 4."] and recs[2]["answer"] == "5"
    meta = recs[0]["metadata"]
    assert meta["generator"] == "openai:pol" and meta["policy_version"] == "/weights/pol" and meta["predicted_answer"] == "4"
    assert meta["sampling"] == {"temperature": 0.7, "top_p": 1.0, "max_new_tokens": 64, "seed": meta["sampling"]["seed"]}
    assert len({r["metadata"]["sampling"]["seed"] for r in recs}) == 6  # every sample its own seed
    assert {b["seed"] for b in d.bodies} == {r["metadata"]["sampling"]["seed"] for r in recs}
    assert s["accuracy"] == 0.5 and s["pass_at_k"] == 0.5 and s["samples"] == 6 and s["problems_with_answer"] == 2


class StopAfter:
    """TEST DOUBLE around a real policy: raises (like a server dying) after `calls` generate calls."""

    def __init__(self, policy, calls: int):
        self.policy, self.calls = policy, calls
        self.name, self.version = policy.name, policy.version
        self.requests = 0

    def generate(self, requests):
        if self.calls == 0:
            from prm_distill.generate import PolicyUnavailable

            raise PolicyUnavailable("server went away")
        self.calls -= 1
        self.requests += len(requests)
        return self.policy.generate(requests)

    def close(self):
        pass


def test_an_interrupted_rollout_resumes_without_redoing_or_duplicating(tiny_backbone, tmp_path):
    from prm_distill.generate import PolicyUnavailable

    cfg = load_config(RolloutConfig, None, ["problems=embedded:5", f"output={tmp_path / 'out'}", "k=2", "max_new_tokens=4",
                                            "shard_problems=2", "progress=false", "policy.backend=transformers", f"policy.policy={tiny_backbone}"])
    policy = load_policy(cfg.policy)
    first = StopAfter(policy, calls=2)
    with pytest.raises(PolicyUnavailable):
        run_rollout(cfg, first)
    shards = sorted((tmp_path / "out").glob("rollouts-*.jsonl"))
    assert len(shards) == 2 and first.requests == 8  # two shards of 2 problems x 2 samples were kept
    kept = {r["id"]: r for s in shards for r in _read(s)}
    second = StopAfter(policy, calls=10)
    s = run_rollout(cfg, second)
    recs = _read(tmp_path / "out" / "rollouts.jsonl")
    assert second.requests == 2 and s["this_run"]["samples_generated"] == 2  # only the fifth problem
    assert len(recs) == 10 and len({r["id"] for r in recs}) == 10
    assert all(r == kept[r["id"]] for r in recs if r["id"] in kept)  # earlier samples untouched
    assert not list((tmp_path / "out").glob("rollouts-*.jsonl"))
    third = StopAfter(policy, calls=0)
    assert run_rollout(cfg, third)["this_run"]["samples_generated"] == 0 and _read(tmp_path / "out" / "rollouts.jsonl") == recs
    with pytest.raises(ValueError, match="use a new output folder"):
        run_rollout(load_config(RolloutConfig, None, ["problems=embedded:5", f"output={tmp_path / 'out'}", "k=3"]), third)


def test_cli_rolls_out_gsm8k_with_a_local_policy_and_refuses_a_prm_checkpoint(tiny_backbone, token_classifier, problems_file, tmp_path, capsys):
    from prm_distill.cli import main

    probs = problems_file([{"question": "Tom has 3 apples and buys 4. How many?", "answer": "Tom has 3 + 4 = 7.\n#### 7"}], "gsm8k.jsonl")
    rc = main(["rollout", "--policy", str(tiny_backbone), "--problems", str(probs), "--output", str(tmp_path / "out"), "--k", "3",
               "--max-new-tokens", "8", "--backend", "transformers", "--seed", "5"])
    assert rc == 0 and "rolled out 1 problems x 3 samples" in capsys.readouterr().out
    recs = _read(tmp_path / "out" / "rollouts.jsonl")
    assert len(recs) == 3 and all(set(x) == FIELDS | {"reference"} and x["answer"] == "7" and x["outcome"] in (0.0, 1.0) for x in recs)
    assert recs[0]["reference"] == "Tom has 3 + 4 = 7.\n#### 7"  # GSM8K's worked solution, for judge.backend=reference
    assert recs[0]["metadata"]["generator"] == f"transformers:{tiny_backbone}"
    assert {x["metadata"]["sampling"]["max_new_tokens"] for x in recs} == {8}
    summary = (tmp_path / "out" / "summary.json").read_bytes()
    rc = main(["rollout", "--policy", str(tiny_backbone), "--problems", str(probs), "--output", str(tmp_path / "out"), "--k", "3",
               "--max-new-tokens", "8", "--backend", "transformers", "--seed", "5", "--limit", "0"])
    assert rc == 2 and "limit must be >= 1" in capsys.readouterr().err
    assert (tmp_path / "out" / "summary.json").read_bytes() == summary  # the finished job's summary is not rewritten as empty
    rc = main(["rollout", "--policy", str(token_classifier), "--problems", str(probs), "--output", str(tmp_path / "bad"), "--backend", "transformers"])
    assert rc == 2 and "not a causal LM" in capsys.readouterr().err


@pytest.mark.slow
def test_embedded_smollm2_policy_rolls_out_embedded_problems(tmp_path):
    cfg = load_config(RolloutConfig, None, ["problems=embedded:2", f"output={tmp_path / 'out'}", "k=2", "max_new_tokens=96",
                                            "progress=false", "policy.backend=transformers", "policy.policy=smollm2"])
    s = run_rollout(cfg)
    recs = _read(tmp_path / "out" / "rollouts.jsonl")
    assert len(recs) == 4 and s["generator"] == "transformers:smollm2"
    assert all(r["steps"] and r["outcome"] in (0.0, 1.0) for r in recs)
