"""Sampling from a policy: transformers (tiny real model, real tokenizer and chat template), an
OpenAI-compatible server over real HTTP (round robin, health checks), and clear errors for a path
that is not a causal LM."""

from __future__ import annotations

import os

import pytest

from prm_distill.generate import (
    EndpointPool,
    GenRequest,
    PolicyConfig,
    PolicyError,
    PolicyUnavailable,
    load_policy,
    problem_messages,
    use_inprocess_vllm_on_cpu,
)

from .conftest import free_port


def _req(seed: int = 1, prefix: list[str] | None = None, tokens: int = 6, question: str = "What is 2 + 3?") -> GenRequest:
    return GenRequest(problem_messages(question, prefix_steps=prefix), seed, 0.8, tokens)


@pytest.fixture(scope="module")
def tiny_policy(tiny_backbone):
    p = load_policy(PolicyConfig(policy=str(tiny_backbone), backend="transformers", batch_size=4))
    yield p
    p.close()


def test_transformers_samples_are_seeded_and_continue_a_prefix(tiny_policy, tiny_backbone):
    a, b, c = tiny_policy.generate([_req(1), _req(2), _req(1, tokens=3)])
    assert [g.tokens_out for g in (a, b, c)] == [6, 6, 3] and {a.finish_reason, c.finish_reason} == {"length"}
    again = tiny_policy.generate([_req(1), _req(2), _req(1, tokens=3)])
    assert [g.text for g in again] == [a.text, b.text, c.text]  # same requests, same batches: same samples
    assert tiny_policy.generate([_req(1)])[0].text != tiny_policy.generate([_req(7)])[0].text
    (fresh, cont) = tiny_policy.generate([_req(3), _req(3, prefix=["First, 2 + 3 = 5."])])
    # the prefix is part of the prompt (more tokens in), never of the returned text
    tok = tiny_policy.tok
    prefix_ids = tok("First, 2 + 3 = 5.\n\n", add_special_tokens=False).input_ids
    assert cont.tokens_in == fresh.tokens_in + len(prefix_ids)
    assert not cont.text.startswith("First")
    assert tiny_policy.name == f"transformers:{tiny_backbone}" and tiny_policy.version.startswith("sha256:")


def test_a_path_that_is_not_a_causal_lm_is_refused_clearly(token_classifier, tmp_path):
    with pytest.raises(PolicyError, match="LlamaForTokenClassification checkpoint, not a causal LM"):
        load_policy(PolicyConfig(policy=str(token_classifier), backend="transformers"))
    with pytest.raises(PolicyError, match="cannot read a model config|backbone folder .* does not exist"):  # backbones.py names a missing path
        load_policy(PolicyConfig(policy=str(tmp_path / "nowhere"), backend="transformers"))
    with pytest.raises(PolicyError, match="backend must be one of"):
        PolicyConfig(backend="tgi")


def test_openai_backend_sends_sampling_and_continues_prefixes(openai_double):
    d = openai_double(answer=lambda body: "The answer is 5.", models=["pol"])
    p = load_policy(PolicyConfig(policy="pol", backend="openai", base_url=d.base_url))
    try:
        fresh, cont = p.generate([_req(11, tokens=32), _req(12, prefix=["First, 2 + 3 = 5."], tokens=16)])
    finally:
        p.close()
    assert fresh.text == cont.text == "The answer is 5." and p.version == "/weights/pol"
    by_seed = {b["seed"]: b for b in d.bodies}
    assert by_seed[11]["max_tokens"] == 32 and by_seed[11]["temperature"] == 0.8 and by_seed[11]["model"] == "pol"
    assert "continue_final_message" not in by_seed[11]
    assert by_seed[12]["continue_final_message"] is True and by_seed[12]["add_generation_prompt"] is False
    assert by_seed[12]["messages"][-1] == {"role": "assistant", "content": "First, 2 + 3 = 5.\n\n"}


def test_openai_backend_round_robins_and_skips_servers_failing_the_health_check(openai_double):
    a, b = openai_double(models=["pol"]), openai_double(models=["pol"])
    dead = f"http://127.0.0.1:{free_port()}/v1"
    p = load_policy(PolicyConfig(policy="pol", backend="openai", base_url=f"{a.base_url},{dead},{b.base_url}", concurrency=2))
    try:
        p.generate([_req(s) for s in range(8)])
    finally:
        p.close()
    assert len(a.bodies) == len(b.bodies) == 4  # the dead one never got a request
    # the start-up health check is retried like any request (a server may still be starting)
    with pytest.raises(PolicyUnavailable, match="no endpoint answered GET /models at .*: failed after 2 attempts: connection error"):
        load_policy(PolicyConfig(policy="pol", backend="openai", base_url=dead, max_retries=1, backoff_s=0.01))
    with pytest.raises(PolicyError, match="does not serve model 'other'"):
        load_policy(PolicyConfig(policy="other", backend="openai", base_url=a.base_url))


def test_a_server_dying_mid_run_fails_over_then_gives_up_clearly(openai_double):
    a, b = openai_double(script=["500"] * 2), openai_double()
    p = load_policy(PolicyConfig(policy="pol", backend="openai", base_url=f"{a.base_url},{b.base_url}", concurrency=1, max_retries=2))
    try:
        assert [g.text for g in p.generate([_req(1), _req(2)])] == ["The step follows from the previous ones.\nScore: 1"] * 2
        b.close()
        a.script = ["500"] * 10
        with pytest.raises(PolicyUnavailable, match="failed after 3 attempts"):
            p.generate([_req(3)])
    finally:
        p.close()


def test_endpoint_pool_cycles_and_retries_the_longest_down_when_all_are():
    pool = EndpointPool(["u1", "u2", "u3"], cooldown_s=60)
    assert [pool.pick() for _ in range(4)] == ["u1", "u2", "u3", "u1"]
    pool.mark_down("u2")
    assert [pool.pick() for _ in range(3)] == ["u3", "u1", "u3"]
    pool.mark_down("u1")
    pool.mark_down("u3")
    assert pool.pick() == "u2"  # all down: the one down longest
    pool.mark_up("u3")
    assert pool.pick() == "u3"


def test_vllm_on_cpu_runs_its_engine_in_process_unless_told_otherwise(monkeypatch):
    # a separate engine-core process busy-polls a core: half of a 2-core machine
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    use_inprocess_vllm_on_cpu({"tensor_parallel_size": 2})
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in os.environ  # parallel engines need their processes
    use_inprocess_vllm_on_cpu({"enforce_eager": True})
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    use_inprocess_vllm_on_cpu({})
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"  # the user's choice stands
