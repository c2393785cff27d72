"""OpenRLHF's two reward paths: `POST /get_reward` of `prm-distill serve`, and the Python `reward_func`.

The request bodies are the ones OpenRLHF's remote reward code posts (`{"query", "prompts", "labels"}`);
every expected number is the min of the engine's calibrated step scores for the same response."""

from __future__ import annotations

import json

import httpx
import pytest
import torch

from prm_distill.integrations.openrlhf import make_reward_func, split_query
from prm_distill.serve.config import ServerConfig

QUESTION = "Tom has 4 apples and buys 3 more. How many apples does he have?"
PROMPT = f"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
GOOD = "Tom starts with 4 apples.\n\nHe buys 3 more, so 4 + 3 = 7.\n\nThe answer is 7."
BAD = "Tom starts with 4 apples.\n\nHe buys 3 more, so 4 + 3 = 8.\n\nThe answer is 8."


def post(url: str, body) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{url}/get_reward", content=content, headers={"content-type": "application/json"}, timeout=60)


def test_get_reward_answers_one_aggregated_score_per_query_in_order(prm_server, step_scores):
    body = {"query": [PROMPT + GOOD + "<|im_end|>", PROMPT + BAD], "prompts": [PROMPT, PROMPT], "labels": ["7", "7"]}
    answer = post(prm_server.url, body)
    assert answer.status_code == 200, answer.text
    data = answer.json()
    expected = [min(step_scores(QUESTION, GOOD)), min(step_scores(QUESTION, BAD))]
    assert data["rewards"] == pytest.approx(expected) and data["scores"] == data["rewards"]
    assert data["extra_logs"] == {"prm_fallback": [0.0, 0.0], "prm_num_steps": [3.0, 3.0]}


def test_labels_are_optional_and_a_query_that_cannot_be_scored_gets_a_counted_zero(prm_server, step_scores):
    body = {"query": ["something else entirely", PROMPT + "   ", PROMPT + GOOD], "prompts": [PROMPT, PROMPT, PROMPT]}
    data = post(prm_server.url, body).json()
    assert data["rewards"][:2] == [0.0, 0.0]
    assert data["rewards"][2] == pytest.approx(min(step_scores(QUESTION, GOOD)))
    assert data["extra_logs"]["prm_fallback"] == [1.0, 1.0, 0.0]
    metrics = httpx.get(f"{prm_server.url}/metrics").text
    assert 'prm_errors_total{kind="reward_fallback_prompt_mismatch"}' in metrics
    assert 'prm_errors_total{kind="reward_fallback_empty_response"}' in metrics


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not valid JSON"),
        ([1, 2], "expected a JSON object"),
        ({"query": [PROMPT + GOOD]}, "prompts: missing"),
        ({"query": [PROMPT + GOOD], "prompts": [PROMPT, PROMPT]}, "prompts: 2 entries for 1 queries"),
        ({"query": [], "prompts": []}, "query: expected a non-empty list"),
        ({"query": [1], "prompts": [PROMPT]}, "query: expected a list of strings"),
        ({"query": [PROMPT + GOOD], "prompts": [PROMPT], "labels": ["7", "8"]}, "labels: expected a list with one entry per query"),
        ({"query": [PROMPT + GOOD], "prompts": [PROMPT], "reference": []}, "reference: unknown field"),
    ],
)
def test_malformed_bodies_get_a_4xx_naming_the_field(prm_server, body, message):
    answer = post(prm_server.url, body)
    assert 400 <= answer.status_code < 500
    assert message in answer.json()["error"]


def test_agg_is_a_serve_option(tiny_checkpoint):
    assert ServerConfig(model=str(tiny_checkpoint)).agg == "min"
    with pytest.raises(ValueError, match="agg=median"):
        ServerConfig(model=str(tiny_checkpoint), agg="median")
    from prm_distill.cli import build_parser

    args = build_parser().parse_args(["serve", "--model", str(tiny_checkpoint), "--agg", "mean"])
    assert args.agg == "mean"


def test_the_python_reward_func_returns_openrlhfs_dict_of_tensors(tiny_checkpoint, step_scores):
    reward_func = make_reward_func(model=str(tiny_checkpoint), device="cpu")
    out = reward_func([PROMPT + GOOD, "unrelated"], [PROMPT, PROMPT], ["7", "7"])
    assert set(out) == {"rewards", "scores", "extra_logs"}
    assert isinstance(out["rewards"], torch.Tensor) and out["rewards"].dtype == torch.float32
    assert out["rewards"].tolist() == pytest.approx([min(step_scores(QUESTION, GOOD)), 0.0], abs=1e-6)
    assert out["extra_logs"]["prm_fallback"].tolist() == [0.0, 1.0]
    assert reward_func.fallbacks.summary()["prm/fallback/prompt_mismatch"] == 1.0


def test_the_python_reward_func_over_http_matches_the_route(prm_server, step_scores):
    reward_func = make_reward_func(url=prm_server.url)
    try:
        out = reward_func([PROMPT + BAD], [PROMPT])
    finally:
        reward_func.backend.close()
    assert out["rewards"].tolist() == pytest.approx([min(step_scores(QUESTION, BAD))], abs=1e-6)


def test_split_query_takes_the_response_after_the_prompt_and_the_question_from_its_last_user_turn():
    assert split_query(PROMPT + GOOD + "<|im_end|>", PROMPT) == (QUESTION, GOOD)
    assert split_query("Q: 2+2?\nA: 4.", "Q: 2+2?\n") == ("Q: 2+2?", "A: 4.")


def test_openrlhfs_own_reward_client_reads_our_route_and_loads_our_reward_func(prm_server, tiny_checkpoint, step_scores, monkeypatch):
    """OpenRLHF's real single-turn executor (`openrlhf.utils.agent`), where it is installed."""
    agent = pytest.importorskip("openrlhf.utils.agent")
    import asyncio

    import prm_distill.integrations.openrlhf as module

    executor = agent.SingleTurnAgentExecutor(remote_rm_url=f"{prm_server.url}/get_reward")
    [info] = asyncio.run(executor._fetch_rewards_via_http([PROMPT + GOOD + "<|im_end|>"], [PROMPT], ["7"]))
    assert info["rewards"] == pytest.approx([min(step_scores(QUESTION, GOOD))])

    monkeypatch.setenv("PRM_DISTILL_MODEL", str(tiny_checkpoint))
    monkeypatch.setenv("PRM_DISTILL_DEVICE", "cpu")
    monkeypatch.setattr(module, "_default", None)
    executor = agent.SingleTurnAgentExecutor(remote_rm_url=module.__file__)  # OpenRLHF loads the file itself
    [info] = asyncio.run(executor._fetch_rewards_via_func([PROMPT + BAD], [PROMPT], ["7"]))
    assert info["rewards"].tolist() == pytest.approx([min(step_scores(QUESTION, BAD))], abs=1e-6)


def test_the_docs_curl_example_answers_what_the_docs_print(prm_server):
    """docs/integrations.md's `curl .../get_reward` example, posted as written; its printed answer checked."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "integrations.md").read_text()
    block = doc[doc.index("curl -s http://127.0.0.1:8000/get_reward"):]
    body = json.loads(re.search(r"-d '(.*?)'", block, re.S).group(1))
    printed = json.loads(re.search(r"^# (\{\"rewards\".*\})$", block, re.M).group(1))
    answer = post(prm_server.url, body).json()
    assert answer["extra_logs"] == printed["extra_logs"] == {"prm_fallback": [0.0], "prm_num_steps": [1.0]}
    assert len(answer["rewards"]) == 1 and 0.0 <= answer["rewards"][0] <= 1.0  # the number is the checkpoint's
    assert answer["scores"] == answer["rewards"]
