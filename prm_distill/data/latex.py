"""LaTeX worked solutions (the MATH set): where the math is, the boxed answer, the steps, first-error edits.

Nothing here cuts or edits inside a span it does not read: math (`$...$`, `$$...$$`, `\\[...\\]`,
`\\(...\\)`, `\\begin{env}...\\end{env}`) and Asymptote figures (`[asy]...[/asy]`) are spans, found
by one scanner (`spans`); an unclosed one runs to the end of the text, so it is never split either.

Steps (`split_solution`), as ProcessBench's MATH split writes them: paragraphs (blank lines outside
spans); a paragraph with no prose of its own (a display, a figure) joins the one before it, as the
display it introduces; a paragraph longer than `max_chars` or of more than `max_sentences`
sentences is cut into groups of whole sentences (each at most `max_sentences`, kept under
`max_chars` where sentences allow). A sentence ends at `.`, `!` or `?` outside math followed by
space and a capital (or `$`, `\\`, `(`), or at a math span whose content ends with one (`4.$  Then`,
`\\end{align*}Let`); `e.g.`, `i.e.`, `Mr.` do not end one. A step is a substring of the solution.
A solution that is one short paragraph is one step, and is kept: its original is still a good
trajectory, and its variants are still first-error ones.

Edits (`Editor`): one token of one step is changed, the first error; `MATH_KINDS`:
- `miscalculation`: a number that is the whole right side of an `=` in math (`2a=-6`, `\\sqrt{81-16}
  = 8`, `&= 12`) whose left side is worked out (it holds a number, an operator or a function, not a
  bare name as in `n=3`), made off by one or two, of the other sign, or with two digits swapped;
- `wrong_answer`: a number (or the option letter) of the final `\\boxed{}`;
- `sign_error`: a binary `+` or `-` of a right side of an `=` in math, flipped;
- `flipped_relation`: an inequality reversed (`<`/`>`, `\\le`/`\\ge`, `\\leq`/`\\geq`), `\\neq` made `=`,
  or a claim in prose negated (`is not` -> `is`, `cannot` -> `can`, `is prime` -> `is not prime`).
The final answer's box is left to `wrong_answer`; `\\text{...}` is never edited. The wrong value is
carried on where the same token is written again right after an `=` (or boxed alone) later in the
step and in later steps, literally, with no re-computation: those steps are unsupervised anyway.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import NamedTuple

MATH_KINDS = ("miscalculation", "wrong_answer", "sign_error", "flipped_relation")


class Span(NamedTuple):
    start: int
    end: int
    inner: tuple[int, int]  # the content, delimiters excluded
    math: bool
    display: bool  # a display (`$$`, `\[`, an environment) or a figure: a sentence may follow it without a space


_ENV = re.compile(r"\\begin\{([^{}]+)\}")


def _find_unescaped(text: str, delim: str, pos: int) -> int:
    while (j := text.find(delim, pos)) >= 0:
        k = j
        while k > 0 and text[k - 1] == "\\":
            k -= 1
        if (j - k) % 2 == 0:
            return j
        pos = j + 1
    return -1


def spans(text: str) -> list[Span]:
    """Every math span and figure of `text`, in order."""
    out: list[Span] = []
    i, n = 0, len(text)
    while i < n:
        close, opened, math, display = None, 0, True, True
        if text.startswith("[asy]", i):
            close, opened, math = "[/asy]", 5, False
        elif text[i] == "\\":
            if text[i + 1 : i + 2] in ("[", "("):
                close, opened, display = ("\\]" if text[i + 1] == "[" else "\\)"), 2, text[i + 1] == "["
            elif m := _ENV.match(text, i):
                close, opened = f"\\end{{{m.group(1)}}}", m.end() - i
            else:
                i += 2  # an escaped character (`\$`) or a command
                continue
        elif text[i] == "$":
            close = "$$" if text.startswith("$$", i) else "$"
            opened, display = len(close), close == "$$"
        if close is None:
            i += 1
            continue
        j = _find_unescaped(text, close, i + opened) if close in ("$", "$$") else text.find(close, i + opened)
        end = n if j < 0 else j + len(close)
        out.append(Span(i, end, (i + opened, n if j < 0 else j), math, display))
        i = end
    return out


def _masked(n: int, sp: list[Span]) -> list[bool]:
    mask = [False] * n
    for s in sp:
        mask[s.start : s.end] = [True] * (s.end - s.start)
    return mask


# -- the boxed answer --------------------------------------------------------------------------
_BOXED = re.compile(r"\\boxed(?![A-Za-z])\s*")


def boxed_span(text: str) -> tuple[int, int] | None:
    """[start, end) of the content of the last `\\boxed` (braces balanced, `\\{` skipped; `\\boxed 9`
    boxes one character); None when there is none or its braces do not close."""
    found = list(_BOXED.finditer(text))
    if not found:
        return None
    j = found[-1].end()
    if j >= len(text):
        return None
    if text[j] != "{":
        return None if text[j].isspace() else (j, j + 1)
    depth, k = 0, j
    while k < len(text):
        c = text[k]
        if c == "\\":
            k += 2
            continue
        depth += {"{": 1, "}": -1}.get(c, 0)
        if depth == 0:
            return j + 1, k
        k += 1
    return None


def boxed_answer(text: str) -> str | None:
    """The content of the last `\\boxed{}` of `text`: `\\boxed{\\frac{1}{2}}` -> `\\frac{1}{2}`."""
    at = boxed_span(text)
    return None if at is None else text[at[0] : at[1]].strip()


# -- steps ----------------------------------------------------------------------------------------
@dataclass
class MathSplit:
    """How a MATH solution is cut into steps (see the module docstring)."""

    max_chars: int = field(default=300, metadata={"help": "A longer paragraph is cut into groups of sentences, each kept under it where sentences allow."})
    max_sentences: int = field(default=3, metadata={"help": "At most this many sentences per step."})


_BLANK = re.compile(r"\n[ \t]*\n\s*")
_PERIOD = re.compile(r"[.!?]")
_ABBREV = re.compile(r"(?i)\b(?:e\.g|i\.e|mr|mrs|ms|dr|cf|vs)$")
_MATH_END = re.compile(r"[.!?]\s*(?:\\,|\\;|~)*\s*$")
_NEXT = re.compile(r"[\"'”’)]*(\s*)(?=[A-Z$\\(])")


def _sentence_start(text: str, pos: int, need_space: bool) -> int | None:
    m = _NEXT.match(text, pos)
    if m is None or (need_space and not m.group(1)):
        return None
    return m.end() if m.end() < len(text) else None


def sentence_starts(text: str, sp: list[Span] | None = None) -> list[int]:
    """Where the sentences of `text` after the first begin (never inside a span)."""
    sp = spans(text) if sp is None else sp
    mask = _masked(len(text), sp)
    out = set()
    for m in _PERIOD.finditer(text):
        if mask[m.start()] or _ABBREV.search(text, 0, m.start()):
            continue
        if (k := _sentence_start(text, m.end(), need_space=True)) is not None:
            out.add(k)
    for s in sp:
        content = text[s.inner[0] : s.inner[1]]
        if (not s.math or _MATH_END.search(content)) and (k := _sentence_start(text, s.end, need_space=not s.display)) is not None:
            out.add(k)
    return sorted(k for k in out if not mask[k] or any(s.start == k for s in sp))


def _trim(text: str, a: int, b: int) -> tuple[int, int]:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return a, b


def _has_prose(text: str, a: int, b: int, sp: list[Span]) -> bool:
    mask = _masked(len(text), sp)
    return any(c.isalpha() and not mask[a + i] for i, c in enumerate(text[a:b]))


def split_solution(text: str, cfg: MathSplit | None = None) -> list[str]:
    """The steps of a LaTeX solution (see the module docstring); [] for an empty text."""
    cfg = cfg or MathSplit()
    sp = spans(text)
    mask = _masked(len(text), sp)
    cuts = [m for m in _BLANK.finditer(text) if not mask[m.start()]]
    bounds = [0] + [x for m in cuts for x in (m.start(), m.end())] + [len(text)]
    paras = [p for a, b in zip(bounds[::2], bounds[1::2]) if (p := _trim(text, a, b))[1] > p[0]]
    merged: list[tuple[int, int]] = []
    pending: int | None = None  # a leading paragraph without prose waits for the next one
    for a, b in paras:
        if pending is not None:
            a, pending = pending, None
        if not _has_prose(text, a, b, sp):
            if merged:
                merged[-1] = (merged[-1][0], b)
            else:
                pending = a
            continue
        merged.append((a, b))
    if pending is not None:
        merged.append((pending, paras[-1][1]))
    steps = []
    for a, b in merged:
        para = text[a:b]
        starts = sentence_starts(para)
        if len(para) <= cfg.max_chars and len(starts) < cfg.max_sentences:
            steps.append(para)
            continue
        edges = [0] + starts + [len(para)]
        group_start, n = 0, 0
        for s, e in zip(edges, edges[1:]):
            if n and (n >= cfg.max_sentences or e - group_start > cfg.max_chars):
                steps.append(para[slice(*_trim(para, group_start, s))])
                group_start, n = s, 0
            n += 1
        steps.append(para[slice(*_trim(para, group_start, len(para)))])
    return [s for s in steps if s]


# -- first-error edits ----------------------------------------------------------------------------
@dataclass
class Edit:
    kind: str
    step: int  # the first wrong step
    steps: list[str]
    detail: dict[str, str]


_TEXT = re.compile(r"\\(?:text\w*|mbox|mathrm|operatorname)\s*\{[^{}]*\}")
_NUM = r"-?\d+(?:\.\d+)?"
_RHS_END = (r"(?=\s*(?:\\%|\^\\circ|\^\{\\circ\})?\s*"  # a unit, then what ends a right side
            r"(?:$|[=,;&<>)$]|\.(?!\d)|\\\\|\\[\])]|\\(?:Rightarrow|implies|iff|quad|qquad|text|end|le|ge|neq?)(?![a-z])))")
_RHS_NUMBER = re.compile(rf"(?<![<>!:\\])=\s*({_NUM})" + _RHS_END)
_EQ = re.compile(r"(?<![<>!:\\])=")
_SEP = re.compile(r"(?<![<>!:\\])=|[,;&<>]|\\\\|\\(?:Rightarrow|implies|iff|quad|qquad|le|ge|leq|geq|neq|ne)(?![A-Za-z])")
_WORKED = re.compile(r"[\d+\-*/^!]|\\(?:frac|dfrac|tfrac|sqrt|cdot|times|div|binom|choose|sum|prod|log|ln|sin|cos|tan|cot|sec|csc|pi)(?![A-Za-z])")
_SUBSCRIPT = re.compile(r"_(?:\{[^{}]*\}|\\?\w)")
_SIGN = re.compile(r"(?<=[\w)}\]|!])(\s*)([+-])(?=\s*(?!0(?![\d.]))[\w(\\{.|])")
_REL = re.compile(r"\\(?:leq|geq|le|ge|lt|gt|neq|ne)(?![A-Za-z])|(?<![\\<>])[<>](?![<>])")
_FLIP = {"<": ">", ">": "<", r"\le": r"\ge", r"\ge": r"\le", r"\leq": r"\geq", r"\geq": r"\leq", r"\lt": r"\gt", r"\gt": r"\lt", r"\neq": "=", r"\ne": "="}
_NEGATED = re.compile(r"\b(?:(is|are|was|were) not|(can)not|(is|are)n't|(can)'t)\b")
_CLAIM = re.compile(r"\b(is|are) (?=(?:divisible|prime|odd|even|an integer|integers|positive|negative|possible|real|parallel|perpendicular|similar"
                    r"|congruent)\b)")
_OPTION = re.compile(r"\s*(?:\\text(?:bf)?\s*\{)?\s*\(?([A-E])\)?\s*\}?\s*$")


class _Site(NamedTuple):
    step: int
    start: int
    end: int  # the token changed
    context: tuple[int, int]  # what is carried on: the number, or the right side the sign is in


def _math_regions(step: str, exclude: tuple[int, int] | None) -> list[tuple[int, int]]:
    """Content of the math spans of a step, minus `\\text{}` and the excluded range (the final box)."""
    out = []
    for s in spans(step):
        if not s.math:
            continue
        a, b = s.inner
        holes = [(m.start(), m.end()) for m in _TEXT.finditer(step, a, b)] + ([exclude] if exclude else [])
        for h0, h1 in sorted(holes):
            if h1 <= a or h0 >= b:
                continue
            if h0 > a:
                out.append((a, h0))
            a = max(a, h1)
        if a < b:
            out.append((a, b))
    return out


def _worked_out(step: str, region_start: int, eq: int) -> bool:
    before = [m.end() for m in _SEP.finditer(step, region_start, eq)]
    lhs = step[before[-1] if before else region_start : eq]
    return not lhs.strip() or bool(_WORKED.search(_SUBSCRIPT.sub("", lhs)))


class Editor:
    """First-error edits of one solution's steps (one token of one step changed)."""

    def __init__(self, steps: list[str], rng: random.Random):
        self.steps, self.rng = steps, rng
        self.answer: tuple[int, tuple[int, int]] | None = None  # (step, content span) of the final box
        for i in reversed(range(len(steps))):
            if (at := boxed_span(steps[i])) is not None:
                self.answer = (i, at)
                break

    def _regions(self, i: int) -> list[tuple[int, int]]:
        return _math_regions(self.steps[i], self.answer[1] if self.answer and self.answer[0] == i else None)

    def sites(self, kind: str) -> list[_Site]:
        """Where `kind` may change a token."""
        if kind not in MATH_KINDS:
            raise ValueError(f"unknown MATH error kind {kind!r}; known: {', '.join(MATH_KINDS)}")
        out: list[_Site] = []
        if kind == "wrong_answer":
            if self.answer is None:
                return []
            i, (a, b) = self.answer
            step = self.steps[i]
            if m := _OPTION.match(step, a, b):
                return [_Site(i, m.start(1), m.end(1), (m.start(1), m.end(1)))]
            return [_Site(i, m.start(), m.end(), (m.start(), m.end())) for m in re.finditer(r"\d+(?:\.\d+)?", step[:b]) if m.start() >= a]
        for i, step in enumerate(self.steps):
            for a, b in self._regions(i):
                if kind == "miscalculation":
                    out += [_Site(i, m.start(1), m.end(1), m.span(1)) for m in _RHS_NUMBER.finditer(step, a, b) if _worked_out(step, a, m.start())]
                elif kind == "sign_error":
                    for eq in _EQ.finditer(step, a, b):
                        nxt = _SEP.search(step, eq.end(), b)
                        rhs = _trim(step, eq.end(), nxt.start() if nxt else b)
                        while rhs[1] > rhs[0] and step[rhs[1] - 1] in ".:":  # the sentence's period is not the right side's
                            rhs = _trim(step, rhs[0], rhs[1] - 1)
                        out += [_Site(i, m.start(2), m.end(2), rhs) for m in _SIGN.finditer(step, *rhs)]
                elif kind == "flipped_relation":
                    out += [_Site(i, m.start(), m.end(), m.span()) for m in _REL.finditer(step, a, b)]
            if kind == "flipped_relation":
                mask = _masked(len(step), spans(step))
                for pattern in (_NEGATED, _CLAIM):
                    out += [_Site(i, m.start(), m.end(), m.span()) for m in pattern.finditer(step) if not mask[m.start()]]
        return out

    def edit(self, kind: str) -> Edit | None:
        """One edit of `kind` at a site drawn at random; None when the kind has no site."""
        sites = self.sites(kind)
        if not sites:
            return None
        site = self.rng.choice(sites)
        step = self.steps[site.step]
        old = step[site.start : site.end]
        if kind == "miscalculation":
            new = wrong_number(old, self.rng, signed=True)
        elif kind == "wrong_answer":
            new = self.rng.choice([c for c in "ABCDE" if c != old]) if old.isalpha() else wrong_number(old, self.rng, signed=False)
        elif kind == "sign_error":
            new = "-" if old == "+" else "+"
        elif old in _FLIP:
            new = _FLIP[old]
        elif m := _NEGATED.fullmatch(old):
            new = next(g for g in m.groups() if g)
        else:
            new = old + "not "
        changed = step[: site.start] + new + step[site.end :]
        steps = list(self.steps)
        steps[site.step] = changed
        detail = {"was": old, "now": new}
        if kind in ("miscalculation", "sign_error"):
            was = step[site.context[0] : site.context[1]]
            now = changed[site.context[0] : site.context[1] + len(new) - len(old)]
            at = site.context[1] + len(new) - len(old)
            steps[site.step] = changed[:at] + carry(changed[at:], was, now)
            steps[site.step + 1 :] = [carry(s, was, now) for s in steps[site.step + 1 :]]
            detail = {"was": was, "now": now}
        return Edit(kind, site.step, steps, detail)


def carry(text: str, was: str, now: str) -> str:
    """`= was` (the whole right side) and `\\boxed{was}` written again in `text`, made `now`."""
    text = re.sub(r"(?<![<>!:\\])(=\s*)" + re.escape(was) + _RHS_END, lambda m: m.group(1) + now, text)
    return text.replace(f"\\boxed{{{was}}}", f"\\boxed{{{now}}}")


def wrong_number(token: str, rng: random.Random, signed: bool = True) -> str:
    """A plausible slip: off by one or two (half the time), the other sign (`signed`), or two neighbouring digits swapped."""
    neg, digits = token.startswith("-"), token.lstrip("-")
    whole, _, frac = digits.partition(".")
    sign = "-" if neg else ""
    options: dict[str, list[str]] = {"off": [], "sign": [], "swap": []}
    if frac:
        last = int(frac[-1])
        options["off"] = [f"{sign}{whole}.{frac[:-1]}{d}" for d in ((last + 1) % 10, (last - 1) % 10)]
    else:
        v = int(token)
        options["off"] = [str(v + d) for d in (-2, -1, 1, 2)]
    if signed and float(digits) != 0:
        options["sign"] = [digits if neg else "-" + digits]
    for k in range(len(whole) - 1):
        if whole[k] != whole[k + 1] and not (k == 0 and whole[1] == "0"):
            options["swap"].append(sign + whole[:k] + whole[k + 1] + whole[k] + whole[k + 2 :] + (f".{frac}" if frac else ""))
    kept = {name: [o for o in opts if o != token and (signed or not o.startswith("-"))] for name, opts in options.items()}
    kinds = [name for name, opts in kept.items() if opts]
    weights = [{"off": 2, "sign": 1, "swap": 1}[name] for name in kinds]  # most slips are small
    return rng.choice(kept[rng.choices(kinds, weights)[0]])
