"""`PRMReward` as TRL's GRPOTrainer calls it, against the real TRL (installed in the dev extra)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from prm_distill.aggregate import aggregate
from prm_distill.integrations.trl import AsyncPRMReward, PRMReward
from prm_distill.serve.client import ClientConfig, PRMServerError

QUESTION = "Tom has 4 apples and buys 3 more. How many apples does he have?"
GOOD = "Tom starts with 4 apples.\n\nHe buys 3 more, so 4 + 3 = 7.\n\nThe answer is 7."
BAD = "Tom starts with 4 apples.\n\nHe buys 3 more, so 4 + 3 = 8.\n\nThe answer is 8."


@pytest.fixture(scope="module")
def reward(tiny_checkpoint):
    return PRMReward(model=str(tiny_checkpoint), device="cpu")


def test_one_float_per_string_completion_equal_to_the_min_of_its_calibrated_step_scores(reward, step_scores):
    out = reward(prompts=[QUESTION, QUESTION], completions=[GOOD, BAD], answer=["7", "7"])
    assert out == [pytest.approx(min(step_scores(QUESTION, GOOD))), pytest.approx(min(step_scores(QUESTION, BAD)))]
    assert all(isinstance(x, float) for x in out)


def test_conversational_prompts_and_completions_as_grpo_trainer_passes_them(reward, step_scores):
    prompts = [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}]]
    completions = [[{"role": "assistant", "content": GOOD}]]
    assert reward(prompts=prompts, completions=completions) == [pytest.approx(min(step_scores(QUESTION, GOOD)))]


def test_other_aggregations_and_a_question_column(tiny_checkpoint, step_scores):
    mean = PRMReward(model=str(tiny_checkpoint), agg="mean", question_column="question", device="cpu", backend=None)
    out = mean(prompts=["<|im_start|>user\nignored<|im_end|>\n"], completions=[GOOD], question=[QUESTION])
    assert out == [pytest.approx(aggregate(step_scores(QUESTION, GOOD), "mean"))]


def test_an_unscorable_completion_gets_none_and_is_counted(reward, step_scores):
    out = reward(prompts=[QUESTION, QUESTION, QUESTION], completions=["", GOOD, "   <|im_end|>"])
    assert out[0] is None and out[2] is None
    assert out[1] == pytest.approx(min(step_scores(QUESTION, GOOD)))
    summary = reward.fallbacks.summary()
    assert summary["prm/fallback/empty_response"] >= 2


def test_process_weighted_combination_with_a_correctness_reward(reward, step_scores):
    def correct(prompts, completions, answer, **_):
        return [1.0 if c.strip().endswith(a + ".") else -1.0 for c, a in zip(completions, answer)]

    combined = PRMReward(backend=reward.backend, outcome=correct)
    out = combined(prompts=[QUESTION, QUESTION], completions=[GOOD, BAD], answer=["7", "7"])
    # correct: 1.0 * min step score; wrong: the negative outcome unchanged.
    assert out == [pytest.approx(min(step_scores(QUESTION, GOOD))), -1.0]


def test_the_async_reward_gives_the_same_numbers(reward):
    async_reward = AsyncPRMReward(backend=reward.backend)
    sync = reward(prompts=[QUESTION, QUESTION], completions=[GOOD, BAD])
    assert asyncio.run(async_reward(prompts=[QUESTION, QUESTION], completions=[GOOD, BAD])) == sync


def test_over_http_the_scores_are_the_in_process_ones(prm_server, reward):
    remote = PRMReward(url=prm_server.url)
    try:
        assert remote(prompts=[QUESTION, QUESTION], completions=[GOOD, BAD]) == pytest.approx(
            reward(prompts=[QUESTION, QUESTION], completions=[GOOD, BAD]))
    finally:
        remote.close()


def test_a_server_that_is_down_raises_naming_its_url_after_bounded_retries():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(PRMServerError, match=rf"127\.0\.0\.1:{port}"):
        PRMReward(url=url, client_config=ClientConfig(max_retries=2, backoff_s=0.01))


def test_bad_arguments_are_refused_by_name(reward):
    with pytest.raises(ValueError, match="agg must be one of"):
        PRMReward(backend=reward.backend, agg="median")
    with pytest.raises(ValueError, match="exactly one of model"):
        PRMReward()
    with pytest.raises(ValueError, match="2 prompts for 1 completions"):
        reward(prompts=[QUESTION, QUESTION], completions=[GOOD])


def test_a_completion_the_server_refuses_costs_only_itself(prm_server, reward):
    remote = PRMReward(url=prm_server.url)
    huge = "Step 1: " + "x" * 17000  # one unbreakable step longer than the server's max_step_chars (16000)
    try:
        out = remote(prompts=[QUESTION, QUESTION], completions=[huge, GOOD])
    finally:
        remote.close()
    assert out[0] is None
    assert out[1] == pytest.approx(reward(prompts=[QUESTION], completions=[GOOD])[0])
    assert remote.fallbacks.summary()["prm/fallback/refused"] == 1.0
