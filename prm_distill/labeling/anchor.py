"""Answer anchoring: check a trajectory's final answer against the gold answer with math-verify,
then apply consensus rules between that verdict and the step labels.

Step judges can be fooled by confident prose; a wrong final answer is hard evidence that some step
is bad. math-verify (Hugging Face) parses LaTeX and plain answers into sympy and compares them;
it is an optional dependency, imported only when anchoring is on.
"""

from __future__ import annotations

from ..records import Trajectory
from .config import AnchorConfig


def final_answer_correct(steps: list[str], gold: str) -> bool | None:
    """True/False when the last step states an answer that can be compared with `gold` (through
    `prm_distill.answers`, the package's one answer checker), None when it states none."""
    from ..answers import extract_answer, same_answer

    g, pred = extract_answer(str(gold)), extract_answer(steps[-1])
    if g is None or pred is None:
        return None
    return same_answer(g, pred)


def anchor(r: Trajectory, cfg: AnchorConfig) -> tuple[Trajectory | None, bool | None]:
    """(record after the rules or None when dropped, answer verdict). Records without `answer` in metadata pass unchanged."""
    gold = r.metadata.get("answer")
    if gold is None:
        return r, None
    ok = final_answer_correct(r.steps, gold)
    if ok is None:
        return r, None
    r.metadata["answer_correct"] = ok
    if r.outcome is None:
        r.outcome = float(ok)
    labels = r.labels or []
    judged = [lab for lab in labels if lab is not None]
    if not ok and "drop_wrong_all_good" in cfg.rules and judged and all(lab >= cfg.good_threshold for lab in judged):
        return None, ok  # the judges missed the error that the wrong answer proves
    if not ok and "zero_last_step_if_wrong" in cfg.rules and labels:
        labels[-1] = 0.0
    return r, ok
