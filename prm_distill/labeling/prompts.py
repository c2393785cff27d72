"""Judge prompts rendered from versioned template files (templates/<mode>.<version>.txt).

The version travels with every label, so labels made with different wordings never mix silently.
A prompt only ever holds the problem and the steps up to the one under review (prefix mode) or
the steps of the solution (trajectory, first_error): never an answer key, an outcome or metadata,
because a judge that sees the result grades the result instead of the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from string import Template

TEMPLATES = Path(__file__).with_name("templates")
VERSIONS = {"prefix": "v1", "trajectory": "v1", "first_error": "v1"}


@dataclass(frozen=True)
class Prompt:
    """One chat request to a judge. `step` is the 0-based step under review (prefix mode), else None."""

    mode: str
    version: str
    system: str
    user: str
    step: int | None = None

    @property
    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]


@lru_cache(maxsize=None)
def _template(mode: str) -> tuple[str, Template, Template]:
    if mode not in VERSIONS:
        raise ValueError(f"unknown prompt mode {mode!r}; known: {sorted(VERSIONS)}")
    version = f"{mode}.{VERSIONS[mode]}"
    text = (TEMPLATES / f"{version}.txt").read_text(encoding="utf-8")
    head, _, user = text.partition("[user]\n")
    system = head.removeprefix("[system]\n")
    return version, Template(system.strip()), Template(user.strip())


def prompt_version(mode: str) -> str:
    return _template(mode)[0]


def _numbered(steps: list[str]) -> str:
    return "\n".join(f"Step {i}: {s.strip()}" for i, s in enumerate(steps, 1))


def render(mode: str, question: str, steps: list[str], step: int | None = None) -> Prompt:
    """The prompt for `mode`; prefix mode needs `step` and sees only steps[:step + 1]."""
    version, system, user = _template(mode)
    if mode == "prefix":
        if step is None or not 0 <= step < len(steps):
            raise ValueError(f"prefix prompt needs a step index in [0, {len(steps)}), got {step!r}")
        values = {
            "question": question.strip(),
            "previous": _numbered(steps[:step]) or "(none: this is the first step)",
            "index": step + 1,
            "step": steps[step].strip(),
        }
    else:
        values = {"question": question.strip(), "steps": _numbered(steps), "n": len(steps)}
        step = None
    return Prompt(mode, version, system.substitute(values), user.substitute(values), step)


def prompts_for(mode: str, question: str, steps: list[str]) -> list[Prompt]:
    """All prompts one vote of one trajectory needs: one per step (prefix) or one for the whole solution."""
    if mode == "prefix":
        return [render(mode, question, steps, k) for k in range(len(steps))]
    return [render(mode, question, steps)]
