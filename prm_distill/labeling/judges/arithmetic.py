"""Rule-based arithmetic verifier "judge": checks statements like "12 + 5 = 17" or "4 x 6 = 24".

The "LLM + verifier" form: an LLM's opinion is noisy, a false equation is not. A step with at least
one checkable statement gets 1 when all hold and 0 when any fails; a step with none gets no vote.
It cannot see a wrong operand or a wrong operation whose arithmetic is right, so alone it labels
only what it can check.
"""

from __future__ import annotations

import ast
import re
from fractions import Fraction

NAME = "arithmetic-verifier"
_NUM = r"\d+(?:\.\d+)?"
_OP = r"[-+x×*/÷]"
_STATEMENT = re.compile(rf"(?<![\w.])(-?{_NUM}(?:\s*{_OP}\s*-?{_NUM})+)\s*=\s*(-?{_NUM})(?![\w]|\.\d)")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b}


def _value(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.left), _value(node.right))
    raise ValueError("not arithmetic")


def statements(text: str) -> list[tuple[str, bool]]:
    """(statement, holds) for each arithmetic equation in the text. A right side written with d
    decimals holds when it equals the left side rounded to d decimals (10 / 3 = 3.33)."""
    text = _THOUSANDS.sub("", text)
    out = []
    for m in _STATEMENT.finditer(text):
        lhs, rhs = m.group(1), m.group(2)
        expr = re.sub(r"[x×]", "*", lhs).replace("÷", "/")
        try:
            left = _value(ast.parse(expr, mode="eval").body)
        except (ValueError, SyntaxError, ZeroDivisionError):
            continue
        decimals = len(rhs.split(".")[1]) if "." in rhs else 0
        tolerance = Fraction(1, 2 * 10**decimals) if decimals else Fraction(0)
        holds = abs(left - Fraction(rhs)) <= tolerance
        out.append((m.group(0), bool(holds)))
    return out


def verify_steps(steps: list[str]) -> list[float | None]:
    """One vote per step: 1.0 (all statements hold), 0.0 (one fails) or None (nothing to check)."""
    votes: list[float | None] = []
    for s in steps:
        checks = statements(s)
        votes.append(None if not checks else float(all(ok for _, ok in checks)))
    return votes
