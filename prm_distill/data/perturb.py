"""First-error variants of a worked solution whose computations are known.

A solution is a list of lines; each line holds text and computations (`<<expr=result>>`, GSM8K's
calculator annotations, or the same mark put around an arithmetic statement found in plain steps).
A variant changes one computation of one line in one of several ways a real policy goes wrong,
then re-runs every later computation with the changed value substituted, so later lines carry the
wrong value forward consistently (as a real continuation does) and the changed line is the first
wrong step. A kind that does not apply to a line is not applied (never faked): `None` is returned.
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass, replace
from fractions import Fraction

from ..verify import NUMBER as _NUMBER, NotComputable, evaluate, statements  # the one evaluator, the one reading of a statement and of a number

__all__ = ["KINDS", "NotComputable", "Perturber", "evaluate", "fmt", "mark_statements", "num"]

KINDS = ("miscalculation", "wrong_quantity", "wrong_operation", "misread_relation", "dropped_term")

ANNOTATION = re.compile(r"<<([^<>=]+)=([^<>]+)>>")
NUMBER = re.compile(rf"(?<![\w.])({_NUMBER})(?![\d])")  # a number in text, as a statement reads one
_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_VISIBLE_OPS = {"+": r"\+", "-": r"(?<=[\d\s$)])-(?=[\s\d$(])", "*": r"[*x×]", "/": r"[/÷]"}
_SWAP = {"+": "-", "-": "+", "*": "/", "/": "*"}
_EXPR_OP = re.compile(r"(?<=[\d)\s])[-+*/](?=[\s\d(.])")


def num(text: str) -> Fraction:
    return Fraction(text.replace(",", ""))


def fmt(v: Fraction) -> str:
    """How a solution writes a value: integers plainly, others to at most two decimals."""
    if v.denominator == 1:
        return str(v.numerator)
    s = f"{float(v):.2f}".rstrip("0").rstrip(".")
    return s


@dataclass
class Computation:
    pre: str  # visible text before the mark (since the previous computation), holds the written expression
    expr: str  # the expression the mark computes
    result: str  # the written result (visible right after the mark)
    tail_gap: str = ""  # visible text between the mark and the result (e.g. "$")


@dataclass
class Line:
    parts: list[Computation]
    tail: str  # visible text after the last computation

    def render(self) -> str:
        return "".join(c.pre + c.tail_gap + c.result for c in self.parts) + self.tail


# the written result read as a statement reads it: `$<<10/2=5>>5, so` writes 5, not "5,"
_MARK_WITH_RESULT = re.compile(rf"<<([^<>=]+)=([^<>]+)>>(\$?)(-?{_NUMBER})")


def parse_line(text: str) -> Line:
    """A line with `<<expr=result>>result` marks (GSM8K's calculator annotations)."""
    parts, pos = [], 0
    for m in _MARK_WITH_RESULT.finditer(text):
        parts.append(Computation(pre=text[pos : m.start()], expr=m.group(1), result=m.group(4), tail_gap=m.group(3)))
        pos = m.end()
    return Line(parts, ANNOTATION.sub("", text[pos:]))


def mark_statements(text: str) -> str:
    """Put a `<<expr=result>>` mark before the written result of every arithmetic statement of plain
    text (`verify.statements`, the verifier's reading), so steps that were not written with
    annotations vary the same way. The result is kept as written, right or wrong: the mark records
    what the step claims, `evaluate` what it should be."""
    out, pos = [], 0
    for st in statements(text):
        at = st.result_span[0]
        out += [text[pos:at], f"<<{st.expression}={st.result}>>"]
        pos = at
    return "".join(out) + text[pos:]


def _operands(expr: str) -> list[str]:
    return [m.group(1) for m in NUMBER.finditer(expr)]


def _replace_visible_number(pre: str, old: Fraction, new: str) -> str | None:
    """Replace the last written number in `pre` equal to `old` (None when it is not written there)."""
    hits = [m for m in NUMBER.finditer(pre) if num(m.group(1)) == old]
    if not hits:
        return None
    m = hits[-1]
    return pre[: m.start()] + new + pre[m.end() :]


def _replace_nth_number(expr: str, index: int, new: str) -> str:
    m = list(NUMBER.finditer(expr))[index]
    return expr[: m.start()] + new + expr[m.end() :]


@dataclass
class Variant:
    kind: str
    line: int
    lines: list[str]
    detail: dict


class Perturber:
    """Makes first-error variants of one solution. `question` supplies the quantities that a
    'wrong quantity' error copies wrongly and the cue words of a misread relation."""

    def __init__(self, question: str, lines: list[str], rng: random.Random):
        self.question = question
        self.lines = [parse_line(x) for x in lines]
        self.rng = rng
        self.q_numbers = sorted({num(m.group(1)) for m in NUMBER.finditer(question)})

    # -- candidates -------------------------------------------------------------------------
    def candidates(self, kind: str) -> list[tuple[int, int]]:
        """(line, computation) pairs the kind applies to (some option gives a changed, computable step)."""
        out = []
        for i, line in enumerate(self.lines):
            for j, c in enumerate(line.parts):
                try:
                    evaluate(c.expr)
                except NotComputable:
                    continue
                if any(opt() is not None for opt in self._options(kind, c)):
                    out.append((i, j))
        return out

    def make(self, kind: str, line: int, comp: int) -> Variant | None:
        c = self.lines[line].parts[comp]
        options = self._options(kind, c)
        self.rng.shuffle(options)
        for opt in options:
            changed = opt()
            if changed is None:
                continue
            new_c, detail = changed
            lines = [Line([replace(p) for p in ln.parts], ln.tail) for ln in self.lines]
            lines[line].parts[comp] = new_c
            mapping = {num(c.result): num(new_c.result)}
            rendered = self._carry_forward(lines, line, comp + 1, mapping)
            if rendered is not None:
                return Variant(kind, line, rendered, detail)
        return None

    def _options(self, kind: str, c: Computation) -> list:
        return getattr(self, "_" + kind)(c)

    # -- kinds: each returns a list of options; an option returns (new computation, detail) or None
    def _miscalculation(self, c: Computation) -> list:
        def opt():
            wrong = self._wrong_value(num(c.result))
            return replace(c, result=fmt(wrong)), {"was": c.result, "now": fmt(wrong)}
        return [opt]

    def _wrong_quantity(self, c: Computation) -> list:
        ops = _operands(c.expr)
        out = []
        for k, o in enumerate(ops):
            old = num(o)
            if old not in self.q_numbers or _replace_visible_number(c.pre, old, "0") is None:
                continue

            def opt(k=k, o=o, old=old):
                others = [q for q in self.q_numbers if q != old]
                new = self.rng.choice(others) if others and self.rng.random() < 0.6 else self._wrong_value(old)
                return self._recompute(c, _replace_nth_number(c.expr, k, fmt(new)), _replace_visible_number(c.pre, old, fmt(new)), {"was": o, "now": fmt(new)})
            out.append(opt)
        return out

    def _swap(self, c: Computation, index: int, new_op: str):
        """Swap the index-th operator of the expression and its written counterpart in `pre`."""
        ops = [(m.start(), m.group(0)) for m in _EXPR_OP.finditer(c.expr)]
        pos, old_op = ops[index]
        visible = list(re.finditer(_VISIBLE_OPS[old_op], c.pre))
        same_kind = [o for o in ops if o[1] == old_op]
        if len(visible) != len(same_kind):
            return None
        v = visible[same_kind.index((pos, old_op))]
        shown = {"+": "+", "-": "-", "*": v.group(0) if v.group(0) in "x×*" and old_op == "*" else "*", "/": "/"}[new_op]
        new_pre = c.pre[: v.start()] + shown + c.pre[v.end() :]
        new_expr = c.expr[:pos] + new_op + c.expr[pos + 1 :]
        return self._recompute(c, new_expr, new_pre, {"was": old_op, "now": new_op})

    def _wrong_operation(self, c: Computation) -> list:
        ops = [m.group(0) for m in _EXPR_OP.finditer(c.expr)]
        return [lambda k=k, o=o: self._swap(c, k, _SWAP[o]) for k, o in enumerate(ops)]

    def _misread_relation(self, c: Computation) -> list:
        """twice/half, more/less, percent of vs percent off: the relation the wording states, reversed."""
        q = self.question.lower()
        ops = [m.group(0) for m in _EXPR_OP.finditer(c.expr)]
        numbers = _operands(c.expr)
        out = []
        if re.search(r"\b(twice|double|doubles|half|halves)\b", q) and "2" in numbers:
            out += [lambda k=k, o=o: self._swap(c, k, _SWAP[o]) for k, o in enumerate(ops) if o in "*/"]
        if re.search(r"\b(more|less|fewer|older|younger|longer|shorter|taller|cheaper)\b", q):
            out += [lambda k=k, o=o: self._swap(c, k, _SWAP[o]) for k, o in enumerate(ops) if o in "+-"]
        if ("%" in q or "percent" in q) and "100" in numbers:
            for k, p in enumerate(numbers):
                if p != "100" and 0 < num(p) < 100 and num(p) in self.q_numbers:
                    def opt(k=k, p=p):
                        new = fmt(100 - num(p))
                        pre = _replace_visible_number(c.pre, num(p), new)
                        return self._recompute(c, _replace_nth_number(c.expr, k, new), pre, {"was": f"{p}%", "now": f"{new}%"})
                    out.append(opt)
        return out

    def _dropped_term(self, c: Computation) -> list:
        """A sum or difference of three or more terms that leaves one out (a condition dropped)."""
        if not re.fullmatch(r"\s*\d[\d.]*(\s*[-+]\s*\d[\d.]*){2,}\s*", c.expr):
            return []
        out = []
        for t in re.finditer(r"\s*([-+])\s*(\d[\d.]*)", c.expr):
            shown = re.search(rf"\s*{re.escape(t.group(1))}\s*\$?{re.escape(t.group(2))}(?![\d.])", c.pre)
            if shown is None:
                continue

            def opt(t=t, shown=shown):
                new_expr = c.expr[: t.start()] + c.expr[t.end() :]
                new_pre = c.pre[: shown.start()] + c.pre[shown.end() :]
                return self._recompute(c, new_expr, new_pre, {"dropped": t.group(0).strip()})
            out.append(opt)
        return out

    # -- helpers ------------------------------------------------------------------------------
    def _recompute(self, c: Computation, expr: str, pre: str | None, detail: dict):
        if pre is None:
            return None
        try:
            value = evaluate(expr)
        except NotComputable:
            return None
        if value == num(c.result) or (value < 0 <= num(c.result)):
            return None  # unchanged, or a count gone negative (no policy writes that)
        return replace(c, pre=pre, expr=expr, result=fmt(value)), detail

    def _wrong_value(self, v: Fraction) -> Fraction:
        """A plausible miscalculation: off by a little, by a digit, or by a factor of ten."""
        r = self.rng.random()
        if v.denominator != 1:
            delta = Fraction(self.rng.choice([1, 2, 5]), 10) * self.rng.choice([-1, 1])
            out = v + delta
        elif r < 0.55:
            mag = max(1, abs(v.numerator) // 10)
            out = v + self.rng.choice([-1, 1]) * self.rng.randint(1, max(2, min(9, mag)))
        elif r < 0.8 and abs(v) >= 10:
            out = v * 10 if self.rng.random() < 0.5 else Fraction(int(v / 10))
        else:
            out = v + self.rng.choice([-10, 10, -2, 2])
        if out == v or (v >= 0 > out):
            out = v + 1 + self.rng.randint(0, 3)
        return out

    def _carry_forward(self, lines: list[Line], line: int, start: int, mapping: dict[Fraction, Fraction]) -> list[str] | None:
        """Re-run every computation after the changed one with changed values substituted."""
        for i in range(line, len(lines)):
            ln = lines[i]
            first = start if i == line else 0
            for j in range(first, len(ln.parts)):
                c = ln.parts[j]
                expr, pre = c.expr, c.pre
                for k, o in reversed(list(enumerate(_operands(expr)))):
                    if num(o) in mapping:
                        new = mapping[num(o)]
                        expr = _replace_nth_number(expr, k, fmt(new))
                        pre = _replace_visible_number(pre, num(o), fmt(new)) or pre
                if expr == c.expr:
                    continue
                try:
                    value = evaluate(expr)
                except NotComputable:
                    return None
                if value != num(c.result):
                    mapping[num(c.result)] = value
                ln.parts[j] = replace(c, expr=expr, pre=pre, result=fmt(value))
            ln.tail = self._substitute(ln.tail, mapping)
        return [ln.render() for ln in lines]

    @staticmethod
    def _substitute(text: str, mapping: dict[Fraction, Fraction]) -> str:
        if not mapping:
            return text
        return NUMBER.sub(lambda m: fmt(mapping[num(m.group(1))]) if num(m.group(1)) in mapping else m.group(0), text)
