"""Backbone + two-class token-classification head + optional LoRA, and the export that merges it."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ..backbones import BackboneError, load_token_classifier, resolve_backbone
from ..checkpoint import SIDECAR_NAME, CheckpointError, Sidecar, check_step_tag, is_token_classifier, read_sidecar, save_checkpoint
from ..encoding import DEFAULT_STEP_TAG, ensure_step_tag
from .config import LoraSettings, ModelConfig

ID2LABEL = {0: "bad", 1: "good"}
log = logging.getLogger("prm_distill.train")


def load_tokenizer(path: str, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except Exception as e:  # noqa: BLE001 - transformers raises many kinds here
        raise BackboneError(f"backbone {path!r} has no usable tokenizer: {e}") from e
    return tok  # StepEncoder then checks that it really encodes text


def build_model(model_cfg: ModelConfig, lora: LoraSettings):
    """(model, tokenizer, encoding, resolved backbone path); `encoding` is the sidecar's encoding part
    (step tag, its id, window length, layout) that `encoding.encoder_for` builds the encoder from."""
    path = resolve_backbone(model_cfg.backbone)
    tok = load_tokenizer(path, model_cfg.trust_remote_code)
    encoding = training_encoding(path, tok, model_cfg)
    try:
        model = load_token_classifier(  # the new head's LOAD REPORT is expected: not shown
            path, num_labels=2, id2label=ID2LABEL, label2id={v: k for k, v in ID2LABEL.items()},
            trust_remote_code=model_cfg.trust_remote_code,
        )
    except (OSError, ValueError) as e:
        raise BackboneError(f"cannot load backbone {path!r} as a token classifier: {e}") from e
    if model_cfg.num_layers is not None:
        truncate_layers(model, model_cfg.num_layers)
    if model_cfg.head_init == "zero":
        zero_head(model)
    if len(tok) > model.get_input_embeddings().num_embeddings:
        model.resize_token_embeddings(len(tok))
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    if model_cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if lora.enabled:
        model = _add_lora(model, lora)
    elif lora.top_layers is not None:
        freeze_below(model, lora.top_layers)
    return model, tok, encoding, path


def _is_token_classifier(path: str) -> bool:
    try:
        return is_token_classifier(json.loads((Path(path) / "config.json").read_text(encoding="utf-8")))
    except (OSError, ValueError, AttributeError):  # no readable config.json object: a hub id, or not a model folder
        return False


def training_encoding(path: str, tok, model_cfg: ModelConfig) -> Sidecar:
    """A backbone that is itself a PRM checkpoint (trained here, or a TRL or OpenRLHF PRM brought in by import-trl / import-openrlhf)
    goes on in the encoding its head learned, its layout and step tag: re-training it in another one
    would throw away what the warm start is for. Any other backbone gets `model.step_tag`."""
    if not (Path(path) / SIDECAR_NAME).is_file():
        if _is_token_classifier(path):
            log.warning("backbone %s is already a token classifier but has no %s: it is trained in this package's encoding (a "
                        "step tag after each step). A PRM trained by TRL's PRMTrainer keeps its own encoding only when brought in "
                        "first with `prm-distill import-trl`, then given as model.backbone", path, SIDECAR_NAME)
        return Sidecar(step_tag=model_cfg.step_tag, step_tag_id=ensure_step_tag(tok, model_cfg.step_tag), max_length=model_cfg.max_length)
    try:
        prior = read_sidecar(path)
    except CheckpointError as e:
        raise BackboneError(f"backbone {path} is a PRM checkpoint whose sidecar cannot be read: {e}") from e
    if model_cfg.step_tag not in (DEFAULT_STEP_TAG, prior.step_tag):
        raise BackboneError(f"model.step_tag is {model_cfg.step_tag!r}, but the backbone {path} is a PRM checkpoint trained with the step "
                            f"tag {prior.step_tag!r} ({prior.layout} layout), and training goes on in its encoding: leave model.step_tag "
                            f"unset or set it to {prior.step_tag!r}")
    try:
        check_step_tag(tok, prior, f"backbone {path}")
    except CheckpointError as e:
        raise BackboneError(str(e)) from e
    log.info("backbone %s is a PRM checkpoint: training goes on in its encoding (%s layout, step tag %r)", path, prior.layout, prior.step_tag)
    return Sidecar(step_tag=prior.step_tag, step_tag_id=prior.step_tag_id, max_length=model_cfg.max_length, layout=prior.layout,
                   text_format=prior.text_format)


def truncate_layers(model, n: int) -> None:
    """Keep only the first `n` transformer layers: a shallower PRM is proportionally cheaper to
    train and serve, and the middle layers of a small LM often carry the most step-level signal.
    The saved config says `num_hidden_layers = n`, so transformers and vLLM load it as is."""
    total = model.config.num_hidden_layers
    if not 1 <= n <= total:
        raise BackboneError(f"model.num_layers must be between 1 and {total} for this backbone, got {n}")
    stack = _layer_stack(model, "truncate it")
    for i in range(total - 1, n - 1, -1):
        del stack[i]
    model.config.num_hidden_layers = n
    if isinstance(getattr(model.config, "layer_types", None), list):
        model.config.layer_types = model.config.layer_types[:n]


def _layer_stack(model, why: str):
    import torch

    total = model.config.num_hidden_layers
    stacks = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == total]
    if not stacks:
        raise BackboneError(f"cannot find the transformer layer stack of this backbone to {why}")
    return stacks[0]


def freeze_below(model, top_layers: int) -> None:
    """Full fine-tuning of the top `top_layers` layers only (with the final norm and the head): the embeddings
    and the layers below are frozen, so the backward pass stops there, as LoRA's `top_layers` makes it stop."""
    stack = _layer_stack(model, "freeze its lower layers")
    frozen = list(model.get_input_embeddings().parameters())
    for layer in list(stack)[: max(0, len(stack) - top_layers)]:
        frozen.extend(layer.parameters())
    for param in frozen:
        param.requires_grad_(False)
    if getattr(model, "is_gradient_checkpointing", False):  # checkpointed layers need an input that requires grad
        model.enable_input_require_grads()


def zero_head(model) -> None:
    """Start the two-class head at zero: every step begins at P(good) = 0.5 whatever the scale of the
    backbone's features. Qwen2.5's final norm weights average ~7 (SmolLM2's ~1.8), so the default
    normal init (std 0.02) starts with logits of magnitude ~4 and the first steps go to undoing it."""
    import torch

    head = getattr(model, "score", None) or getattr(model, "classifier", None)
    if not isinstance(head, torch.nn.Linear):
        raise BackboneError("model.head_init=zero: cannot find this model's linear classification head (.score or .classifier)")
    with torch.no_grad():
        head.weight.zero_()
        if head.bias is not None:
            head.bias.zero_()


def _add_lora(model, lora: LoraSettings):
    from peft import LoraConfig, TaskType, get_peft_model

    layers = None
    if lora.top_layers is not None:
        n = model.config.num_hidden_layers
        layers = list(range(max(0, n - lora.top_layers), n))
    targets = "all-linear" if lora.target_modules == ["all-linear"] else lora.target_modules
    cfg = LoraConfig(
        task_type=TaskType.TOKEN_CLS, r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
        target_modules=targets, layers_to_transform=layers,
    )
    model = get_peft_model(model, cfg)
    head = [n for n, p in model.named_parameters() if "modules_to_save" in n and p.requires_grad]
    if not head:
        raise BackboneError("LoRA setup left the classification head frozen; it must be trainable")
    return model


def export(model, tokenizer, out_dir: str, sidecar: Sidecar) -> None:
    """Merge LoRA (if any) and save a plain *ForTokenClassification folder + sidecar."""
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    save_checkpoint(model, tokenizer, out_dir, sidecar)
