"""Map the policy's output tokens onto reasoning steps, exactly.

The PRM scores steps (character spans of the decoded response, from the shared splitter); the
trainer needs one reward per output token. Two facts make a naive mapping wrong:
- a byte-level BPE token can hold part of a UTF-8 character, so `decode([t])` of single tokens
  does not concatenate to the text;
- a token can straddle a step boundary (" Then" = the gap's space + the next step's first word).

Offsets therefore come from decoding cumulative prefixes (incrementally, from the last point where
the text was complete, as streaming detokenizers do), and tokens are assigned by this rule:

1. A token that completes characters belongs to the step that owns its *last* character.
2. Step k owns its own characters and the whitespace gap after it (up to the next step's start);
   the first step also owns any leading whitespace. So whitespace-only tokens between steps go to
   the preceding step, the token that closes a step carries that step, and a straddling token
   (gap + next step's start) belongs to the next step.
3. A token that completes no character (the leading bytes of a multi-byte character, or a special
   token such as EOS, which decodes to nothing) joins the next token that completes characters;
   trailing ones join the last step.

Steps are separated by whitespace, so every step owns at least the token completing its last
non-space character, unless one token runs from inside a step across the gap into the next (no
common BPE vocabulary has such tokens); that step then owns no token and its score is not placed.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

# What a decode of an incomplete UTF-8 sequence ends with; text is held back until it completes.
_INCOMPLETE = "\ufffd"


class AlignmentError(ValueError):
    """The policy tokenizer's output cannot be mapped onto characters exactly."""


def decode_with_offsets(tokenizer: Any, ids: Sequence[int]) -> tuple[str, list[int]]:
    """(text, ends): text = decode(ids) without special tokens; token i produced text[ends[i-1]:ends[i]].

    Each step decodes the tokens since the last complete point (with the previous chunk as left
    context, so tokenizers that strip a leading space at the start of a decode stay consistent),
    which costs O(1) short decodes per token instead of O(n) for every full prefix.
    """
    ids = [int(i) for i in ids]

    def decode(chunk: Sequence[int]) -> str:
        return tokenizer.decode(chunk, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    text, ends = "", []
    prefix, read, prefix_text = 0, 0, ""
    for i in range(len(ids)):
        new = decode(ids[prefix : i + 1])
        if len(new) > len(prefix_text) and not new.endswith(_INCOMPLETE):
            if not new.startswith(prefix_text):
                raise AlignmentError(f"decoding is not prefix-stable at token {i} (id {ids[i]})")
            text += new[len(prefix_text) :]
            prefix, read = read, i + 1
            prefix_text = decode(ids[prefix:read])
        ends.append(len(text))
    full = decode(ids)
    if not full.startswith(text):
        raise AlignmentError("incremental decoding disagrees with decoding the whole response")
    if ends and len(full) > len(text):
        ends[-1] = len(full)  # a trailing incomplete character: the last token produced it
    return full, ends


def assign_tokens_to_steps(ends: Sequence[int], step_spans: Sequence[tuple[int, int]]) -> list[int]:
    """The step index of every token (see the module docstring for the rule)."""
    if not step_spans:
        raise AlignmentError("no steps to assign tokens to")
    starts = [start for start, _ in step_spans]
    steps: list[int | None] = []
    previous_end = 0
    for end in ends:
        if end > previous_end:
            steps.append(max(bisect_right(starts, end - 1) - 1, 0))
        else:
            steps.append(None)
        previous_end = end
    following = len(step_spans) - 1
    for i in range(len(steps) - 1, -1, -1):
        if steps[i] is None:
            steps[i] = following
        else:
            following = steps[i]
    return steps  # type: ignore[return-value]
