"""Split a raw response into reasoning steps: the one splitter used at labeling and at scoring time.

Labels are only meaningful if the judge and the scorer see the same steps, so both call this.
It works on character spans of the original text, which lets the scorer map steps back to the
policy's output tokens exactly.

Order of preference: explicit step markers ("Step 1:", "## Step 2", "**Step 3**"), then numbered
list items ("1.", "2)"), then blank lines, then sentence groups. Text before the first marker is
its own step, or steps when it has numbered items or paragraphs (blank lines). Granularity bounds then merge
fragments too short to be a step and split overlong blocks at sentence (else line, else word)
boundaries. Fenced code blocks are never split.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping

_STEP_MARKER = re.compile(r"(?im)^[ \t]*(?:#{1,6}[ \t]*)?(?:\*\*)?step[ \t]*\d+\b")
_NUMBERED = re.compile(r"(?m)^[ \t]*\d{1,3}[.)][ \t]+")
_BLANK = re.compile(r"\n[ \t]*\n\s*")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=\S)")
_LINE = re.compile(r"\n\s*")
_SPACE = re.compile(r"\s+")
_FENCE = re.compile(r"```[\s\S]*?(?:```|\Z)")


class StepSplitError(ValueError):
    """The text cannot be split (it is empty)."""


@dataclass
class SplitConfig:
    """Granularity bounds of the step splitter."""

    min_chars: int = field(default=12, metadata={"help": "A fragment shorter than this (stripped) is merged into its neighbour."})
    max_chars: int = field(default=1500, metadata={"help": "A block longer than this is split at sentence, line or word boundaries (code blocks excepted)."})
    sentences_per_step: int = field(default=2, metadata={"help": "Sentences per step when the text has no markers, list items or blank lines."})

    def __post_init__(self) -> None:
        if self.min_chars < 0 or self.max_chars < 1 or self.sentences_per_step < 1:
            raise ValueError("SplitConfig: min_chars >= 0, max_chars >= 1 and sentences_per_step >= 1 are required")
        if self.min_chars >= self.max_chars:
            raise ValueError(f"SplitConfig: min_chars ({self.min_chars}) must be below max_chars ({self.max_chars})")


def splitter_config(splitter: Mapping[str, Any] | SplitConfig | None = None, split: Mapping[str, Any] | SplitConfig | None = None) -> SplitConfig:
    """The `SplitConfig` of a `splitter=` argument (a mapping of its fields or an instance; None =
    defaults). `split=` is its old name, still read with a `FutureWarning`; both at once is an error."""
    if split is not None:
        if splitter is not None:
            raise ValueError("give splitter only (split is its old name)")
        warnings.warn("split= is now splitter=; the old name still works but will go", FutureWarning, stacklevel=3)
        splitter = split
    if isinstance(splitter, SplitConfig):
        return splitter
    return SplitConfig(**dict(splitter or {}))


def _code_spans(text: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in _FENCE.finditer(text)]


def _inside(pos: int, spans: list[tuple[int, int]]) -> bool:
    return any(s < pos < e for s, e in spans)


def _starts(pattern: re.Pattern, text: str, code: list[tuple[int, int]], use_end: bool = False) -> list[int]:
    out = []
    for m in pattern.finditer(text):
        pos = m.end() if use_end else m.start()
        if 0 < pos < len(text) and not _inside(pos, code):
            out.append(pos)
    return out


def _trim(text: str, s: int, e: int) -> tuple[int, int] | None:
    while s < e and text[s].isspace():
        s += 1
    while e > s and text[e - 1].isspace():
        e -= 1
    return (s, e) if e > s else None


def _cut(text: str, bounds: list[int], lo: int, hi: int) -> list[tuple[int, int]]:
    points = [lo] + sorted(b for b in set(bounds) if lo < b < hi) + [hi]
    return [sp for a, b in zip(points, points[1:]) if (sp := _trim(text, a, b))]


def _split_long(text: str, span: tuple[int, int], cfg: SplitConfig, code: list[tuple[int, int]]) -> list[tuple[int, int]]:
    s, e = span
    if e - s <= cfg.max_chars:
        return [span]
    for pattern in (_SENTENCE_END, _LINE, _SPACE):
        cands = [b for b in _starts(pattern, text[s:e], [(a - s, b - s) for a, b in code], use_end=True)]
        if not cands:
            continue
        out, start, last = [], s, None
        for c in (s + c for c in cands):
            if c - start > cfg.max_chars and last is not None:
                out.append((start, last))
                start = last
            last = c
        if e - start > cfg.max_chars and last is not None and last > start:
            out.append((start, last))
            start = last
        out.append((start, e))
        pieces = [p for a, b in out if (p := _trim(text, a, b))]
        if len(pieces) > 1:
            return [q for p in pieces for q in _split_long(text, p, cfg, code)]
    return [span]  # one unbreakable token or one code block: kept whole


def _merge_short(text: str, spans: list[tuple[int, int]], min_chars: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    pending: int | None = None  # start of a short leading fragment waiting for the next span
    for s, e in spans:
        if pending is not None:
            s, pending = pending, None
        if e - s < min_chars:
            if out:
                out[-1] = (out[-1][0], e)
            else:
                pending = s
            continue
        out.append((s, e))
    if pending is not None:
        out.append((pending, spans[-1][1]))
    return out


def _preamble(text: str, end: int, code: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The text before the first step marker, as steps of its own: cut at numbered items (two or
    more) or blank lines, as an unmarked response is, so its paragraphs are not glued into one step.
    Not into sentence groups: a marked step is never cut at sentences either."""
    numbered = [b for b in _starts(_NUMBERED, text[:end], code) if b < end]
    bounds = numbered if len(numbered) >= 2 else [b for b in _starts(_BLANK, text[:end], code, use_end=True) if b < end]
    return _cut(text, bounds, 0, end)


def split_step_spans(text: str, config: SplitConfig | None = None) -> list[tuple[int, int]]:
    """Character spans [start, end) of the steps of `text`, in order, whitespace trimmed."""
    cfg = config or SplitConfig()
    if not isinstance(text, str) or not text.strip():
        raise StepSplitError("cannot split an empty response into steps")
    code = _code_spans(text)
    n = len(text)
    markers = _starts(_STEP_MARKER, text, code)
    numbered = _starts(_NUMBERED, text, code)
    if len(markers) >= 2 or (markers and _trim(text, 0, markers[0])):
        first = next(m.start() for m in _STEP_MARKER.finditer(text) if not _inside(m.start(), code))  # may be 0: not in `markers`
        spans = _preamble(text, first, code) + _cut(text, markers, first, n)
    elif len(numbered) >= 2:
        spans = _cut(text, numbered, 0, n)
    elif blanks := _starts(_BLANK, text, code, use_end=True):
        spans = _cut(text, blanks, 0, n)
    else:
        sentences = _starts(_SENTENCE_END, text, code, use_end=True)
        spans = _cut(text, sentences[cfg.sentences_per_step - 1 :: cfg.sentences_per_step], 0, n)
    spans = [p for sp in spans for p in _split_long(text, sp, cfg, code)]
    return _merge_short(text, spans, cfg.min_chars)


def split_steps(text: str, config: SplitConfig | None = None) -> list[str]:
    """The steps of `text` as strings (see module docstring for the rules)."""
    return [text[s:e] for s, e in split_step_spans(text, config)]
