"""What every trainer adapter shares: one PRM backend (in-process or HTTP), text extraction, fallbacks counted.

Each adapter turns its trainer's batch into (question, response text) pairs, splits the response
with the package's one splitter, scores the steps through `PRMBackend` (calibrated, as every other
consumer sees them) and aggregates them with `aggregate.py`. A response that cannot be split or
scored is a *fallback*, never an exception that kills the step: the adapter applies its
trainer's documented fallback and `FallbackCounter` counts it by reason, for the trainer's logs.
A scoring server that cannot be reached is different: that raises `PRMServerError` naming the URL,
after the client's bounded retries, because every later step would fail the same way.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Coroutine, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from prm_distill import calibration
from prm_distill.aggregate import AGGREGATIONS, aggregate
from prm_distill.serve.prompts import last_user_text, message_text, prompt_question, strip_end_markers
from prm_distill.steps import SplitConfig, StepSplitError, split_step_spans, splitter_config

T = TypeVar("T")

class UnscorableError(ValueError):
    """One response cannot be scored (no text, no steps, refused by the server); `reason` names why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class ScoredSteps:
    """One response's steps, their character spans in the response text and their calibrated P(good)."""

    steps: list[str]
    spans: list[tuple[int, int]]
    scores: list[float]


class FallbackCounter:
    """Responses scored and fallbacks taken, by reason; thread-safe (trainers call from worker threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.scored = 0
        self.fallbacks: Counter[str] = Counter()

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            return {"scored": self.scored, "fallbacks": Counter(self.fallbacks)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._lock = threading.Lock()
        self.scored, self.fallbacks = state["scored"], state["fallbacks"]

    def count(self, scored: int = 0, reasons: Sequence[str] = ()) -> None:
        with self._lock:
            self.scored += scored
            self.fallbacks.update(reasons)

    def summary(self, prefix: str = "prm") -> dict[str, float]:
        """`{prefix}/scored`, `{prefix}/fallback` and `{prefix}/fallback/<reason>` counts so far."""
        with self._lock:
            out = {f"{prefix}/scored": float(self.scored), f"{prefix}/fallback": float(sum(self.fallbacks.values()))}
            out.update({f"{prefix}/fallback/{reason}": float(n) for reason, n in sorted(self.fallbacks.items())})
        return out


def check_agg(agg: str) -> str:
    if agg not in AGGREGATIONS:
        raise ValueError(f"agg must be one of {'|'.join(AGGREGATIONS)}, got {agg!r}")
    return agg


def question_of(prompt: Any) -> str:
    """The question inside a prompt: the last user message of a message list, or of a rendered chat
    template (ChatML, Llama 3, Gemma markers); a plain prompt string as it is."""
    if isinstance(prompt, str):
        return prompt_question(prompt)
    if isinstance(prompt, Sequence):
        text = last_user_text(prompt)
        if text is None:
            raise UnscorableError("no_question", "the prompt has no user message to use as the question")
        return text.strip()
    raise TypeError(f"a prompt must be a string or a list of chat messages, got {type(prompt).__name__}")


def response_of(completion: Any) -> str:
    """A completion's text: the string, or the assistant messages of a message list joined."""
    if isinstance(completion, str):
        text = completion
    elif isinstance(completion, Sequence):
        text = "\n\n".join(
            message_text(m) for m in completion if not isinstance(m, Mapping) or m.get("role", "assistant") == "assistant"
        )
    else:
        raise TypeError(f"a completion must be a string or a list of chat messages, got {type(completion).__name__}")
    return strip_end_markers(text)


class PRMBackend:
    """The distilled PRM behind one interface: `model=` a checkpoint folder (in-process engine) or
    `url=` a `prm-distill serve` server. `score_steps` / `ascore_steps` give calibrated P(good) per
    step; `score_responses` / `ascore_responses` split raw responses first and isolate failures.

    The HTTP client runs on a private event loop in a daemon thread, so synchronous trainers
    (verl, OpenRLHF, TRL's sync reward functions) and asynchronous ones share one connection pool.
    """

    def __init__(
        self,
        model: str | None = None,
        url: str | None = None,
        *,
        api_key: str | None = None,
        device: str = "auto",
        dtype: str | None = None,
        max_batch_tokens: int = 16384,
        calibrate: bool = True,
        splitter: Mapping[str, Any] | SplitConfig | None = None,
        split: Mapping[str, Any] | SplitConfig | None = None,
        client_config: Any = None,
        engine: Any = None,
    ) -> None:
        given = sum(x is not None for x in (model, url, engine))
        if given != 1:
            raise ValueError("give exactly one of model (a checkpoint folder), url (a prm-distill serve server) or engine")
        self.splitter = splitter_config(splitter, split)
        self.calibrate = calibrate
        self.url = url
        # What a pickled copy rebuilds itself from (the engine and the HTTP client are not picklable).
        self._spec = dict(model=model, url=url, api_key=api_key, device=device, dtype=dtype, max_batch_tokens=max_batch_tokens,
                          client_config=client_config)
        self._given_engine = engine
        self._open()

    def _open(self) -> None:
        spec = self._spec
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Any = None
        self._client_config: Any = None
        self._engine: Any = self._given_engine
        if spec["model"] is not None:
            from prm_distill.serve.engine import PRMEngine

            self._engine = PRMEngine.from_checkpoint(spec["model"], device=spec["device"], dtype=spec["dtype"],
                                                     max_batch_tokens=spec["max_batch_tokens"])
        elif spec["url"] is not None:
            from prm_distill.serve.client import ClientConfig, PRMClient

            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="prm-distill-client", daemon=True).start()
            self._client_config = spec["client_config"] or ClientConfig()
            self._client = self._run(PRMClient.connect(spec["url"], api_key=spec["api_key"], config=self._client_config)).result()

    def __getstate__(self) -> dict[str, Any]:
        """Options only: an unpickled copy (TRL's AsyncGRPOTrainer, a Ray worker) loads its own engine or
        opens its own client. A backend built around a given `engine=` pickles that engine."""
        return {"splitter": self.splitter, "calibrate": self.calibrate, "url": self.url, "_spec": self._spec,
                "_given_engine": self._given_engine}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._open()

    async def _score_remote(self, items: list[tuple[str, Sequence[str]]]) -> list[list[float]]:
        """One scoring request, retried per the client's one retry policy when the server accepted the
        connection but did not answer in time (scoring is idempotent); then PRMServerError naming URL and timeout."""
        import httpx

        from prm_distill.retry import Retryable
        from prm_distill.serve.client import PRMServerError

        config = self._client_config
        policy = config.retry_policy()

        async def attempt() -> list[list[float]]:
            try:
                scores: list[list[float]] = await self._client.score_batch(items)
            except httpx.TimeoutException as e:
                raise Retryable(f"{type(e).__name__}") from e
            return scores

        try:
            return await policy.acall(attempt)
        except Retryable as e:
            raise PRMServerError(
                f"{self.url}: no answer within {config.timeout_s:g} s (ClientConfig.timeout_s; {type(e.__cause__).__name__}) "
                f"after {policy.attempts} attempts") from e.__cause__

    def _run(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _calibration(self) -> dict[str, Any] | None:
        if not self.calibrate:
            return None
        source = self._engine if self._engine is not None else self._client
        return source.calibration() if source is not None else None

    def _calibrated(self, raw: list[list[float]]) -> list[list[float]]:
        cal = self._calibration()
        return [calibration.apply(s, cal).tolist() if cal is not None else list(map(float, s)) for s in raw]

    def score_steps(self, items: Sequence[tuple[str, Sequence[str]]]) -> list[list[float]]:
        """Calibrated P(good) per step of each (question, steps); errors propagate."""
        if not items:
            return []
        if self._engine is not None:
            with self._lock:  # one forward pass at a time on a shared engine
                raw = self._engine.score(list(items))
        else:
            raw = self._run(self._score_remote(list(items))).result()
        return self._calibrated(raw)

    async def ascore_steps(self, items: Sequence[tuple[str, Sequence[str]]]) -> list[list[float]]:
        """`score_steps` for async callers: the event loop keeps running while the PRM works."""
        if not items:
            return []
        if self._engine is not None:
            return await asyncio.to_thread(self.score_steps, items)
        raw = await asyncio.wrap_future(self._run(self._score_remote(list(items))))
        return self._calibrated(raw)

    def _prepare(self, question: str, response: str) -> tuple[list[str], list[tuple[int, int]]]:
        if not response.strip():
            raise UnscorableError("empty_response", "the response has no text to score")
        if not question.strip():
            raise UnscorableError("no_question", "the prompt has no question text")
        try:
            spans = split_step_spans(response, self.splitter)
        except StepSplitError as e:
            raise UnscorableError("unsplittable", f"the response cannot be split into steps: {e}") from None
        return [response[s:e] for s, e in spans], spans

    def score_responses(self, pairs: Sequence[tuple[str, str]]) -> list[ScoredSteps | UnscorableError]:
        """Each (question, response) split and scored; an unscorable one is returned as its error.

        One batched call scores every splittable response. When the server refuses it (a 4xx: some
        response's content), the responses are scored one at a time, so a bad one costs only itself;
        an unreachable server, a 5xx or an engine failure raises."""
        out: list[ScoredSteps | UnscorableError | None] = [None] * len(pairs)
        ready: list[tuple[int, str, list[str], list[tuple[int, int]]]] = []
        for i, (question, response) in enumerate(pairs):
            try:
                steps, spans = self._prepare(question, response)
            except UnscorableError as e:
                out[i] = e
                continue
            ready.append((i, question, steps, spans))
        items = [(question, steps) for _, question, steps, _ in ready]
        try:
            scores: list[list[float] | UnscorableError] = list(self.score_steps(items))
        except Exception as error:
            if not _refused(error):
                raise
            scores = [self._score_one(item) for item in items]
        for (i, _, steps, spans), result in zip(ready, scores, strict=True):
            out[i] = result if isinstance(result, UnscorableError) else ScoredSteps(steps, spans, result)
        return out  # type: ignore[return-value]

    def _score_one(self, item: tuple[str, list[str]]) -> list[float] | UnscorableError:
        try:
            return self.score_steps([item])[0]
        except Exception as error:
            if not _refused(error):
                raise
            return UnscorableError("refused", str(error))

    async def ascore_responses(self, pairs: Sequence[tuple[str, str]]) -> list[ScoredSteps | UnscorableError]:
        """`score_responses` for async callers."""
        return await asyncio.to_thread(self.score_responses, pairs)

    def close(self) -> None:
        """Release the HTTP client and its loop thread (the in-process engine is freed with the object)."""
        if self._client is not None and self._loop is not None:
            self._run(self._client.aclose()).result()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._client = None


def _refused(error: Exception) -> bool:
    """A 4xx answer: this request's content was refused; the server itself is fine."""
    status = getattr(error, "status", None)
    if status is not None:
        return 400 <= status < 500
    from prm_distill.encoding import EncodingError

    return isinstance(error, EncodingError)


def aggregated(result: ScoredSteps | UnscorableError, agg: str, gamma: float = 0.9) -> float | None:
    """One score per response (`aggregate.py`), None for an unscorable one."""
    if isinstance(result, UnscorableError):
        return None
    return aggregate(result.scores, agg, gamma=gamma)
