"""THE one place that turns (question, steps) into token ids and step-tag positions.

Training, evaluation, serving and the scorer all call `StepEncoder.encode`, so the ids a model
was trained on are the ids it is scored on. The question and each step are tokenised separately
(no special tokens) and one step-tag token is appended after every step; strings are never joined
and re-tokenised, because BPE merges across a joined boundary change the ids (a public PRM lost
about 4 F1 points to that mismatch).

With a causal backbone the hidden state at step k's tag has seen exactly the question and steps
1..k, so one forward pass gives every step's context-prefixed score.

Three layouts: `tagged` (ours: the question plus "\n", each step followed by one step-tag token), `trl`
(the sequence TRL's PRMTrainer trained on, for checkpoints it made: BOS when the tokenizer has one, the
question as given, each step followed by the ids of its step separator, scored at the separator's last
token) and `openrlhf` (for PRMs OpenRLHF's `train_prm` made: the trajectory written as one text in a
`TextFormat`, Math-Shepherd's by default, tokenised whole without special tokens as OpenRLHF did, scored
at every placeholder token). The first two share the piecewise code below; `openrlhf` cannot, because its
model learned the ids of the joined text, so it tokenises each window's text whole and keeps the same
window rule (question, earlier steps as context, new steps scored once) and truncation rule.

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
LAYOUTS = ("tagged", "trl", "openrlhf")


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


@dataclass(frozen=True)
class TextFormat:
    """How the `openrlhf` layout writes (question, steps) as one text: Math-Shepherd's layout by default,
    `{question} Step 1: <step> ки` then a newline and `Step 2: <step> ки`, which OpenRLHF's PRM recipes trained on.

    `step` holds `{step}` once, then the placeholder; `{n}` is the step's 1-based number. A step that already
    begins with its numbered prefix (`Step 2:`, as `records.read_openrlhf` keeps it) is not numbered twice,
    so rows read from OpenRLHF's data are scored on their own text."""

    question: str = "{question} "
    step: str = "Step {n}: {step} ки"
    joiner: str = "\n"
    add_special_tokens: bool = False  # OpenRLHF's train_prm: none; Math-Shepherd's own PRM card: tokenizer.encode(text), so BOS

    def check(self, placeholder: str) -> None:
        if self.question.count("{question}") != 1:
            raise EncodingError(f"the question format must hold {{question}} once, got {self.question!r}")
        if self.step.count("{step}") != 1:
            raise EncodingError(f"the step format must hold {{step}} once, got {self.step!r}")
        before, after = self.step.split("{step}")
        if not placeholder or after.count(placeholder) != 1 or placeholder in before + self.joiner + self.question:
            raise EncodingError(f"the step format {self.step!r} must hold the placeholder {placeholder!r} once, after {{step}}, "
                                f"and the question format and joiner none")

    def question_text(self, question: str) -> str:
        return self.question.replace("{question}", question)

    def step_text(self, n: int, step: str) -> str:
        before, after = (part.replace("{n}", str(n)) for part in self.step.split("{step}"))
        mark = before.strip()
        if mark and step.startswith(mark):
            step = step[len(mark):].lstrip()
        return before + step + after


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
        text_format: TextFormat | None = None,
        placeholder: str | None = None,
    ):
        """`layout` trl: `tag_ids` are the step separator's ids (ending in `step_tag_id`); tagged: [step_tag_id];
        openrlhf: `placeholder` is the text of the token `step_tag_id`, written as `text_format` says."""
        if layout not in LAYOUTS:
            raise EncodingError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
        self.layout = layout
        self.tag_ids = list(tag_ids) if tag_ids else [int(step_tag_id)]
        if self.tag_ids[-1] != int(step_tag_id) or (layout != "trl" and len(self.tag_ids) != 1):
            raise EncodingError(f"tag ids {self.tag_ids} do not end in the step tag id {step_tag_id}")
        self.text_format, self.placeholder = text_format or TextFormat(), placeholder or ""
        if layout == "openrlhf":
            self.text_format.check(self.placeholder)
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
        if self.layout == "openrlhf":
            return self._encode_text(question, steps)
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

    # -- the openrlhf layout: each window's text tokenised whole -------------------------------------------

    def _encode_text(self, question: str, steps: list[str]) -> EncodedTrajectory:
        fmt, mark = self.text_format, self.placeholder
        for i, text in enumerate([question, *steps]):
            if mark in text:
                where = "the question" if i == 0 else f"step {i - 1}"
                raise EncodingError(f"{where} contains the placeholder {mark!r}: a score would be read inside it")
        q_text, truncated = fmt.question_text(question), False
        q_ids = self._tokenize([q_text])[0]
        if len(q_ids) > self.max_question_tokens:  # keep its first tokens, as the piecewise layouts do
            q_text, truncated = self._cut(q_ids, self.max_question_tokens, keep="first"), True
            q_ids = self._tokenize([q_text])[0]
        parts = [fmt.step_text(k + 1, s) for k, s in enumerate(steps)]
        whole = self._window_ids(q_text, parts)
        if len(whole) <= self.max_length:  # the usual case: one window, one tokenisation
            return EncodedTrajectory([self._text_window(whole, 0, 0, len(parts))], len(parts), truncated)
        room = self.max_length - len(q_ids)
        sizes = [len(ids) for ids in self._tokenize([fmt.joiner + p for p in parts])]  # to choose context; fit is checked on real ids
        windows, i, n = [], 0, len(parts)
        while i < n:
            start, used = i, 0
            while start > 0 and used + sizes[start - 1] <= min(int(room * self.context_fraction), room - sizes[i]):
                start -= 1
                used += sizes[start]
            ids = self._window_ids(q_text, parts[start:i + 1])
            while len(ids) > self.max_length and start < i:  # the estimate was short: less context
                start += 1
                ids = self._window_ids(q_text, parts[start:i + 1])
            if len(ids) > self.max_length:  # one step alone does not fit: keep its last tokens, its placeholder with them
                parts[i], truncated, start = self._shorten(q_text, room, parts[i]), True, i
                ids = self._window_ids(q_text, parts[i:i + 1])
            end = i + 1
            while end < n:
                longer = self._window_ids(q_text, parts[start:end + 1])
                if len(longer) > self.max_length:
                    break
                ids, end = longer, end + 1
            windows.append(self._text_window(ids, start, i, end))
            i = end
        return EncodedTrajectory(windows, n, truncated)

    def _text_window(self, ids: list[int], start: int, first: int, end: int) -> Window:
        """The window of steps `start`..`end - 1` whose steps from `first` on are scored, at their placeholders."""
        tags = [pos for pos, token in enumerate(ids) if token == self.step_tag_id]
        if len(tags) != end - start:
            raise EncodingError(f"the placeholder {self.placeholder!r} is token {self.step_tag_id} alone, but {len(tags)} of them are in "
                                f"the text of {end - start} steps: this tokenizer merges it with the text around it, so the model "
                                "cannot be read where it was trained (OpenRLHF found the same positions only where they matched)")
        return Window(ids, tags[first - start:], list(range(first, end)))

    def _window_ids(self, q_text: str, parts: list[str]) -> list[int]:
        text = q_text + self.text_format.joiner.join(parts)
        return self.tokenizer([text], add_special_tokens=self.text_format.add_special_tokens)["input_ids"][0]

    def _cut(self, ids: list[int], keep_n: int, keep: str) -> str:
        """The text of the first (or last) `keep_n` tokens of `ids`, cut further until it re-tokenises within them."""
        while keep_n > 0:
            text = self.tokenizer.decode(ids[:keep_n] if keep == "first" else ids[-keep_n:], skip_special_tokens=True)
            if len(self._tokenize([text])[0]) <= min(keep_n, len(ids)):
                return text
            keep_n -= 1
        raise EncodingError("the window is too short for any of this text")

    def _shorten(self, q_text: str, room: int, part: str) -> str:
        """A step's text cut to its last tokens so that the question and it fit one window (placeholder kept);
        `room` is what the question leaves of the window."""
        ids = self._tokenize([part])[0]
        keep = room
        while keep > 0:
            text = self._cut(ids, keep, keep="last")
            if self.placeholder not in text:
                break
            if len(self._window_ids(q_text, [text])) <= self.max_length:
                return text
            keep -= 1
        raise EncodingError(f"max_length {self.max_length} leaves no room for a step and its placeholder {self.placeholder!r}")


def encoder_for(tokenizer, sidecar) -> StepEncoder:
    """The encoder a checkpoint was trained with, from its sidecar (`layout`, step tag, window length)."""
    tag_ids = tokenizer.encode(sidecar.step_tag, add_special_tokens=False) if sidecar.layout == "trl" else None
    text_format = TextFormat(**sidecar.text_format) if sidecar.text_format else None
    return StepEncoder(tokenizer, sidecar.step_tag_id, sidecar.max_length, layout=sidecar.layout, tag_ids=tag_ids,
                       text_format=text_format, placeholder=sidecar.step_tag)
