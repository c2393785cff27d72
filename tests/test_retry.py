"""The one HTTP retry policy (judge client and PRM client): backoff, Retry-After, caps, statuses."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from prm_distill.labeling.config import JudgeConfig
from prm_distill.retry import JUDGE_RETRY_STATUSES, SCORE_RETRY_STATUSES, Retryable, RetryPolicy, retry_after_s
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
    judge = JudgeConfig(max_retries=2, backoff_s=0.25).policy_config().retry_policy()  # what OpenAIJudge's policy retries with
    assert judge.max_retries == 2 and judge.delay(1) == 0.5  # no jitter for the judge
    assert all(judge.retries_status(s) for s in (429, 500, 503, 504)) and not judge.retries_status(404)
    client = ClientConfig(max_retries=4, backoff_s=0.01, max_backoff_s=0.5).retry_policy()
    assert client.max_retries == 4 and client.retry_statuses == SCORE_RETRY_STATUSES
    assert client.retries_status(503) and not client.retries_status(500)  # a failed forward pass is not retried
    assert 429 in JUDGE_RETRY_STATUSES


def test_call_retries_only_retryable_failures_and_reraises_the_last_one():
    policy = RetryPolicy(max_retries=2, backoff_s=0.0, jitter=False)
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise Retryable(f"try {len(calls)}")
        return "ok"

    assert policy.call(flaky) == "ok" and len(calls) == 3  # two retries, then the answer
    calls.clear()

    def always():
        calls.append(1)
        raise Retryable(f"try {len(calls)}")

    with pytest.raises(Retryable, match="try 3"):  # 1 + max_retries attempts, the last reason kept
        policy.call(always)
    assert len(calls) == 3
    calls.clear()

    def final():
        calls.append(1)
        raise KeyError("not retried")

    with pytest.raises(KeyError):
        policy.call(final)
    assert len(calls) == 1


def test_call_waits_retry_after_and_a_cancel_cuts_the_backoff_short():
    slow = RetryPolicy(max_retries=1, backoff_s=30.0, jitter=False)
    seen = []

    def once_then_ok():
        seen.append(time.monotonic())
        if len(seen) == 1:
            raise Retryable("busy", {"retry-after": "0.2"})  # the header wins over the 30 s backoff
        return "ok"

    assert slow.call(once_then_ok) == "ok" and 0.2 <= seen[1] - seen[0] < 5
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    start, tries = time.monotonic(), []

    def refuse():
        tries.append(1)
        if cancel.is_set():
            raise RuntimeError("cancelled")
        raise Retryable("down")

    with pytest.raises(RuntimeError, match="cancelled"):
        slow.call(refuse, cancel)
    assert len(tries) == 2 and time.monotonic() - start < 5  # woke at the cancel, not after 30 s


def test_acall_is_the_same_policy_for_coroutines():
    policy = RetryPolicy(max_retries=3, backoff_s=0.0, jitter=False)
    calls = []

    async def flaky():
        calls.append(1)
        if len(calls) < 4:
            raise Retryable("503", {"retry-after": "0"})
        return len(calls)

    assert asyncio.run(policy.acall(flaky)) == 4
    calls.clear()
    with pytest.raises(Retryable):
        asyncio.run(RetryPolicy(max_retries=1, backoff_s=0.0).acall(flaky))
    assert len(calls) == 2
