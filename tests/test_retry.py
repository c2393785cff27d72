"""The one HTTP retry policy (judge client and PRM client): backoff, Retry-After, caps, statuses."""

from __future__ import annotations

import pytest

from prm_distill.labeling.config import JudgeConfig
from prm_distill.labeling.judges.openai import OpenAIJudge
from prm_distill.retry import JUDGE_RETRY_STATUSES, SCORE_RETRY_STATUSES, RetryPolicy, retry_after_s
from prm_distill.serve.client import ClientConfig


def test_backoff_doubles_a_retry_after_header_wins_and_every_delay_is_capped():
    policy = RetryPolicy(max_retries=5, backoff_s=0.5, max_backoff_s=3.0, jitter=False)
    assert [policy.delay(a) for a in range(4)] == [0.5, 1.0, 2.0, 3.0]
    assert policy.delay(0, {"retry-after": "2"}) == 2.0 and policy.delay(3, {"retry-after": "0"}) == 0.0
    assert policy.delay(0, {"retry-after": "120"}) == 3.0
    jittered = RetryPolicy(backoff_s=1.0, max_backoff_s=60.0)
    assert all(2.0 <= jittered.delay(2) <= 4.0 for _ in range(50))  # 4 s times a factor in [0.5, 1]
    assert retry_after_s({"retry-after": "soon"}) is None and retry_after_s(None) is None
    with pytest.raises(ValueError):
        RetryPolicy(max_retries=-1)


def test_the_judge_and_the_prm_client_share_the_policy_with_their_own_statuses():
    judge = OpenAIJudge(JudgeConfig(max_retries=2, backoff_s=0.25))
    assert judge.retry.max_retries == 2 and judge.retry.delay(1) == 0.5  # no jitter for the judge
    assert all(judge.retry.retries_status(s) for s in (429, 500, 503, 504)) and not judge.retry.retries_status(404)
    client = ClientConfig(max_retries=4, backoff_s=0.01, max_backoff_s=0.5).retry_policy()
    assert client.max_retries == 4 and client.retry_statuses == SCORE_RETRY_STATUSES
    assert client.retries_status(503) and not client.retries_status(500)  # a failed forward pass is not retried
    assert 429 in JUDGE_RETRY_STATUSES
