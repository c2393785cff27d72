"""Read the records the select commands take, and group them by problem.

A record is a JSON object with `question` and `steps` (list of strings) or `response` (split with
the shared splitter), and optionally `id`, `answer` (gold), `outcome` and `labels`: what `prm-distill
rollout` writes, or any such file. A bad line is not fatal: it is skipped, counted and named by its
line, so one broken record does not cost a long scoring run.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

from ..answers import Answer, extract_answer, same_answer
from ..records import RecordError, Trajectory, read_inputs, steps_of
from ..steps import SplitConfig


@dataclass
class Sample:
    """One valid input record, its steps, and the text its final answer is read from."""

    line: int
    id: str
    question: str
    steps: list[str]
    record: dict[str, Any]
    labels: list[float | None] | None = None
    outcome: float | None = None
    gold: str | None = None

    @property
    def text(self) -> str:
        """The solution as written: `response` when given, else the steps one per line."""
        response = self.record.get("response")
        return response if isinstance(response, str) else "\n".join(self.steps)

    def answer(self) -> Answer | None:
        return extract_answer(self.text)

    def correct(self, predicted: Answer | None = None) -> bool | None:
        """Right answer? From `answer` (gold) when given, else from `outcome`; None when neither exists."""
        gold = extract_answer(self.gold)
        if gold is not None:
            pred = predicted if predicted is not None else self.answer()
            return pred is not None and same_answer(gold, pred)
        return None if self.outcome is None else self.outcome >= 0.5

    def labels_good(self) -> bool | None:
        """Every supervised step labelled good (>= 0.5)? None without step labels."""
        known = [lab for lab in self.labels or [] if lab is not None]
        return all(lab >= 0.5 for lab in known) if known else None


def parse_record(obj: Any, line: int, splitter: SplitConfig | None = None) -> Sample:
    """A Sample, or RecordError naming the field."""
    if not isinstance(obj, dict):
        raise RecordError(f"expected a JSON object, got {type(obj).__name__}")
    steps = steps_of(obj, splitter)
    gold = obj.get("answer")
    if gold is not None and (isinstance(gold, bool) or not isinstance(gold, (str, int, float))):
        raise RecordError(f"must be a string or a number, got {gold!r}", field="answer")
    t = Trajectory(id=obj["id"] if "id" in obj else f"line-{line}", question=obj.get("question") or "", steps=steps,
                   labels=obj.get("labels"), outcome=obj.get("outcome"))
    return Sample(line=line, id=t.id, question=t.question, steps=t.steps, record=obj, labels=t.labels,
                  outcome=t.outcome, gold=None if gold is None else str(gold))


def read_samples(path: str | os.PathLike, splitter: SplitConfig | None = None) -> tuple[list[Sample], list[dict[str, Any]]]:
    """(valid samples, invalid lines as {"line", "error"}); a duplicate id is invalid too (`records.read_inputs`' policy)."""
    invalid: list[dict[str, Any]] = []
    samples = read_inputs(path, lambda obj, line: parse_record(obj, line, splitter), key=lambda s: s.id, skipped=invalid)
    return samples, invalid


def question_key(question: str) -> str:
    """A short stable key of a problem (its question text), for done-sets and output rows."""
    return hashlib.sha256(question.encode("utf-8")).hexdigest()[:16]


def group_by_question(samples: list[Sample]) -> dict[str, list[Sample]]:
    """{question key: samples of that question in input order}, problems in order of first appearance."""
    groups: dict[str, list[Sample]] = {}
    for s in samples:
        groups.setdefault(question_key(s.question), []).append(s)
    return groups
