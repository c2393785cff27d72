"""The one prompt a policy sees for a problem, and its rendering for local backends.

Every backend renders the same chat, so a rollout and a Monte-Carlo completion of its prefix see the
same context. A final assistant message is a prefix to continue: local backends append it to the
rendered prompt verbatim; servers get vLLM's `continue_final_message` extension.
"""

from __future__ import annotations

from typing import Any

from .base import GenRequest

DEFAULT_INSTRUCTION = "Solve the problem step by step, one step per paragraph, and end with the line 'The answer is <number>.'"


def problem_messages(question: str, instruction: str = DEFAULT_INSTRUCTION, prefix_steps: list[str] | None = None) -> tuple[tuple[str, str], ...]:
    """The one prompt a policy sees for a problem; with `prefix_steps` the assistant has already
    written those steps (blank-line separated, as the splitter reads them) and continues."""
    msgs: list[tuple[str, str]] = [("user", f"{question.strip()}\n\n{instruction}".strip())]
    if prefix_steps:
        msgs.append(("assistant", "\n\n".join(s.strip() for s in prefix_steps) + "\n\n"))
    return tuple(msgs)


def render(tok: Any, req: GenRequest) -> str:
    """Chat template with the generation prompt, then the assistant prefix (if any) verbatim."""
    msgs = req.chat[:-1] if req.prefix is not None else req.chat
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    return str(text) + (req.prefix or "")
