"""Shared inputs of the select tests: rollouts of three problems with gold answers, in the format
`prm-distill rollout` writes (some with `steps`, some with a raw `response`), plus two bad lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

Q1 = "Tom has 3 apples and buys 4 more. How many apples does he have?"
Q2 = "What is 6 times 7?"
Q3 = "What is 10 minus 4?"

# Correctness by hand: Q1 gold 7 -> [wrong, right, wrong, right]; Q2 gold 42 -> [right, wrong]; Q3 one sample.
ROLLOUTS = [
    {"id": "q1-a", "question": Q1, "steps": ["He starts with 3 apples.", "3 + 4 = 8.", "The answer is 8."], "answer": "#### 7"},
    {"id": "q1-b", "question": Q1, "steps": ["He starts with 3 apples.", "3 + 4 = 7.", "The answer is 7."], "answer": "#### 7"},
    {"id": "q1-c", "question": Q1, "response": "Step 1: He buys 4 apples.\nStep 2: 4 + 4 = 8.\nStep 3: The answer is 8.", "answer": "#### 7"},
    {"id": "q1-d", "question": Q1, "steps": ["3 apples plus 4 apples.", "That makes 7 apples in all.", "The answer is \\boxed{7}."], "answer": "#### 7"},
    {"id": "q2-a", "question": Q2, "steps": ["6 * 7 = 42.", "The answer is 42."], "answer": "42"},
    {"id": "q2-b", "question": Q2, "steps": ["6 * 7 = 36.", "The answer is 36."], "answer": "42"},
    {"id": "q3-a", "question": Q3, "steps": ["10 - 4 = 6.", "The answer is 6."], "answer": "6"},
]
BAD_LINES = ['{"id": "bad-1", "steps": ["no question here"]}', "{not json"]


def write_lines(path: Path, records: list, extra: list[str] = ()) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "".join(line + "\n" for line in extra))
    return path


@pytest.fixture
def rollouts(tmp_path) -> Path:
    """ROLLOUTS with the two bad lines after the first record (file lines 2 and 3)."""
    lines = [json.dumps(ROLLOUTS[0]), *BAD_LINES, *(json.dumps(r) for r in ROLLOUTS[1:])]
    path = tmp_path / "rollouts.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="session")
def select_engine(tiny_checkpoint):
    from prm_distill.serve import PRMEngine

    return PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
