"""Checks that refute a step: arithmetic in plain text and symbolic statements in LaTeX or plain math.

The write-up's "LLM + verifier" form: a learned score is noisy, a false equation is not. The
verifier only ever refutes: a step with a statement that is false gets a score of at most the
rule's cap; a step with nothing checkable, or only true statements, keeps its score exactly.
Labeling votes with the same checks (a veto) and scoring caps with them, so both read the same
statements the same way.

Checked: `12 + 5 = 17`, `4 x 6 = 24` (`statements`, which the data builder marks too), chains
`$\\sqrt{144+81}=\\sqrt{225}=15$`, `\\frac{3}{4} \\cdot 8 = 6`, and a one-variable implication
`2x + 3 = 7 \\Rightarrow x = 2` (the solution substituted back). Anything else (units in the
expression, inequalities, equations to solve, text, unbalanced LaTeX, huge numbers) is "not
checkable", never an error, and the time spent on one step is bounded.
"""

from __future__ import annotations

import ast
import functools
import re
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Sequence

VERIFIER_KIND = "statements"
DEFAULT_CAP = 0.1
STEP_BUDGET_S = 2.0  # time allowed for the checks of one step; later statements are not checkable
_MAX_DIGITS = 18
_MAX_EXPONENT = 64
_MAX_LEN = 240


@dataclass(frozen=True)
class Check:
    statement: str
    holds: bool


# -- plain-text arithmetic: what a statement is ------------------------------------------------
# One definition for the verifier (`arithmetic`) and the data builder (`data.perturb.mark_statements`):
# both must read the same text as the same statements, or a builder variant's error is one the
# verifier cannot see (or a correct step it refutes).
NUMBER = r"(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?"  # thousands commas only in groups of three
_OP = r"[-+x×*/÷]"
_TERM = rf"\$?-?{NUMBER}"  # `$` is currency here (callers drop LaTeX `$` delimiters first)
# A statement starts at a number that does not continue an expression (`24 cups * 1/12 = 2` holds
# no statement `1/12 = 2`, nor `3 \times 4 + 2 = 14` one `4 + 2 = 14`) or a chain (`5 * 4 = 20 + 3
# = 23`: the part after a number's `=` is a running total, not a claim; `Total = 3 + 4 = 7` is
# one), and ends where the expression ends: a right side followed by more expression
# (`6 * 2 = 10 + 2`) or a question (`...?`) claims nothing.
_STATEMENT = re.compile(
    r"(?<![\w.^{}$\\*/+×÷=(-])(?<!\d,)(?<![*/+×÷(-]\s)(?<!\bx\s)(?<!\\times\s)(?<!\\cdot\s)(?<!\\div\s)"
    r"(?<![\d)]=)(?<![\d)]\s=)(?<![\d)]=\s)(?<![\d)]\s=\s)"
    rf"(?P<expr>{_TERM}(?:\s*{_OP}\s*{_TERM})+)\s*=\s*\$?(?P<result>-?{NUMBER})"
    rf"(?![\w]|\.\d|,\d|\s*[{_OP[1:-1]}^(?])"
)


@dataclass(frozen=True)
class Statement:
    """A plain-text arithmetic statement `a op b ... = c` (operators + - * / x × ÷, each number
    optionally negative and after a `$`, thousands commas in groups of three)."""

    span: tuple[int, int]  # the whole statement in the text
    expr: str  # the left side as written
    result: str  # the written right side: sign and commas kept, no `$`
    result_span: tuple[int, int]  # where the written result stands (after any `$`): a mark goes there

    @property
    def expression(self) -> str:
        """The left side in + - * / for `evaluate` (x, × and ÷ read as * and /; `$` and commas dropped)."""
        return re.sub(r"[x×]", "*", self.expr).replace("÷", "/").replace("$", "").replace(",", "")

    @property
    def value(self) -> str:
        """The written result as a plain number (`1,500` -> `1500`)."""
        return self.result.replace(",", "")


def statements(text: str) -> list[Statement]:
    """Every arithmetic statement of plain text: the one reading shared by the verifier and the data builder."""
    return [Statement(m.span(), m.group("expr"), m.group("result"), m.span("result")) for m in _STATEMENT.finditer(text)]


_SCALE_WORDS = re.compile(r"\b(hundred|thousand|million|billion)s?\b", re.I)
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_SCALES = {Fraction(10) ** k for k in (2, 3, 6, 9)}
_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b}


class NotComputable(ValueError):
    """An expression outside + - * / on numbers (or a division by zero)."""


def _value(node: ast.AST) -> Fraction:
    """Exact value of a parsed + - * / expression on numbers: the one arithmetic evaluator (the
    verifier checks statements with it, the data builder computes GSM8K annotations with it)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _value(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        a, b = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Div) and b == 0:
            raise NotComputable("division by zero")
        return _OPS[type(node.op)](a, b)
    raise NotComputable("not arithmetic")


def evaluate(expr: str) -> Fraction:
    """Exact value of an arithmetic expression (+ - * / and parentheses; x, × and ÷ read as * and /,
    thousands commas dropped), or NotComputable."""
    try:
        node = ast.parse(expr.replace("x", "*").replace("×", "*").replace("÷", "/").replace(",", ""), mode="eval").body
    except SyntaxError:
        raise NotComputable(expr) from None
    return _value(node)


def _close(left: Fraction, written: str) -> bool:
    """A right side written with d decimals holds when it equals the left side rounded to d decimals
    (10 / 3 = 3.33); an integer right side of a non-integer left side is read as rounding."""
    right = Fraction(written)
    if "." in written:
        return abs(left - right) <= Fraction(1, 2 * 10 ** len(written.split(".")[1]))
    if left.denominator != 1:
        return abs(left - right) <= Fraction(1, 2)
    return left == right


def _close_as_fractions(expr: str, rhs: str) -> bool:
    """`2000 / 2/3 = 3000`: a written fraction (no spaces) read as one number."""
    grouped = re.sub(r"(?<![\d.])(\d+/\d+)(?![\d.])", r"(\1)", expr)
    if grouped == expr:
        return False
    try:
        return _close(_value(ast.parse(grouped, mode="eval").body), rhs)
    except (ValueError, SyntaxError, ZeroDivisionError, RecursionError):
        return False


def arithmetic(text: str) -> list[Check]:
    """Plain-text equations of numbers (`a op b ... = c`, see `statements`), each checked."""
    text = _THOUSANDS.sub("", text)
    scaled = bool(_SCALE_WORDS.search(text))
    out = []
    for st in statements(text):
        expr, rhs = st.expression, st.value
        try:
            left = _value(ast.parse(expr, mode="eval").body)
        except (ValueError, SyntaxError, ZeroDivisionError, RecursionError):
            continue
        holds = _close(left, rhs) or _close_as_fractions(expr, rhs)
        if not holds and scaled and left and (Fraction(rhs) / left) in _SCALES:
            continue  # "5 thousand dollars ... 5 * 3 = $15,000": the words carry the scale
        out.append(Check(text[st.span[0] : st.span[1]], holds))
    return out


# -- symbolic (LaTeX or plain math) -------------------------------------------------------------
_MATH = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_IMPLIES = re.compile(r"\\(?:Rightarrow|implies|Longrightarrow|therefore)|=>|⇒")
_UNCHECKABLE = re.compile(
    r"\\(?:le|ge|leq|geq|neq|ne|lt|gt|approx|sim|equiv|pm|mp|text|mathrm|operatorname|mbox|in|cup|cap|infty|sum|prod|int|lim|log|ln|sin|cos|tan"
    r"|binom|choose|angle|circ|deg)\b|[<>≤≥≠≈%!]|\\%|\\,\\!"
)
_SAFE = re.compile(r"^[0-9a-z+\-*/(). ]+$")


def _braced(s: str, i: int) -> tuple[str, int]:
    """The content of the {...} group starting at s[i] (or the single next character) and the index after it."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s):
        raise ValueError("missing argument")
    if s[i] != "{":
        return s[i], i + 1
    depth = 0
    for j in range(i, len(s)):
        depth += s[j] == "{"
        depth -= s[j] == "}"
        if depth == 0:
            return s[i + 1 : j], j + 1
    raise ValueError("unbalanced braces")


def latex_to_expr(s: str) -> str:
    """A LaTeX or plain expression as a whitelisted plain expression; ValueError when it is not one."""
    s = s.strip().rstrip(".,;:")
    if len(s) > _MAX_LEN or _UNCHECKABLE.search(s):
        raise ValueError("not checkable")
    for a, b in ((r"\left", ""), (r"\right", ""), (r"\cdot", "*"), (r"\times", "*"), (r"\div", "/"), ("×", "*"), ("÷", "/"),
                 ("−", "-"), (r"\,", ""), (r"\;", ""), (r"\!", ""), (r"\ ", ""), (r"\quad", ""), (r"\$", ""), ("{,}", "")):
        s = s.replace(a, b)
    s = re.sub(r"(\d)\s*(\\[dt]?frac)", r"\1+\2", s)  # a mixed number: 1825\frac{1}{3}
    out, i = [], 0
    while i < len(s):
        if s.startswith(("\\frac", "\\dfrac", "\\tfrac"), i):
            i = s.index("frac", i) + 4
            num, i = _braced(s, i)
            den, i = _braced(s, i)
            out.append(f"(({latex_to_expr(num)})/({latex_to_expr(den)}))")
        elif s.startswith("\\sqrt", i):
            i += 5
            if i < len(s) and s[i] == "[":
                raise ValueError("n-th roots are not checked")
            arg, i = _braced(s, i)
            out.append(f"sqrt({latex_to_expr(arg)})")
        elif s[i] == "^":
            run = re.match(r"\s*(\d+)", s[i + 1 :])
            if run:  # `2^13` is written for 2^{13}
                arg, i = run.group(1), i + 1 + run.end()
            else:
                arg, i = _braced(s, i + 1)
            out.append(f"**({latex_to_expr(arg)})")
        elif s[i] == "\\":
            raise ValueError("unknown command")
        elif s[i] in "{}":
            out.append("(" if s[i] == "{" else ")")
            i += 1
        else:
            out.append(s[i])
            i += 1
    expr = _THOUSANDS.sub("", "".join(out)).replace("[", "(").replace("]", ")")
    if not _SAFE.match(expr.replace("**", "*").replace("sqrt", "")) or re.search(r"[a-z]{2,}", expr.replace("sqrt", "")):
        raise ValueError("not a plain expression")
    if any(len(d) > _MAX_DIGITS for d in re.findall(r"\d+", expr)):
        raise ValueError("number too large")
    for e in re.findall(r"\*\*\(?\s*-?(\d+(?:\.\d+)?)", expr):
        if float(e) > _MAX_EXPONENT:
            raise ValueError("exponent too large")
    if expr.count("(") != expr.count(")"):
        raise ValueError("unbalanced parentheses")
    return expr


@functools.lru_cache(maxsize=1)
def _warm_up() -> None:
    _sympify("2*x+1")


def _sympify(expr: str):
    from sympy.parsing.sympy_parser import implicit_multiplication_application, parse_expr, standard_transformations

    return parse_expr(expr, transformations=standard_transformations + (implicit_multiplication_application,), evaluate=True)


def _equal(a, b, written: str) -> bool | None:
    """True/False for two constant expressions; None when either has a symbol or is not finite."""
    if a.free_symbols or b.free_symbols:
        return None
    da, db = complex(a.evalf(30)), complex(b.evalf(30))
    if any(v != v or abs(v) == float("inf") for v in (da, db)) or da.imag or db.imag:
        return None
    m = re.fullmatch(r"\s*-?\d+\.(\d+)\s*", written)
    tol = 0.5 * 10 ** -len(m.group(1)) if m else 1e-9 * max(1.0, abs(da.real))
    return abs(da.real - db.real) <= tol + 1e-12


def symbolic(text: str, deadline: float | None = None) -> list[Check]:
    """Equalities inside math segments ($...$, \\(...\\), \\[...\\]): constant chains and one-variable implications."""
    out: list[Check] = []
    for m in _MATH.finditer(text):
        segment = next(g for g in m.groups() if g is not None)
        if text[m.end() : m.end() + 2].strip().startswith("?"):
            continue  # a question claims nothing
        parts = _IMPLIES.split(segment)
        for k, part in enumerate(parts):
            if deadline is not None and time.monotonic() > deadline:
                return out
            sides = part.split("=")
            if len(sides) < 2:
                continue
            try:
                plain = [latex_to_expr(x) for x in sides]
                exprs = [_sympify(x) for x in plain]
            except Exception:  # noqa: BLE001 - odd text is "not checkable", never an error
                continue
            # a side with a letter is not a constant, even where it evaluates to one (`p(0)` is p*0 to sympy)
            constant = [not re.search(r"[a-z]", x.replace("sqrt", "")) for x in plain]
            for a, b, written, both in zip(exprs, exprs[1:], sides[1:], (c1 and c2 for c1, c2 in zip(constant, constant[1:]))):
                if not both:
                    continue
                try:
                    ok = _equal(a, b, written)
                except Exception:  # noqa: BLE001
                    ok = None
                if ok is not None:
                    out.append(Check(part.strip(), ok))
                    if not ok:
                        break
            if k > 0 and len(exprs) == 2:
                out += _implication(parts[k - 1], exprs)
    return out


def _implication(premise: str, conclusion) -> list[Check]:
    """`lhs = rhs => x = c`: substitute c into the premise; a premise that fails refutes the step."""
    import sympy

    var, value = conclusion
    if not (isinstance(var, sympy.Symbol) and not value.free_symbols):
        return []
    sides = premise.split("=")
    if len(sides) != 2:
        return []
    try:
        lhs, rhs = (_sympify(latex_to_expr(x)) for x in sides)
        if (lhs.free_symbols | rhs.free_symbols) != {var}:
            return []
        diff = complex((lhs - rhs).subs(var, value).evalf(30))
    except Exception:  # noqa: BLE001
        return []
    if diff != diff or diff.imag:
        return []
    return [Check(f"{premise.strip()} => {var} = {value}", abs(diff.real) <= 1e-9)]


def check_step(text: str, budget_s: float = STEP_BUDGET_S) -> list[Check]:
    """Every checkable statement of one step (plain arithmetic and symbolic), within a time budget."""
    # Plain equations are read with every `$` dropped: `$` is currency as often as a LaTeX
    # delimiter, and an equation inside $...$ read both ways gets the same verdict twice.
    plain = arithmetic(text.replace("\\$", "").replace("$", ""))
    if not _MATH.search(text):
        return plain
    _warm_up()  # sympy's first parse is slow: not counted in the step's budget

    deadline = time.monotonic() + budget_s
    try:
        return plain + symbolic(text, deadline)
    except RecursionError:
        return plain


def refuted(text: str) -> bool:
    """True when some statement of the step is false."""
    return any(not c.holds for c in check_step(text))


# -- the scoring rule stored in a checkpoint ---------------------------------------------------------
def rule(cap: float = DEFAULT_CAP) -> dict[str, Any]:
    """The sidecar's `verifier` field for the composition this module applies."""
    if not 0.0 <= cap <= 1.0:
        raise ValueError(f"verifier cap must be in [0, 1], got {cap}")
    return {"kind": VERIFIER_KIND, "cap": float(cap)}


def validate_rule(r: Any, where: str = "verifier") -> None:
    if r is None:
        return
    if not isinstance(r, dict) or r.get("kind") != VERIFIER_KIND or not isinstance(r.get("cap"), (int, float)) or not 0.0 <= r["cap"] <= 1.0:
        raise ValueError(f"{where}: expected {{'kind': '{VERIFIER_KIND}', 'cap': <number in [0, 1]>}}, got {r!r}")


def apply_rule(r: dict[str, Any] | None, items: Sequence[tuple[str, Sequence[str]]], scores: Sequence[Sequence[float]]) -> list[list[float]]:
    """Scores with the rule applied: a refuted step gets min(score, cap); every other score is unchanged."""
    if r is None:
        return [list(s) for s in scores]
    cap = float(r["cap"])
    return [[min(s, cap) if refuted(step) else s for step, s in zip(steps, ss)] for (_, steps), ss in zip(items, scores)]
