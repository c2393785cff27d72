"""Which local model a policy is: a short version for the records, and the check that it can generate."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..backbones import BackboneError, resolve_backbone
from .base import PolicyError


def fingerprint(path: str | Path) -> str:
    """A short, stable version of a local model folder: config + weight file names, sizes and edges
    (hashing gigabytes of weights on every run would cost more than the rollouts)."""
    root = Path(path)
    h = hashlib.sha256()
    for f in sorted(root.iterdir()):
        if f.name == "config.json":
            h.update(f.read_bytes())
        elif f.suffix in (".safetensors", ".bin", ".gguf"):
            size = f.stat().st_size
            h.update(f"{f.name}:{size}".encode())
            with open(f, "rb") as fh:
                h.update(fh.read(1 << 16))
                fh.seek(max(0, size - (1 << 16)))
                h.update(fh.read(1 << 16))
    return "sha256:" + h.hexdigest()[:16]


def check_causal_lm(path: str) -> None:
    """Raise PolicyError unless `path` holds a causal LM (a PRM checkpoint or an encoder is refused)."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as e:
        where = "folder" if Path(path).exists() else "model (not a local folder, and the hub copy could not be loaded)"
        raise PolicyError(f"policy {path!r}: cannot read a model config from this {where}: {str(e).splitlines()[0]}") from None
    causal = set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    archs = list(getattr(config, "architectures", None) or [])
    if archs and not any(a in causal or a.endswith("ForCausalLM") for a in archs):
        raise PolicyError(f"policy {path!r} is a {', '.join(archs)} checkpoint, not a causal LM: point --policy at the model that "
                          "writes the solutions (a PRM checkpoint scores steps, it cannot generate them)")
    if not archs and config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise PolicyError(f"policy {path!r}: model type {config.model_type!r} has no causal-LM head in transformers")


def local_path(name: str) -> str:
    """The local folder of policy `name` (a backbone name or a path), checked to be a causal LM."""
    try:
        path = resolve_backbone(name)
    except BackboneError as e:
        raise PolicyError(f"policy {name!r}: {e}") from None
    check_causal_lm(path)
    return path
