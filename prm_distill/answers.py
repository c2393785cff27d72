"""Final answers: extract one from a solution and check it against a gold answer.

The one place that decides whether a solution is right, for best-of-N accuracy (`select.rerank`),
filter precision, rollout outcomes and answer anchoring. math-verify (Hugging Face, the `label`
extra) parses LaTeX and plain answers into sympy and compares them (1/2 = 0.5 = \\frac{1}{2});
without it, or when it finds nothing, the last plain number in the text is the answer (commas in
thousands removed) and numbers compare with a small relative tolerance. A GSM8K gold answer (a
worked solution ending in `#### 72`) counts only what follows `####`.

math-verify guards its parser with SIGALRM, so call these from the main thread.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

GSM8K_MARK = "####"
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+")
_REL_TOL = 1e-6


def _math_verify() -> Any:
    try:
        import math_verify
    except ImportError:  # the plain-number fallback still works
        return None
    return math_verify


@dataclass(frozen=True)
class Answer:
    """A final answer: `text` to show and count votes by, `parsed` (math-verify's) or `number` to compare."""

    text: str
    parsed: tuple[Any, ...] = ()
    number: float | None = None


def _plain_number(text: str) -> Answer | None:
    found = _NUMBER.findall(text)
    if not found:
        return None
    value = float(found[-1].replace(",", ""))
    shown = str(int(value)) if value.is_integer() else repr(value)
    return Answer(text=shown, number=value)


def extract_answer(text: str | None) -> Answer | None:
    """The final answer stated in `text` (a response, a last step or a gold answer), or None."""
    if not isinstance(text, str) or not text.strip():
        return None
    if GSM8K_MARK in text:
        text = text.rsplit(GSM8K_MARK, 1)[1]
    mv = _math_verify()
    if mv is not None:
        parsed = mv.parse(text)
        if parsed:
            return Answer(text=str(parsed[-1]), parsed=tuple(parsed))
    return _plain_number(text)


def _number_of(a: Answer) -> float | None:
    if a.number is not None:
        return a.number
    try:
        return float(a.text.replace(",", ""))
    except ValueError:
        return None


def same_answer(a: Answer, b: Answer) -> bool:
    """True when two answers are equal: mathematically (math-verify) when both parsed, else as numbers, else as text."""
    if a.parsed and b.parsed:
        mv = _math_verify()
        if mv is not None and mv.verify(list(a.parsed), list(b.parsed)):
            return True
    x, y = _number_of(a), _number_of(b)
    if x is not None and y is not None:
        return math.isclose(x, y, rel_tol=_REL_TOL, abs_tol=_REL_TOL)
    return a.text.strip() == b.text.strip()


def is_correct(solution: str, gold: str | None) -> bool | None:
    """True/False when `gold` states an answer; a solution that states none is wrong. None without a gold answer."""
    g = extract_answer(gold)
    if g is None:
        return None
    pred = extract_answer(solution)
    return pred is not None and same_answer(g, pred)


def answer_classes(answers: list[Answer | None]) -> list[int | None]:
    """A class index per answer (equal answers share one, numbered by first appearance); None stays None.

    Majority voting counts classes, so `\\frac{1}{2}` and `0.5` vote together."""
    reps: list[Answer] = []
    out: list[int | None] = []
    for a in answers:
        if a is None:
            out.append(None)
            continue
        for k, rep in enumerate(reps):
            if same_answer(rep, a):
                out.append(k)
                break
        else:
            reps.append(a)
            out.append(len(reps) - 1)
    return out
