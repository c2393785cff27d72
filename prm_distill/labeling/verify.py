"""Answer anchoring: check a trajectory's final answer against the gold answer with math-verify,
then apply consensus rules between that verdict and the step labels.

Step judges can be fooled by confident prose; a wrong final answer is hard evidence that some step
is bad. math-verify (Hugging Face) parses LaTeX and plain answers into sympy and compares them;
it is an optional dependency, imported only when anchoring is on.
"""

from __future__ import annotations

from ..records import Trajectory
from .config import AnchorConfig


def _math_verify():
    try:
        import math_verify
    except ImportError:
        raise RuntimeError("answer anchoring (anchor.enabled=true) needs the math-verify package: pip install math-verify") from None
    return math_verify


def final_answer_correct(steps: list[str], gold: str) -> bool | None:
    """True/False when the last step states an answer math-verify can compare with `gold`, None when it states none."""
    mv = _math_verify()
    gold_parsed = mv.parse(str(gold))
    pred = mv.parse(steps[-1])
    if not pred or not gold_parsed:
        return None
    return bool(mv.verify(gold_parsed, pred))


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
