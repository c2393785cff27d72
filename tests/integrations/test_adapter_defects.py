"""The smaller defects of issue 26, each on a real server on 127.0.0.1: a server that never answers,
pickling the TRL reward, the same extra_logs on OpenRLHF's two paths, verl's fallback metric."""

from __future__ import annotations

import http.server
import pickle
import threading
import time

import httpx
import pytest

from prm_distill.integrations.openrlhf import make_reward_func
from prm_distill.integrations.trl import PRMReward
from prm_distill.serve.client import ClientConfig, PRMServerError

QUESTION = "Tom has 4 apples and buys 3 more. How many apples does he have?"
PROMPT = f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
GOOD = "Tom starts with 4 apples.\n\nHe buys 3 more, so 4 + 3 = 7.\n\nThe answer is 7."


@pytest.fixture
def silent_scorer(prm_server):
    """127.0.0.1: GET /v1/model is the real server's answer; POST /v1/score is accepted and never answered."""
    model_info = httpx.get(f"{prm_server.url}/v1/model").content
    release = threading.Event()
    posts: list[float] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(model_info)))
            self.end_headers()
            self.wfile.write(model_info)

        def do_POST(self):  # noqa: N802
            posts.append(time.monotonic())
            self.rfile.read(int(self.headers["content-length"]))
            release.wait(30)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", posts
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def test_a_server_that_never_answers_raises_prm_server_error_naming_url_and_timeout(silent_scorer):
    url, posts = silent_scorer
    reward = PRMReward(url=url, client_config=ClientConfig(timeout_s=0.3, max_retries=2, backoff_s=0.0, coalesce=False))
    try:
        with pytest.raises(PRMServerError) as caught:
            reward(prompts=[QUESTION], completions=[GOOD])
    finally:
        reward.close()
    message = str(caught.value)
    assert url in message and "0.3 s" in message and "after 3 attempts" in message
    assert len(posts) == 3  # scoring is idempotent: retried per the one retry policy (max_retries=2)


def test_prm_reward_pickles_and_the_copy_scores_the_same(prm_server, tiny_checkpoint, step_scores):
    expected = [min(step_scores(QUESTION, GOOD))]
    for reward in (PRMReward(url=prm_server.url), PRMReward(model=str(tiny_checkpoint), device="cpu")):
        reward([QUESTION], [GOOD])
        copy = pickle.loads(pickle.dumps(reward))
        assert copy([QUESTION], [GOOD]) == pytest.approx(expected, abs=1e-6)
        assert copy.fallbacks.summary()["prm/scored"] == 2.0  # counted before pickling, then once more
        assert copy.backend is not reward.backend and copy.__name__ == "prm"
        reward.close()
        copy.close()


def test_both_openrlhf_paths_log_the_same_extra_logs(prm_server):
    queries, prompts = [PROMPT + GOOD, "unrelated"], [PROMPT, PROMPT]
    route = httpx.post(f"{prm_server.url}/get_reward", json={"query": queries, "prompts": prompts}, timeout=60).json()
    reward_func = make_reward_func(url=prm_server.url)
    try:
        local = reward_func(queries, prompts)
    finally:
        reward_func.backend.close()
    assert set(local["extra_logs"]) == set(route["extra_logs"]) == {"prm_fallback", "prm_num_steps"}
    assert {k: v.tolist() for k, v in local["extra_logs"].items()} == route["extra_logs"] == {
        "prm_fallback": [0.0, 1.0], "prm_num_steps": [3.0, 0.0]}
