"""A judge is prompt + parse on top of one `generate.Policy`: the flat `judge.*` keys map onto a
`PolicyConfig`, a local judge's free answers are its policy's samples, and an OpenAI judge rides
the policy's transport (health check, model check, stop: nothing new sent, nothing paid lost)."""

from __future__ import annotations

import asyncio

import pytest

from prm_distill.generate import PolicyConfig, PolicyError, load_policy
from prm_distill.labeling.config import JudgeConfig
from prm_distill.labeling.judges import Interrupted
from prm_distill.labeling.judges.base import Request
from prm_distill.labeling.judges.local import LocalJudge
from prm_distill.labeling.judges.openai import OpenAIJudge
from prm_distill.labeling.judges.policy import gen_request
from prm_distill.labeling.prompts import prompts_for
from prm_distill.synthetic import SyntheticConfig, generate

REC = generate(SyntheticConfig(n=1, seed=4, min_events=2, max_events=2))[0]


def _requests(n: int = 3, max_tokens: int = 5) -> list[Request]:
    return [Request(p, seed=s, temperature=0.7, max_tokens=max_tokens) for s, p in enumerate(prompts_for("prefix", REC.question, REC.steps)[:n])]


def test_the_flat_judge_keys_map_onto_one_policy_config():
    local = JudgeConfig(backend="local", model="/m", batch_size=3, device="cuda", timeout_s=9.0).policy_config()
    assert (local.backend, local.policy, local.batch_size, local.device) == ("transformers", "/m", 3, "cuda")
    server = JudgeConfig(backend="openai", model="big", base_url="http://a/v1,http://b/v1", concurrency=5, max_retries=1,
                         backoff_s=0.1).policy_config()
    assert (server.backend, server.policy, server.base_url, server.concurrency) == ("openai", "big", "http://a/v1,http://b/v1", 5)
    assert (server.api_key_env, server.timeout_s, server.max_retries, server.backoff_s) == ("PRM_JUDGE_API_KEY", 120.0, 1, 0.1)
    offline = JudgeConfig(backend="vllm", model="m", vllm={"tensor_parallel_size": 2}).policy_config()
    assert offline.backend == "vllm" and offline.vllm == {"tensor_parallel_size": 2}  # the host's engine settings come from the policy
    mc = JudgeConfig(backend="montecarlo", model="ignored", policy="pol", policy_backend="openai", instruction="Go.").policy_config()
    assert (mc.backend, mc.policy, mc.instruction) == ("openai", "pol", "Go.")


def test_a_local_judges_free_answers_are_its_policys_samples(tiny_backbone):
    judge = LocalJudge(JudgeConfig(backend="local", model=str(tiny_backbone), batch_size=1))
    reqs = _requests()

    async def collect():
        return {i: c async for i, c in judge.stream(reqs, asyncio.Event())}

    got = asyncio.run(collect())
    policy = load_policy(PolicyConfig(policy=str(tiny_backbone), backend="transformers", batch_size=1))
    direct = policy.generate([gen_request(r) for r in reqs])
    assert [got[i].text for i in range(len(reqs))] == [g.text for g in direct]
    assert [(got[i].tokens_in, got[i].tokens_out) for i in range(len(reqs))] == [(g.tokens_in, g.tokens_out) for g in direct]
    assert judge.name == f"local:{tiny_backbone}" and judge.policy.name == f"transformers:{tiny_backbone}"


def test_an_openai_judge_checks_the_served_model_at_start(openai_double):
    d = openai_double(models=["judge-7b"])
    with pytest.raises(PolicyError, match="does not serve model 'judge-8b'"):
        OpenAIJudge(JudgeConfig(model="judge-8b", base_url=d.base_url))
    assert d.bodies == []  # refused before any paid request


def test_a_stopped_openai_judge_sends_nothing_new_and_delivers_what_is_in_flight(openai_double):
    d = openai_double(script=["sleep:0.3"] * 8)
    judge = OpenAIJudge(JudgeConfig(base_url=d.base_url, concurrency=1))
    reqs = _requests(n=len(REC.steps))
    assert len(reqs) >= 3
    stop, got = asyncio.Event(), []

    async def run():
        try:
            async for i, _ in judge.stream(reqs, stop):
                got.append(i)
                stop.set()  # the first answer arrives: stop
        finally:
            await judge.aclose()

    with pytest.raises(Interrupted):
        asyncio.run(run())
    # nothing new after the stop (at most the request the worker had already taken), and every paid answer delivered
    assert 1 <= len(d.bodies) <= 2 and len(got) == len(d.bodies)


def test_requests_sent_but_not_yet_consumed_never_exceed_the_concurrency(openai_double):
    # what a SIGKILL can cost: answers not yet taken by the job (and so not cached) are asked again on resume
    d = openai_double()
    judge = OpenAIJudge(JudgeConfig(base_url=d.base_url, concurrency=2))
    reqs = _requests(n=len(REC.steps))

    async def run():
        stream = judge.stream(reqs, asyncio.Event())
        try:
            await anext(stream)  # one answer taken, and the job busy with it for a while
            await asyncio.sleep(0.5)
            return len(d.bodies)
        finally:
            await stream.aclose()
            await judge.aclose()

    assert asyncio.run(run()) == 2 < len(reqs)
