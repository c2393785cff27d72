"""Rule-based arithmetic verifier "judge": checks statements like "12 + 5 = 17" or "4 x 6 = 24".

The "LLM + verifier" form: an LLM's opinion is noisy, a false equation is not. A step with at least
one checkable statement is checked 1 when all hold and 0 when any fails, a step with none None.
It cannot see a wrong operand or a wrong operation whose arithmetic is right, so in votes it only
refutes: a 0 vetoes the step, a 1 casts no vote (the labeler applies this; alone it labels only what
it can check).
"""

from __future__ import annotations

from ...verify import arithmetic, check_step

NAME = "arithmetic-verifier"


def statements(text: str) -> list[tuple[str, bool]]:
    """(statement, holds) for each plain-text arithmetic equation (`prm_distill.verify`, the same
    reading as the scoring rule). A right side written with d decimals holds when it equals the left
    side rounded to d decimals (10 / 3 = 3.33)."""
    return [(c.statement, c.holds) for c in arithmetic(text)]


def verify_steps(steps: list[str]) -> list[float | None]:
    """One check per step (plain arithmetic and symbolic statements): 1.0 (all hold), 0.0 (one fails)
    or None (nothing to check)."""
    votes: list[float | None] = []
    for s in steps:
        checks = check_step(s)
        votes.append(None if not checks else float(all(c.holds for c in checks)))
    return votes
