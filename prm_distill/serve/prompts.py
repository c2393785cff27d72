"""Telling a rendered prompt's question and a decoded response's text apart (standard library only).

RL trainers hand the reward side text as the policy saw it: a prompt rendered with a chat template
and a response that may end with end-of-turn markers. The PRM was trained on bare questions and
steps, so `/get_reward` and the trainer adapters (`prm_distill.integrations`) strip both the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

# Chat-template markers that open the last user turn of a rendered prompt (ChatML, Llama 3, Gemma),
# and those that end a turn.
_USER_TURN = re.compile(
    r"(?:<\|im_start\|>user\s*\n|<\|start_header_id\|>user<\|end_header_id\|>\s*|<start_of_turn>user\s*\n)"
)
_TURN_END = re.compile(r"<\|im_end\|>|<\|eot_id\|>|<end_of_turn>|<\|im_start\|>|<\|start_header_id\|>")
# What a decoded response may end with when the trainer kept special tokens.
END_MARKERS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>", "</s>", "<eos>")


def prompt_question(prompt: str) -> str:
    """The question inside a rendered prompt: the last user turn of a chat template, else the prompt itself."""
    starts = list(_USER_TURN.finditer(prompt))
    if not starts:
        return prompt.strip()
    rest = prompt[starts[-1].end() :]
    end = _TURN_END.search(rest)
    return (rest[: end.start()] if end else rest).strip()


def strip_end_markers(text: str) -> str:
    """The text without trailing end-of-turn markers and whitespace."""
    stripped = text.rstrip()
    changed = True
    while changed:
        changed = False
        for marker in END_MARKERS:
            if stripped.endswith(marker):
                stripped, changed = stripped[: -len(marker)].rstrip(), True
    return stripped


def message_text(message: Any) -> str:
    """The text of a chat message (a plain string, or string content, or the text parts of OpenAI content parts)."""
    if isinstance(message, str):
        return message
    if not isinstance(message, Mapping):
        raise TypeError(f"expected a chat message mapping, got {type(message).__name__}")
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(part.get("text", "") for part in content if isinstance(part, Mapping) and part.get("type") == "text")
    raise TypeError(f"unsupported message content {content!r}")


def last_user_text(messages: Sequence[Any]) -> str | None:
    """The text of the last user message that has any (a prompt's question), or None: the one reading of a
    message list's question (TRL's rewards and stepwise rows, the RL scorer)."""
    for message in reversed(list(messages)):
        if isinstance(message, Mapping) and message.get("role") == "user" and (text := message_text(message)).strip():
            return text
    return None
