"""Issue 27: `prm-distill rollout` shows honest progress and stops within seconds. A stop mid-shard
ends generation within a token (transformers' stopping criterion polls the request), every finished
sample is kept in a partial shard, and the rerun resumes to the output of an uninterrupted run; a
run refused before its first sample (a wrong --policy) does not lock its folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prm_distill import stop as stopping
from prm_distill.config import load_config
from prm_distill.exits import Interrupted
from prm_distill.generate import Generation, GenerationStopped, GenRequest, PolicyConfig, PolicyError, Watch, load_policy, problem_messages
from prm_distill.rollout import RolloutConfig, run_rollout
from prm_distill.rollout.job import Progress


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def _cfg(policy: str | Path, out: Path) -> RolloutConfig:
    # batch_size=1: samples finish one after another, and each is its own batch (its seed, so the
    # resumed samples are those of an uninterrupted run)
    return load_config(RolloutConfig, None, ["problems=embedded:3", f"output={out}", "k=2", "max_new_tokens=6", "shard_problems=8",
                                            "progress=false", "policy.backend=transformers", f"policy.policy={policy}", "policy.batch_size=1"])


class StopAfterSamples:
    """The real policy, with a stop requested (as the first Ctrl-C does) on the first token
    generated after `samples` samples have finished; counts the tokens generated after it."""

    def __init__(self, policy, samples: int):
        self.policy, self.samples = policy, samples
        self.name, self.version = policy.name, policy.version
        self.finished = 0
        self.tokens_after_stop = 0

    def generate(self, requests: list[GenRequest], watch: Watch | None = None) -> list[Generation]:
        assert watch is not None

        def on_sample(i: int, gen: Generation) -> None:
            self.finished += 1
            watch.sample(i, gen)

        def on_tokens(n: int) -> None:
            if stopping.requested():
                self.tokens_after_stop += n
            elif self.finished >= self.samples:
                stopping.request("SIGINT")
            watch.tokens(n)

        return self.policy.generate(requests, Watch(on_sample, on_tokens, watch.should_stop))

    def close(self) -> None:
        return None


@pytest.fixture(scope="module")
def policy(tiny_backbone):
    p = load_policy(PolicyConfig(policy=str(tiny_backbone), backend="transformers", batch_size=1))
    yield p
    p.close()


def test_a_stop_mid_shard_keeps_the_finished_samples_and_the_rerun_ends_as_an_uninterrupted_run(policy, tiny_backbone, tmp_path):
    cfg = _cfg(tiny_backbone, tmp_path / "out")
    stopper = StopAfterSamples(policy, samples=2)
    with pytest.raises(Interrupted, match="stopped by SIGINT mid-shard, keeping 2 of its 6 samples"):
        run_rollout(cfg, stopper)
    assert stopper.tokens_after_stop == 0  # stopped on the token the request came, not at the end of the shard
    (shard,) = (tmp_path / "out").glob("rollouts-*.jsonl")
    kept = _read(shard)
    assert [r["id"] for r in kept] == [f"{pid}#{j}" for pid in (kept[0]["metadata"]["problem_id"],) for j in (0, 1)]
    assert not (tmp_path / "out" / "rollouts.jsonl").exists()

    summary = run_rollout(cfg, policy)
    assert summary["samples"] == 6 and summary["this_run"]["samples_generated"] == 4
    resumed = _read(tmp_path / "out" / "rollouts.jsonl")
    assert all(r in resumed for r in kept)  # the kept samples, untouched

    run_rollout(_cfg(tiny_backbone, tmp_path / "ref"), policy)
    assert resumed == _read(tmp_path / "ref" / "rollouts.jsonl")


def test_the_transformers_backend_reports_every_token_and_sample_and_drops_only_unfinished_rows(policy):
    reqs = [GenRequest(problem_messages(f"What is {i} + 2?"), i, 0.8, 5) for i in range(3)]
    plain = policy.generate(reqs)
    seen: dict[int, Generation] = {}
    tokens: list[int] = []
    watched = policy.generate(reqs, Watch(lambda i, g: seen.__setitem__(i, g), tokens.append, lambda: False))
    assert watched == plain and seen == dict(enumerate(plain))  # watching changes nothing
    assert sum(tokens) == sum(g.tokens_out + (g.finish_reason == "stop") for g in plain)

    seen.clear()
    with pytest.raises(GenerationStopped):
        policy.generate(reqs, Watch(lambda i, g: seen.__setitem__(i, g), None, lambda: len(seen) >= 1))
    assert seen == {0: plain[0]}  # the second sample, cut short, is not reported


def test_progress_moves_per_token_and_tops_up_each_finished_sample():
    bar = Progress(total=2, max_new_tokens=10, enabled=False)
    for _ in range(4):
        bar.tokens(2)  # a batch of two rows, 4 tokens each
    assert bar.position == pytest.approx(0.8)
    bar.sample(Generation("a", 7, 3, "stop"))  # row A: 3 tokens and its EOS
    assert bar.position == pytest.approx(1.4)
    for _ in range(6):
        bar.tokens(1)
    bar.sample(Generation("b", 7, 10, "length"))
    assert bar.position == pytest.approx(2.0) and bar.finished == 2 and bar.generated == 14 and bar.tokens_per_s() > 0

    served = Progress(total=3, max_new_tokens=10, enabled=False)  # a backend that reports samples only
    served.sample(Generation("a", 7, 6, "stop"))
    assert served.position == 1 and served.generated == 6


def test_a_rollout_refused_before_its_first_sample_does_not_lock_its_folder(policy, tiny_backbone, token_classifier, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(PolicyError, match="not a causal LM"):
        run_rollout(_cfg(token_classifier, out))  # a PRM checkpoint given as --policy
    assert [p.name for p in out.iterdir()] == ["job.json"]
    summary = run_rollout(_cfg(tiny_backbone, out), policy)  # the rerun with the right policy
    assert summary["samples"] == 6
    assert json.loads((out / "job.json").read_text())["policy"] == str(tiny_backbone)
    with pytest.raises(ValueError, match="holds outputs made with policy="):
        run_rollout(_cfg(tmp_path / "other", out), policy)  # outputs exist now: guarded


def test_the_openai_backend_sends_nothing_new_after_a_stop(openai_double):
    d = openai_double(answer=lambda body: "The answer is 4.", models=["pol"])
    p = load_policy(PolicyConfig(policy="pol", backend="openai", base_url=d.base_url, concurrency=1))
    reqs = [GenRequest(problem_messages("What is 2 + 2?"), i, 0.8, 8) for i in range(6)]
    seen: dict[int, Generation] = {}
    try:
        with pytest.raises(GenerationStopped):
            p.generate(reqs, Watch(lambda i, g: seen.__setitem__(i, g), None, lambda: bool(seen)))
    finally:
        p.close()
    assert 1 <= len(seen) <= 2 and len(d.bodies) == len(seen)  # the one in flight when the stop came is answered and kept
