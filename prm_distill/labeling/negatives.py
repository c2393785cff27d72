"""Hard negatives with labelled provenance, made from already labelled records.

A judge (and so the distilled PRM) tends to reward long, earnest-looking solutions. Copies padded
with redundant or wandering steps (those steps labelled 0) teach that more steps earn nothing; a
copy with one number changed (that step 0, later steps unsupervised, since nothing is known about
them) teaches the "looks right, is off" boundary. The choice is seeded per record id, so a resumed
job makes the same negatives.
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any

from ..records import Trajectory
from .config import NegativesConfig

_WANDERING = (
    "Before going on, it is worth recalling that addition is commutative, so the order of the numbers never matters.",
    "Let me also think about whether the problem would be easier if all the quantities were doubled.",
    "It is interesting to note that many everyday problems can be described with simple arithmetic.",
    "Let me restate the question in my own words to be sure I have read it carefully.",
)
_NUMBER = re.compile(r"(?<![\w.])\d+(?![\w]|\.\d)")


def _rng(cfg: NegativesConfig, rid: str, kind: str) -> random.Random:
    return random.Random(int(hashlib.sha256(f"{cfg.seed}:{kind}:{rid}".encode()).hexdigest()[:16], 16))


def _base(r: Trajectory, kind: str, steps: list[str], labels: list[float | None], votes: list[list[float]], **prov) -> Trajectory:
    judge: dict[str, Any] = {k: r.judge[k] for k in ("mode", "prompt_version", "judges") if r.judge and k in r.judge}
    meta = {**r.metadata, "hard_negative": {"kind": kind, "source_id": r.id, **prov}}
    return Trajectory(id=f"{r.id}~{kind}", question=r.question, steps=steps, labels=labels, votes=votes,
                      judge={**judge, "hard_negative": kind}, outcome=r.outcome, metadata=meta)


def padded(r: Trajectory, cfg: NegativesConfig) -> Trajectory:
    """A copy with 1..max_inserted redundant (an earlier step restated) or wandering steps, each labelled 0."""
    rng = _rng(cfg, r.id, "padded")
    steps, labels = list(r.steps), list(r.labels or [None] * len(r.steps))
    votes = [list(v) for v in (r.votes or [[] for _ in r.steps])]
    inserted: list[int] = []
    for _ in range(rng.randint(1, cfg.max_inserted)):
        pos = rng.randint(1, len(steps))
        kind = rng.choice(("redundant", "wandering"))
        text = f"As said before: {rng.choice(steps[:pos]).strip()}" if kind == "redundant" else rng.choice(_WANDERING)
        steps.insert(pos, text)
        labels.insert(pos, 0.0)
        votes.insert(pos, [])
        inserted = [i + (i >= pos) for i in inserted] + [pos]
    return _base(r, "padded", steps, labels, votes, inserted_steps=sorted(inserted))


def injected_error(r: Trajectory, cfg: NegativesConfig) -> Trajectory | None:
    """A copy whose chosen step has one number changed: label 0 there, later steps unsupervised.
    Prefers steps judged good (a changed number in a bad step teaches nothing new); None when no
    step holds a number."""
    rng = _rng(cfg, r.id, "error")
    labels = r.labels or [None] * len(r.steps)
    with_numbers = [k for k, s in enumerate(r.steps) if _NUMBER.search(s)]
    good = [k for k in with_numbers if (lab := labels[k]) is not None and lab >= 0.5]
    if not with_numbers:
        return None
    k = rng.choice(good or with_numbers)
    matches = list(_NUMBER.finditer(r.steps[k]))
    m = rng.choice(matches)
    old = int(m.group(0))
    new = old + rng.choice([d for d in (-2, -1, 1, 2, 10) if old + d >= 0])
    step = r.steps[k][: m.start()] + str(new) + r.steps[k][m.end():]
    steps = r.steps[:k] + [step] + r.steps[k + 1:]
    new_labels = list(labels[:k]) + [0.0] + [None] * (len(steps) - k - 1)
    votes = [list(v) for v in (r.votes or [[] for _ in r.steps])[:k]] + [[] for _ in steps[k:]]
    return _base(r, "injected_error", steps, new_labels, votes, error_step=k, changed=f"{old}->{new}")


def hard_negatives(r: Trajectory, cfg: NegativesConfig) -> list[Trajectory]:
    out = []
    if _rng(cfg, r.id, "pick-padded").random() < cfg.padded_rate:
        out.append(padded(r, cfg))
    if _rng(cfg, r.id, "pick-error").random() < cfg.error_rate and (neg := injected_error(r, cfg)) is not None:
        out.append(neg)
    return out
