"""THE one place that turns (question, steps) into token ids and step-tag positions.

Training, evaluation, serving and the scorer all call `StepEncoder.encode`, so the ids a model
was trained on are the ids it is scored on. The question and each step are tokenised separately
(no special tokens) and one step-tag token is appended after every step; strings are never joined
and re-tokenised, because BPE merges across a joined boundary change the ids (a public PRM lost
about 4 F1 points to that mismatch).

With a causal backbone the hidden state at step k's tag has seen exactly the question and steps
1..k, so one forward pass gives every step's context-prefixed score.

Two layouts: `tagged` (ours: the question plus "\n", each step followed by one step-tag token) and `trl`
(the sequence TRL's PRMTrainer trained on, for checkpoints it made: BOS when the tokenizer has one, the
question as given, each step followed by the ids of its step separator, scored at the separator's last
token). Everything else (windows, truncation) is the same code.

Windows: a trajectory longer than `max_length` tokens is cut into windows. Each window holds the
question, then preceding steps as context (up to `context_fraction` of the room left after the
question), then as many new steps as fit; only the new steps are scored in that window, so every
step is scored exactly once. Oversized parts are truncated, never dropped (documented in README):
the question keeps its first `max_question_tokens` tokens, and a step that alone does not fit
keeps its last tokens (its tag included). `EncodedTrajectory.truncated` records that it happened.
"""

from __future__ import annotations

from dataclasses import dataclass

ENCODING_VERSION = 1
DEFAULT_STEP_TAG = "<|step|>"
QUESTION_SUFFIX = "\n"
LAYOUTS = ("tagged", "trl")


class EncodingError(ValueError):
    """The input or the tokenizer cannot be encoded the way the model expects."""


@dataclass(frozen=True)
class Window:
    """One model input: ids, the positions of the tags scored in it, and which steps they are."""

    input_ids: list[int]
    tag_positions: list[int]
    step_indices: list[int]


@dataclass(frozen=True)
class EncodedTrajectory:
    windows: list[Window]
    n_steps: int
    truncated: bool

    @property
    def n_tokens(self) -> int:
        return sum(len(w.input_ids) for w in self.windows)


def ensure_step_tag(tokenizer, step_tag: str = DEFAULT_STEP_TAG) -> int:
    """The id of `step_tag`, adding it as a special token when the vocabulary lacks it.

    Returns the id; the caller must resize the model's embeddings when the vocabulary grew.
    """
    if not step_tag:
        raise EncodingError("step_tag must be a non-empty string")
    ids = tokenizer.encode(step_tag, add_special_tokens=False)
    if len(ids) != 1:
        tokenizer.add_special_tokens({"additional_special_tokens": [step_tag]}, replace_extra_special_tokens=False)
        ids = tokenizer.encode(step_tag, add_special_tokens=False)
    if len(ids) != 1:
        raise EncodingError(f"step tag {step_tag!r} is not a single token even after adding it ({ids})")
    return ids[0]


class StepEncoder:
    """Encode trajectories for a token-classification PRM (see the module docstring)."""

    def __init__(
        self,
        tokenizer,
        step_tag_id: int,
        max_length: int = 2048,
        max_question_tokens: int | None = None,
        context_fraction: float = 0.5,
        layout: str = "tagged",
        tag_ids: list[int] | None = None,
    ):
        """`layout` trl: `tag_ids` are the step separator's ids (ending in `step_tag_id`); tagged: [step_tag_id]."""
        if layout not in LAYOUTS:
            raise EncodingError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
        self.layout = layout
        self.tag_ids = list(tag_ids) if tag_ids else [int(step_tag_id)]
        if self.tag_ids[-1] != int(step_tag_id) or (layout == "tagged" and len(self.tag_ids) != 1):
            raise EncodingError(f"tag ids {self.tag_ids} do not end in the step tag id {step_tag_id}")
        bos = getattr(tokenizer, "bos_token_id", None)
        self.prefix = [int(bos)] if layout == "trl" and bos is not None else []
        if max_length < 8:
            raise EncodingError(f"max_length must be at least 8 tokens, got {max_length}")
        if not 0.0 <= context_fraction < 1.0:
            raise EncodingError(f"context_fraction must be in [0, 1), got {context_fraction}")
        self.tokenizer = tokenizer
        self.step_tag_id = int(step_tag_id)
        self.max_length = int(max_length)
        self.max_question_tokens = int(max_question_tokens) if max_question_tokens else self.max_length // 2
        if not 1 <= self.max_question_tokens < self.max_length:
            raise EncodingError("max_question_tokens must be between 1 and max_length - 1")
        self.context_fraction = context_fraction
        try:
            probe = tokenizer("a", add_special_tokens=False)["input_ids"]
        except Exception as e:  # noqa: BLE001 - any failure here means the tokenizer is unusable
            raise EncodingError(f"the tokenizer cannot encode text: {e}") from e
        if not probe:
            raise EncodingError("the tokenizer encodes text to no tokens")

    def _tokenize(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"]

    def encode(self, question: str, steps: list[str]) -> EncodedTrajectory:
        if not isinstance(question, str) or not question.strip():
            raise EncodingError("question must be a non-empty string")
        if not steps:
            raise EncodingError("a trajectory needs at least one step")
        for i, s in enumerate(steps):
            if not isinstance(s, str) or not s.strip():
                raise EncodingError(f"step {i} is empty")
        head = question.rstrip() + QUESTION_SUFFIX if self.layout == "tagged" else question
        tokenized = self._tokenize([head] + list(steps))
        q, truncated = self.prefix + tokenized[0], False
        if len(q) > self.max_question_tokens:
            q, truncated = q[: self.max_question_tokens], True
        room = self.max_length - len(q)
        parts = []
        for ids in tokenized[1:]:
            part = ids + self.tag_ids
            if len(part) > room:
                part, truncated = part[-room:], True
            parts.append(part)
        return EncodedTrajectory(self._windows(q, parts, room), len(parts), truncated)

    def _windows(self, q: list[int], parts: list[list[int]], room: int) -> list[Window]:
        windows, i, n = [], 0, len(parts)
        context_cap = int(room * self.context_fraction)
        while i < n:
            ctx_start, ctx_len = i, 0
            cap = min(context_cap, room - len(parts[i]))
            while ctx_start > 0 and ctx_len + len(parts[ctx_start - 1]) <= cap:
                ctx_start -= 1
                ctx_len += len(parts[ctx_start])
            ids = list(q)
            for part in parts[ctx_start:i]:
                ids.extend(part)
            positions, indices = [], []
            while i < n and len(ids) + len(parts[i]) <= self.max_length:
                ids.extend(parts[i])
                positions.append(len(ids) - 1)
                indices.append(i)
                i += 1
            windows.append(Window(ids, positions, indices))
        return windows


def encoder_for(tokenizer, sidecar) -> StepEncoder:
    """The encoder a checkpoint was trained with, from its sidecar (`layout`, step tag, window length)."""
    tag_ids = tokenizer.encode(sidecar.step_tag, add_special_tokens=False) if sidecar.layout == "trl" else None
    return StepEncoder(tokenizer, sidecar.step_tag_id, sidecar.max_length, layout=sidecar.layout, tag_ids=tag_ids)
