"""The /v1/score request body as pydantic models (and OpenRLHF's /get_reward body), and the errors the server answers with.

Models forbid unknown fields and check every length against the server's limits (`ServerConfig`,
passed as validation context), so a bad request is refused before it reaches the batcher. Every
refusal is a `RequestError` whose message names the field (`items[1].steps[0]: ...`); the app's one
error handler turns it into `{"error": message, "kind": kind}` with its status code.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ..records import RecordError, steps_of
from ..steps import SplitConfig
from .config import ServerConfig
from .prompts import prompt_question, strip_end_markers

ITEM_KEYS = ("question", "response", "split", "steps")
SPLIT_KEYS = tuple(f.name for f in dataclasses.fields(SplitConfig))


class RequestError(Exception):
    """A request the server answers with `status` and `{"error": message, "kind": kind}`."""

    def __init__(self, status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.headers = status, kind, message, headers or {}


def invalid(message: str) -> RequestError:
    return RequestError(422, "invalid_request", message)


@dataclasses.dataclass(frozen=True)
class ScoreItem:
    question: str
    steps: list[str]


def _refuse(message: str, at: str = "") -> PydanticCustomError:
    """A validation error; `at` is appended to the field's location (`[3]`, ` (step 3 after splitting)`)."""
    return PydanticCustomError("invalid_request", "{message}", {"message": message, "at": at})


def _cfg(info: ValidationInfo) -> ServerConfig:
    return info.context["cfg"]  # type: ignore[index]


def _text(value: str, limit: int, limit_name: str, at: str = "") -> str:
    if not value.strip():
        raise _refuse("must not be empty", at)
    if len(value) > limit:
        raise _refuse(f"{len(value)} characters, more than {limit_name}={limit}", at)
    return value


def _steps(steps: list[str], cfg: ServerConfig, split: bool = False) -> list[str]:
    after = " after splitting" if split else ""
    if not steps:
        raise _refuse("needs at least one step")
    if len(steps) > cfg.max_steps:
        raise _refuse(f"{len(steps)} steps{after}, more than max_steps={cfg.max_steps}")
    for k, step in enumerate(steps):
        _text(step, cfg.max_step_chars, "max_step_chars", f" (step {k}{after})" if split else f"[{k}]")
    return steps


class ItemBody(BaseModel):
    """One trajectory: `question` and exactly one of `steps` or `response` (split by the server)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    question: StrictStr
    steps: list[StrictStr] | None = None
    response: StrictStr | None = None
    split: dict[str, StrictInt] | None = None

    @field_validator("question")
    @classmethod
    def _question(cls, value: str, info: ValidationInfo) -> str:
        cfg = _cfg(info)
        return _text(value, cfg.max_question_chars, "max_question_chars")

    @field_validator("steps")
    @classmethod
    def _given_steps(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        return None if value is None else _steps(value, _cfg(info))

    @field_validator("response")
    @classmethod
    def _response(cls, value: str | None, info: ValidationInfo) -> str | None:
        cfg = _cfg(info)
        return None if value is None else _text(value, cfg.max_response_chars, "max_response_chars")

    @field_validator("split")
    @classmethod
    def _split(cls, value: dict[str, int] | None) -> dict[str, int] | None:
        for key in value or {}:
            if key not in SPLIT_KEYS:
                raise _refuse(f"unknown option (known: {', '.join(sorted(SPLIT_KEYS))})", f".{key}")
        return value

    @model_validator(mode="after")
    def _one_source(self, info: ValidationInfo) -> ItemBody:
        if (self.steps is None) == (self.response is None):
            raise _refuse("give exactly one of steps (list of strings) or response (string)")
        if self.steps is not None and self.split is not None:
            raise _refuse("only applies to a response", ".split")
        if self.response is not None:
            try:
                split = SplitConfig(**(self.split or {}))
            except ValueError as e:
                raise _refuse(str(e), ".split") from None
            try:
                steps = steps_of({"response": self.response}, split)
            except RecordError as e:
                raise _refuse(e.message, ".response") from None
            try:
                self.steps = _steps(steps, _cfg(info), split=True)
            except PydanticCustomError as e:
                raise _refuse(str(e), ".response" + (e.context or {}).get("at", "")) from None
        return self

    def item(self) -> ScoreItem:
        assert self.steps is not None
        return ScoreItem(self.question, self.steps)


class ScoreBody(BaseModel):
    """`{"items": [...]}`: at most `max_items` trajectories."""

    model_config = ConfigDict(extra="forbid", strict=True)

    items: list[ItemBody]

    @field_validator("items", mode="before")
    @classmethod
    def _count(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, list) or not value:
            raise _refuse("expected a non-empty list of objects")
        cfg = _cfg(info)
        if len(value) > cfg.max_items:
            raise _refuse(f"{len(value)} items, more than max_items={cfg.max_items}")
        return value


def _where(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _message(error: Any) -> str:
    """One pydantic error in the server's words: `<field>: <what is wrong>`."""
    loc, kind, value = tuple(error["loc"]), error["type"], error.get("input")
    where = _where(loc)
    got = type(value).__name__
    if kind == "invalid_request":
        return f"{where}{error['ctx'].get('at', '')}: {error['ctx']['message']}"
    if loc == () or (kind == "missing" and loc == ("items",)):
        return 'body: expected a JSON object {"items": [...]}'
    if kind == "extra_forbidden":
        known = "items" if len(loc) == 1 else ", ".join(ITEM_KEYS)
        return f"{where}: unknown field (known: {known})"
    if kind == "model_type":
        return f"{where}: expected an object with question and steps (or response)"
    if kind == "string_type":
        return f"{where}: expected a string, got {got}"
    if kind == "list_type":
        return f"{where}: expected a list of strings, got {got}"
    if kind == "dict_type":
        return f"{where}: expected an object of SplitConfig fields, got {got}"
    if kind == "int_type":
        return f"{where}: expected an integer, got {value!r}"
    if kind == "missing":
        return f"{where}: missing (a string is required)"
    return f"{where}: {error['msg']}"


def parse_score_request(body: bytes, cfg: ServerConfig) -> list[ScoreItem]:
    """The items of a /v1/score body, or a RequestError naming the first bad field."""
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RequestError(422, "malformed_json", f"body: not valid JSON ({e})") from None
    try:
        parsed = ScoreBody.model_validate(payload, context={"cfg": cfg})
    except ValidationError as e:
        raise invalid(_message(min(e.errors(), key=_precedence))) from None
    return [item.item() for item in parsed.items]


def _precedence(error: Any) -> tuple[int, int]:
    """The error named first: the body's own, then by item; within one object an unknown field first."""
    loc = error["loc"]
    item = loc[1] if len(loc) > 1 and loc[0] == "items" and isinstance(loc[1], int) else -1
    return item, 0 if error["type"] == "extra_forbidden" else 1


# -- POST /get_reward: OpenRLHF's remote reward contract ---------------------------------------

@dataclasses.dataclass(frozen=True)
class RewardItem:
    """One query of a /get_reward body: its (question, steps), or the reason it gets the fallback zero."""

    question: str = ""
    steps: tuple[str, ...] = ()
    fallback: str | None = None


def _string_list(payload: dict[str, Any], key: str, n: int | None, cfg: ServerConfig) -> list[str]:
    value = payload.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid(f"{key}: expected a list of strings, got {type(value).__name__}")
    if n is None:
        if not value:
            raise invalid(f"{key}: expected a non-empty list of strings")
        if len(value) > cfg.max_items:
            raise invalid(f"{key}: {len(value)} queries, more than max_items={cfg.max_items}")
    elif len(value) != n:
        raise invalid(f"{key}: {len(value)} entries for {n} queries (one per query is required)")
    return value


def reward_item(query: str, prompt: str, cfg: ServerConfig, split: SplitConfig | None = None) -> RewardItem:
    """Question and steps of one query (= prompt + response), or the fallback reason."""
    if not query.startswith(prompt):
        return RewardItem(fallback="prompt_mismatch")
    response = strip_end_markers(query[len(prompt) :])
    question = prompt_question(prompt)
    if not question:
        return RewardItem(fallback="no_question")
    if not response.strip():
        return RewardItem(fallback="empty_response")
    if len(response) > cfg.max_response_chars or len(question) > cfg.max_question_chars:
        return RewardItem(fallback="too_long")
    try:
        steps = steps_of({"response": response}, split or SplitConfig())
    except RecordError:
        return RewardItem(fallback="unsplittable")
    if len(steps) > cfg.max_steps or any(len(step) > cfg.max_step_chars for step in steps):
        return RewardItem(fallback="too_long")
    return RewardItem(question, tuple(steps))


def parse_reward_request(body: bytes, cfg: ServerConfig) -> list[RewardItem]:
    """The items of a /get_reward body `{"query": [...], "prompts": [...], "labels": [...]}` (labels
    optional, unused: the PRM never sees the answer key), or a RequestError naming the bad field.
    A query that is well-formed but cannot be scored is kept, with its fallback reason."""
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RequestError(422, "malformed_json", f"body: not valid JSON ({e})") from None
    if not isinstance(payload, dict):
        raise invalid('body: expected a JSON object {"query": [...], "prompts": [...]}')
    unknown = sorted(set(payload) - {"query", "prompts", "labels"})
    if unknown:
        raise invalid(f"{unknown[0]}: unknown field (known: query, prompts, labels)")
    if "prompts" not in payload:
        raise invalid("prompts: missing (the prompt of every query, so the response can be told apart)")
    queries = _string_list(payload, "query", None, cfg)
    prompts = _string_list(payload, "prompts", len(queries), cfg)
    if payload.get("labels") is not None:
        labels = payload["labels"]
        if not isinstance(labels, list) or len(labels) != len(queries):
            raise invalid(f"labels: expected a list with one entry per query ({len(queries)})")
    return [reward_item(q, p, cfg) for q, p in zip(queries, prompts, strict=True)]
