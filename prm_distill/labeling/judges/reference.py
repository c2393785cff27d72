"""Reference-guided first-error labels: compare what each step derives with the gold worked solution.

A rule, not a model, and it reads the answer key (unlike the LLM judges): a record carries the gold
worked solution in `reference` (GSM8K's `answer` text; calculator annotations `<<48/2=24>>` allowed)
and the gold final answer in `answer`. On a trajectory whose final answer is wrong, the first step
that states a number supported by nothing (not in the question, not in the gold solution's chain,
not a trivial form of either) or a false equation is the first error: earlier steps 1, it 0, later
steps unsupervised (null), as in ProcessBench. A wrong trajectory with no such step went wrong in
its conclusion, so its last step is the error. On a trajectory whose answer is right every step is
1, except a bare answer: a final answer that no step derives (stated once, never as the result of
an equation) is a guess, so the last step is 0 and the earlier ones 1. A trajectory whose last step
states no answer gets no labels (counted and named in the summary, never a silent label).

Known limit: a correct alternative path with intermediate values outside the gold chain is read as
diverging; this matters only on wrong trajectories, where it can place the error too early.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import AsyncIterator

from ...answers import GSM8K_MARK, extract_answer, same_answer
from ...records import Trajectory
from ...verify import arithmetic, check_step
from ..config import JudgeConfig
from .base import Completion, Request

VERSION = "reference.v1"
NAME = "reference"

# a number as written: thousands separators, decimals; not the digits of an ordinal ("3rd") or of a longer token
_NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?!\d|(?:st|nd|rd|th)\b)")
_MARK = re.compile(r"<<[^<>]*>>")
# enumerators, not quantities: "Step 2:", and "2. " / "2) " opening a line or following a sentence, before a word
_ENUMERATOR = re.compile(r"\bstep\s*\d+\s*\**\s*[:.)-]?|(?:^|(?<=[.:!?]\s)|(?<=\n))\s*\d{1,2}[.)]\s+(?=[*A-Z])", re.I | re.M)
_FRACTION = re.compile(r"\\[dt]?frac\{\s*(\d+)[^{}\d]*(?:\{[^{}]*\}[^{}]*)?\}\{\s*(\d+)[^{}\d]*(?:\{[^{}]*\}[^{}]*)?\}|(?<![\d.])(\d+)\s*/\s*(\d+)(?![\d.])")
# quantities a question states in words, and the forms a relation word implies
_WORDS = {
    "one": (1,), "two": (2,), "three": (3,), "four": (4,), "five": (5,), "six": (6,), "seven": (7,), "eight": (8,),
    "nine": (9,), "ten": (10,), "eleven": (11,), "twelve": (12,), "thirteen": (13,), "fourteen": (14,), "fifteen": (15,),
    "sixteen": (16,), "seventeen": (17,), "eighteen": (18,), "nineteen": (19,), "twenty": (20,), "thirty": (30,),
    "forty": (40,), "fifty": (50,), "hundred": (100,), "thousand": (1000,), "dozen": (12,), "half": (2, Fraction(1, 2)),
    "twice": (2,), "double": (2,), "triple": (3,), "thrice": (3,), "quarter": (4, Fraction(1, 4)), "third": (3, Fraction(1, 3)),
    "percent": (100,), "week": (7,), "hour": (60,), "minute": (60,), "year": (12, 52, 365), "day": (24,),
}
_WORD = re.compile(r"\b(" + "|".join(_WORDS) + r")s?\b", re.I)
ALWAYS = frozenset(Fraction(x) for x in (0, 1, 2, 100))  # counting, halving, percent: never an unsupported derivation


class ReferenceMissing(ValueError):
    """A record lacks the gold worked solution or the gold answer the rule compares with."""


@dataclass(frozen=True)
class Verdict:
    """The rule's reading of one trajectory: per-step labels and why."""

    labels: list[float | None]
    verdict: str  # correct | bare_answer | wrong | no_answer
    first_error: int | None = None
    reason: str = ""

    def as_dict(self) -> dict[str, object]:
        return {"verdict": self.verdict, "first_error": self.first_error, "reason": self.reason}


def numbers(text: str) -> list[tuple[str, Fraction]]:
    """(as written, value) for each number in plain text (commas and `$` ignored)."""
    return [(m.group(0), Fraction(m.group(1).replace(",", "") + (m.group(2) or ""))) for m in _NUMBER.finditer(text.replace("$", " "))]


_PERCENT = re.compile(r"^\s*(?:%|percent)", re.I)


def supported_values(question: str, reference: str, answer: str) -> set[Fraction]:
    """Every value the gold chain licenses: numbers of the question (digits and words), of the worked
    solution (annotations included) and the gold answer, percent forms (20% <-> 0.2) and a few constants."""
    values: set[Fraction] = set(ALWAYS)
    for text in (question, reference.replace(GSM8K_MARK, " "), answer.replace(GSM8K_MARK, " ")):
        text = text.replace("<<", " ").replace(">>", " ").replace("=", " ").replace("$", " ")
        for m in _NUMBER.finditer(text):
            v = Fraction(m.group(1).replace(",", "") + (m.group(2) or ""))
            values.add(v)
            if _PERCENT.match(text[m.end():]):
                values |= {v / 100, 1 + v / 100, 1 - v / 100}  # 25% of, 25% more, 25% off
    for m in _WORD.finditer(question):
        values.update(Fraction(v) for v in _WORDS[m.group(1).lower()])
    return values


def _matches(written: str, value: Fraction, known: set[Fraction]) -> bool:
    """Exactly a known value, or one rounded to the decimals written (33.33 for 100/3; 33 too)."""
    if value in known:
        return True
    decimals = len(written.split(".")[1]) if "." in written else 0
    tol = Fraction(1, 2 * 10 ** decimals)
    return any(abs(value - v) <= tol and (decimals or v.denominator != 1) for v in known)


def _clean(step: str) -> str:
    return _ENUMERATOR.sub(" ", _MARK.sub("", step))


def _simplified(text: str, known: set[Fraction]) -> set[Fraction]:
    """A fraction of two licensed numbers that is not a whole number (50/60) licenses its reduced
    form and value (5/6, 0.83): a rewriting, not a computation; a whole quotient (48/2) stays checked."""
    out: set[Fraction] = set()
    for m in _FRACTION.finditer(text):
        a, b = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        x, y = Fraction(a), Fraction(b)
        if y and (x / y).denominator != 1 and _matches(a, x, known) and _matches(b, y, known):
            out |= {x / y, Fraction((x / y).numerator), Fraction((x / y).denominator)}
    return out


def first_unsupported(steps: list[str], known: set[Fraction]) -> tuple[int, str] | None:
    """(index, reason) of the first step with a false equation or a number outside `known`."""
    known = set(known)
    for k, step in enumerate(steps):
        text = _clean(step)
        known |= _simplified(text, known)
        false = [c.statement for c in check_step(text) if not c.holds]
        if false:
            return k, f"false statement {false[0]!r}"
        plain = text.replace("$", " ")
        for m in _NUMBER.finditer(plain):
            written, v = m.group(0), Fraction(m.group(1).replace(",", "") + (m.group(2) or ""))
            if not (_matches(written, v, known) or (_PERCENT.match(plain[m.end():]) and v / 100 in known)):
                return k, f"unsupported value {written}"
    return None


def answer_derived(steps: list[str], answer: Fraction | None) -> bool:
    """Whether some step derives the stated final answer: the value appears twice in the solution, or
    once as the result of an equation (`9 * 2 = 18`). "The answer is 18." alone derives nothing."""
    if answer is None:
        return True  # not a plain number: cannot be counted, so not called a guess
    text = [_clean(s) for s in steps]
    seen = sum(1 for t in text for _, v in numbers(t) if v == answer)
    results = [Fraction(c.statement.rsplit("=", 1)[1].strip().replace(",", "")) for t in text for c in arithmetic(t.replace("$", "")) if c.holds]
    return seen >= 2 or answer in results


def _plain(text: str) -> Fraction | None:
    found = numbers(text)
    return found[-1][1] if found else None


def label(question: str, steps: list[str], reference: str, answer: str) -> Verdict:
    """The rule on one trajectory (see the module docstring)."""
    n = len(steps)
    gold, pred = extract_answer(str(answer)), extract_answer(steps[-1]) if steps else None
    if gold is None:
        raise ReferenceMissing(f"gold answer {answer!r} states no answer")
    if pred is None:
        return Verdict([None] * n, "no_answer", reason="the last step states no final answer")
    if same_answer(gold, pred):
        good: list[float | None] = [1.0] * n
        if not answer_derived(steps, _plain(steps[-1].rsplit(GSM8K_MARK, 1)[-1])):
            return Verdict(good[:-1] + [0.0], "bare_answer", n - 1, f"the answer {pred.text} is stated but no step derives it")
        return Verdict(good, "correct")
    found = first_unsupported(steps, supported_values(question, reference, str(answer)))
    e, reason = found if found is not None else (n - 1, f"wrong final answer {pred.text} (gold {gold.text})")
    return Verdict([1.0] * e + [0.0] + [None] * (n - e - 1), "wrong", e, reason)


def reference_of(r: Trajectory) -> tuple[str, str] | None:
    """(worked solution, gold answer) of a record, None when either is missing."""
    ref, ans = r.metadata.get("reference"), r.metadata.get("answer")
    if not isinstance(ref, str) or not ref.strip() or ans in (None, ""):
        return None
    return ref, str(ans)


def check_reference(records: list[Trajectory]) -> None:
    """Refuse, naming records, a job where some record lacks `reference` or `answer`."""
    missing = [r.id for r in records if reference_of(r) is None]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ReferenceMissing(f"judge.backend=reference needs a gold worked solution `reference` and a gold `answer` on every rollout; "
                               f"{len(missing)} of {len(records)} lack one ({shown})")


def label_record(r: Trajectory) -> Verdict:
    pair = reference_of(r)
    if pair is None:
        raise ReferenceMissing(f"record {r.id!r}: judge.backend=reference needs `reference` (the gold worked solution) and `answer`")
    try:
        return label(r.question, r.steps, *pair)
    except ReferenceMissing as e:
        raise ReferenceMissing(f"record {r.id!r}: {e}") from None


class ReferenceJudge:
    """The registry's face of the rule: the labeler calls `label_record` directly; no request is ever sent."""

    def __init__(self, cfg: JudgeConfig):
        self.name = cfg.name

    async def stream(self, requests: list[Request], stop: asyncio.Event) -> AsyncIterator[tuple[int, Completion]]:
        if requests:
            raise RuntimeError("the reference judge is a rule: it answers no requests")
        for _ in ():
            yield _

    async def aclose(self) -> None:
        return None
