"""`prm-distill import-openrlhf`: a PRM that OpenRLHF's (removed) `train_prm` trained, scored here as it scored.

OpenRLHF's PRM is the causal LM itself: the trajectory is one text with a placeholder token (`ки`) after each
step, tokenised whole without special tokens, and a step's P(good) is the softmax over the two reward tokens'
logits (`+` good, `-` bad) at the placeholder's own position. A softmax over two logits depends only on the two
lm_head rows, so the same model with a two-class head made of those rows (`-` as class 0, `+` as class 1, no
bias) gives the same P(good) exactly; the folder is saved as that `*ForTokenClassification` with an
`openrlhf`-layout sidecar (`encoding.TextFormat`), so `eval`, `serve`, vLLM, the RL scorer and `recalibrate` use
it as trained. The import scores a probe trajectory both ways and refuses a model whose two readings differ
(a model that scales or caps its logits), or whose tokenizer does not keep the placeholder one token in text.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

from .atomic import atomic_folder, occupied
from .checkpoint import CheckpointError, Sidecar, load_checkpoint, write_sidecar
from .encoding import EncodingError, TextFormat, encoder_for
from .saved_model import check_saved_model

# OpenRLHF's PRM recipes (Math-Shepherd's data): --placeholder_token ки --reward_tokens + -, --max_len 2048
PLACEHOLDER = "ки"
REWARD_TOKENS = ("+", "-")
MAX_LENGTH = 2048
PROBE = ("Tom has 3 boxes of 4 pens. How many pens does he have?", ["3 boxes x 4 pens = 12 pens.", "The answer is: 12"])
AGREEMENT = 1e-4  # largest difference allowed between the causal LM's P(good) and the converted head's


def _token_id(tokenizer, text: str, what: str, src: Path) -> int:
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:  # OpenRLHF asserted the same (convert_token_to_id), so its training could not have used it
        raise CheckpointError(f"{src}: the {what} {text!r} is {len(ids)} tokens {ids} for this tokenizer; OpenRLHF needed one "
                              "(was the token added to the tokenizer before training? its saved tokenizer must hold it)")
    return int(ids[0])


def _causal_reading(model, window_ids: list[int], positions: list[int], good: int, bad: int) -> list[float]:
    import torch

    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([window_ids])).logits[0, positions].float()
    return logits[:, [good, bad]].softmax(-1)[:, 0].tolist()


def import_openrlhf(model: str | os.PathLike, output: str | os.PathLike, *, placeholder: str = PLACEHOLDER,
                    reward_tokens: tuple[str, str] = REWARD_TOKENS, text_format: TextFormat | None = None,
                    max_length: int = MAX_LENGTH) -> Sidecar:
    """Write `output`: `model` with a two-class head from its reward tokens' lm_head rows, its tokenizer and an
    `openrlhf`-layout sidecar; returns the sidecar. `reward_tokens` is (good, bad), OpenRLHF's order. No
    threshold is stored: `average.choose_threshold_into` sets one."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer

    src, out = Path(model), Path(output)
    config = check_saved_model(src, "OpenRLHF's train_prm")
    if not any(str(a).endswith("ForCausalLM") for a in config.get("architectures") or []):
        raise CheckpointError(f"{src}: a {', '.join(config.get('architectures') or []) or 'model without architectures'}, not a "
                              "causal LM (train_prm trained and saved *ForCausalLM); a token classifier from TRL is `import-trl`'s")
    if len(reward_tokens) != 2 or reward_tokens[0] == reward_tokens[1]:
        raise ValueError(f"reward tokens are two different tokens (good, bad), got {list(reward_tokens)}")
    if max_length < 8:
        raise ValueError(f"max_length must be at least 8 tokens, got {max_length}")
    text_format = text_format or TextFormat()
    try:
        text_format.check(placeholder)
    except EncodingError as e:
        raise ValueError(str(e)) from None
    if occupied(out):
        raise ValueError(f"{out} exists and is not empty: import-openrlhf writes a new folder (it never overwrites one)")
    tokenizer = AutoTokenizer.from_pretrained(src)
    place_id = _token_id(tokenizer, placeholder, "placeholder", src)
    good, bad = (_token_id(tokenizer, t, "reward token", src) for t in reward_tokens)
    sidecar = Sidecar(step_tag=placeholder, step_tag_id=place_id, max_length=int(max_length), layout="openrlhf",
                      text_format=asdict(text_format),
                      threshold_source="none: imported, no dev split scored (prm-distill import-openrlhf --dev chooses one)",
                      training={"imported_from": str(src.resolve()), "trainer": "OpenRLHF train_prm",
                                "reward_tokens": {"good": [reward_tokens[0], good], "bad": [reward_tokens[1], bad]}})
    try:
        probe = encoder_for(tokenizer, sidecar).encode(*PROBE).windows[0]
    except EncodingError as e:
        raise CheckpointError(f"{src}: {e}") from None

    causal = AutoModelForCausalLM.from_pretrained(src, use_safetensors=True, dtype=torch.float32).eval()
    saved_dtype = getattr(torch, str(config.get("torch_dtype") or config.get("dtype") or "float32"), torch.float32)
    reference = _causal_reading(causal, probe.input_ids, probe.tag_positions, good, bad)
    rows = causal.get_output_embeddings().weight.detach()[[bad, good]].clone()
    head_config = causal.config
    head_config.num_labels, head_config.id2label, head_config.label2id = 2, {0: "bad", 1: "good"}, {"bad": 0, "good": 1}
    with torch.device("meta"):
        classifier = AutoModelForTokenClassification.from_config(head_config)
    prefix = classifier.base_model_prefix
    setattr(classifier, prefix, getattr(causal, prefix))  # the same body, not a copy
    name = next((n for n in ("score", "classifier") if isinstance(getattr(classifier, n, None), torch.nn.Linear)), None)
    if name is None:
        raise CheckpointError(f"{src}: {type(classifier).__name__} has no linear `score` or `classifier` head to set")
    head = torch.nn.Linear(rows.shape[1], 2, bias=getattr(classifier, name).bias is not None)  # the class's own head, made real
    with torch.no_grad():
        head.weight.copy_(rows)
        if head.bias is not None:
            head.bias.zero_()
    setattr(classifier, name, head)
    if any(p.is_meta for p in classifier.parameters()):
        raise CheckpointError(f"{src}: {type(classifier).__name__} holds parts a causal LM does not have; it cannot be converted")
    classifier.config.architectures = [type(classifier).__name__]

    with atomic_folder(out) as tmp:
        classifier.to(saved_dtype).save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        write_sidecar(tmp, sidecar)
        del causal, classifier
        loaded, _, _ = load_checkpoint(tmp, device="cpu")  # the folder loads; its scores are the causal LM's
        with torch.inference_mode():
            logits = loaded(input_ids=torch.tensor([probe.input_ids])).logits[0, probe.tag_positions].float()
        got = logits.softmax(-1)[:, 1].tolist()
        worst = max(abs(a - b) for a, b in zip(got, reference, strict=True))
        if worst > AGREEMENT:
            raise CheckpointError(f"{src}: the converted head's P(good) differs from the causal LM's by {worst:.2g} on a probe "
                                  f"(more than {AGREEMENT}): this model does more to its logits than the lm_head (a scale or a cap)")
    return sidecar


def read_text_format(question: str | None, step: str | None, joiner: str | None, add_special_tokens: bool = False) -> TextFormat:
    """A TextFormat from the CLI's strings, Math-Shepherd's where one is not given; `\\n` and `\\t` typed in a shell
    mean a newline and a tab."""
    from .import_trl import read_separator

    base = TextFormat()
    return TextFormat(question=read_separator(question) if question is not None else base.question,
                      step=read_separator(step) if step is not None else base.step,
                      joiner=read_separator(joiner) if joiner is not None else base.joiner, add_special_tokens=add_special_tokens)


