"""Read a judge's verdict out of free text: JSON first, then "Score: x" style lines.

A verdict off the {0, 0.5, 1} scale or one that cannot be found is invalid (None): it is counted
and re-asked, never rounded or guessed into a score, because a coerced vote is a silent label error.
"""

from __future__ import annotations

import json
import re
from typing import Any

SCALE = (0.0, 0.5, 1.0)
_NUM = r"([0-9]*\.?[0-9]+)"
_SCORE_LINE = re.compile(r"(?im)score\W{0,3}\s*[:=]\s*\**\s*" + _NUM + r"[\s*.)]*$")
_STEP_SCORE_LINE = re.compile(r"(?im)^\W*step\s*(\d+)\b[^\n]*?score\W{0,3}\s*[:=]\s*\**\s*" + _NUM + r"[\s*.)]*$")
_FIRST_ERROR = re.compile(r"(?im)first\s+error\W{0,3}\s*(?:[:=]|is(?:\s+in|\s+at)?)\s*\**\s*(?:step\s*(\d+)|(none))\b")
_OBJECT = re.compile(r"\{[^{}]*\}")


def on_scale(value: Any) -> float | None:
    """The value as a float if it is exactly 0, 0.5 or 1 (number or numeric string), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, (int, float)) and float(value) in SCALE:
        return float(value)
    return None


def _objects(text: str) -> list[dict]:
    """Every flat JSON object in the text that parses (a truncated list still yields its complete
    items), except copies of the prompt's example, whose reason is the placeholder "..."."""
    out = []
    for m in _OBJECT.finditer(text):
        try:
            obj = json.loads(m.group(0))
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and str(obj.get("reason", "")).strip() not in ("...", "…"):
            out.append(obj)
    return out


def parse_score(text: str) -> float | None:
    """One step's score: the last JSON object with a "score", else the last "Score: x" line."""
    scored = [o for o in _objects(text) if "score" in o]
    if scored:
        return on_scale(scored[-1]["score"])
    lines = _SCORE_LINE.findall(text)
    return on_scale(lines[-1]) if lines else None


def parse_trajectory(text: str, n_steps: int) -> list[float | None]:
    """Per-step scores from a trajectory-mode answer (JSON objects {step, score}, else "Step k ... Score: x"
    lines). A step that is missing, off-scale or given two different scores is None."""
    found: dict[int, list[float | None]] = {}
    items = [o for o in _objects(text) if "score" in o]
    if items:
        for pos, o in enumerate(items, 1):
            k = o.get("step", pos)
            if isinstance(k, str) and k.strip().isdigit():
                k = int(k)
            if isinstance(k, int) and not isinstance(k, bool):
                found.setdefault(k, []).append(on_scale(o["score"]))
    else:
        for k, v in _STEP_SCORE_LINE.findall(text):
            found.setdefault(int(k), []).append(on_scale(v))
    out: list[float | None] = []
    for k in range(1, n_steps + 1):
        vals = set(found.get(k, [None]))
        out.append(vals.pop() if len(vals) == 1 else None)
    return out


def parse_first_error(text: str, n_steps: int) -> int | None:
    """0-based index of the first wrong step, -1 for none, None when invalid (missing or out of range)."""
    for o in reversed(_objects(text)):
        if "first_error" in o:
            v = o["first_error"]
            if v is None or (isinstance(v, str) and v.strip().lower() == "none"):
                return -1
            if isinstance(v, int) and not isinstance(v, bool):
                return v - 1 if 1 <= v <= n_steps else None
            return None
    hits = _FIRST_ERROR.findall(text)
    if not hits:
        return None
    step, none = hits[-1]
    if none:
        return -1
    k = int(step)
    return k - 1 if 1 <= k <= n_steps else None
