"""The embedded data set: seeded multi-step arithmetic word problems, labelled by construction.

A user's machine has no judge and no public data, yet the main job must train and evaluate a real
PRM offline. Each problem is a chain of everyday events (buy, give away, multiply, share); a
correct solution states one event per step. A corrupted solution goes wrong at a known step with
one of three error kinds the field sees in real rollouts: a miscalculation, a wrong number copied
from the problem, or the wrong operation. Later steps carry the wrong value forward consistently,
so the error is visible only at its own step. Labels follow ProcessBench: steps before the error
1, the error 0, later steps unsupervised.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .records import Trajectory

_NAMES = ["Mia", "Leo", "Ava", "Noah", "Zoe", "Omar", "Lena", "Ravi", "Ines", "Tom", "Yuki", "Sara"]
_ITEMS = ["apples", "marbles", "stickers", "books", "coins", "pencils", "cookies", "stamps", "shells", "cards"]
ERROR_KINDS = ("miscalculation", "wrong_operand", "wrong_operation")


@dataclass
class SyntheticConfig:
    """Size and shape of the generated data set."""

    n: int = field(default=1000, metadata={"help": "Number of trajectories to generate."})
    seed: int = field(default=0, metadata={"help": "Random seed; the same seed gives the same records."})
    min_events: int = field(default=2, metadata={"help": "Fewest events (computing steps) per problem."})
    max_events: int = field(default=5, metadata={"help": "Most events per problem."})
    corrupt_rate: float = field(default=0.5, metadata={"help": "Share of trajectories with an error at a known step."})
    id_prefix: str = field(default="syn", metadata={"help": "Prefix of record ids (keep splits disjoint)."})


def _event(rng: random.Random, value: int, item: str, name: str) -> tuple[str, str, str, int, int]:
    """(question sentence, verb phrase, op symbol, operand, new value) for one event."""
    kinds = ["buy", "give", "times"] + (["share"] if value >= 4 else [])
    kind = rng.choice(kinds)
    if kind == "buy":
        b = rng.randint(2, 30)
        return f"Then {name} buys {b} more {item}.", f"After buying {b} more", "+", b, value + b
    if kind == "give" and value > 2:
        c = rng.randint(1, value - 1)
        return f"Then {name} gives {c} {item} to a friend.", f"After giving away {c}", "-", c, value - c
    if kind == "share":
        divisors = [d for d in range(2, 7) if value % d == 0]
        if divisors:
            d = rng.choice(divisors)
            return (f"Then {name} splits the {item} equally into {d} groups and keeps one group.",
                    f"After splitting into {d} groups", "/", d, value // d)
    k = rng.randint(2, 4)
    return f"Then the number of {item} becomes {k} times as many.", f"After it becomes {k} times as many", "*", k, value * k


def _apply(op: str, a: int, b: int) -> int:
    return {"+": a + b, "-": a - b, "*": a * b, "/": a // b if b else a}[op]


def make_trajectory(rng: random.Random, idx: int, cfg: SyntheticConfig) -> Trajectory:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    start = rng.randint(3, 40)
    events, value = [], start
    for _ in range(rng.randint(cfg.min_events, cfg.max_events)):
        ev = _event(rng, value, item, name)
        events.append(ev)
        value = ev[4]
    question = f"{name} has {start} {item}. " + " ".join(e[0] for e in events)
    question += f" How many {item} does {name} have now?"

    n_steps = len(events) + 2  # start, one per event, answer
    corrupt_at = rng.randrange(0, n_steps - 1) if rng.random() < cfg.corrupt_rate else -1
    kind = rng.choice(ERROR_KINDS) if corrupt_at >= 0 else None

    steps, labels = [], []
    cur = start
    if corrupt_at == 0:
        cur = start + rng.choice([-3, -2, -1, 1, 2, 3]) if start > 3 else start + rng.randint(1, 3)
        kind = "wrong_operand"
    steps.append(f"{name} starts with {cur} {item}.")
    for j, (_, phrase, op, operand, _) in enumerate(events, start=1):
        a, b, shown_op = cur, operand, op
        if j == corrupt_at:
            if kind == "wrong_operand":
                b = operand + rng.choice([-2, -1, 1, 2]) if operand > 2 else operand + rng.randint(1, 3)
                phrase = phrase.replace(str(operand), str(b), 1)
            elif kind == "wrong_operation":
                shown_op = {"+": "-", "-": "+", "*": "+", "/": "*"}[op]
        result = _apply(shown_op, a, b)
        if j == corrupt_at and kind == "miscalculation":
            result += rng.choice([-3, -2, -1, 1, 2, 3, 10])
        sym = {"*": "x"}.get(shown_op, shown_op)
        steps.append(f"{phrase}, {name} has {a} {sym} {b} = {result} {item}.")
        cur = result
    steps.append(f"The answer is {cur}.")

    for i in range(n_steps):
        labels.append(1.0 if corrupt_at < 0 or i < corrupt_at else (0.0 if i == corrupt_at else None))
    return Trajectory(
        id=f"{cfg.id_prefix}-{idx}",
        question=question,
        steps=steps,
        labels=labels,
        outcome=1.0 if corrupt_at < 0 else 0.0,
        metadata={"source": "synthetic", "error_kind": kind, "error_step": corrupt_at, "answer": value},
    )


def generate(cfg: SyntheticConfig | None = None) -> list[Trajectory]:
    cfg = cfg or SyntheticConfig()
    if not 1 <= cfg.min_events <= cfg.max_events:
        raise ValueError("SyntheticConfig: 1 <= min_events <= max_events is required")
    if not 0.0 <= cfg.corrupt_rate <= 1.0:
        raise ValueError("SyntheticConfig: corrupt_rate must be in [0, 1]")
    rng = random.Random(cfg.seed)
    return [make_trajectory(rng, i, cfg) for i in range(cfg.n)]
