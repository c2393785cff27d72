"""What loading a backbone prints: not transformers' LOAD REPORT for the head it must initialise, nor
DeepSpeed's "Setting accelerator to CPU"; but weights missing from the backbone itself still warn."""

from __future__ import annotations

import json
import logging
import shutil

from prm_distill.backbones import load_token_classifier


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _listen(name: str) -> _Records:
    """A handler on the logger itself: transformers' loggers do not propagate to pytest's caplog."""
    rec = _Records()
    logging.getLogger(name).addHandler(rec)
    return rec


def test_the_new_head_is_loaded_without_a_load_report(tiny_backbone, caplog):
    report = _listen("transformers.modeling_utils")
    try:
        with caplog.at_level(logging.DEBUG, logger="prm_distill.backbones"):
            model = load_token_classifier(str(tiny_backbone), num_labels=2)
    finally:
        logging.getLogger("transformers.modeling_utils").removeHandler(report)
    assert type(model).__name__ == "LlamaForTokenClassification"
    assert not any("LOAD REPORT" in m for m in report.messages)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("new token-classification head score.bias, score.weight" in r.getMessage() for r in caplog.records)
    assert not logging.getLogger("transformers.modeling_utils").filters  # silenced during the call only


def test_weights_missing_from_the_backbone_itself_still_warn(tiny_backbone, tmp_path, caplog):
    broken = tmp_path / "deeper"
    shutil.copytree(tiny_backbone, broken)
    cfg = json.loads((broken / "config.json").read_text())
    cfg["num_hidden_layers"] += 1  # a layer the checkpoint does not have: real news, not the expected head
    (broken / "config.json").write_text(json.dumps(cfg))
    with caplog.at_level(logging.WARNING, logger="prm_distill.backbones"):
        load_token_classifier(str(broken), num_labels=2)
    warned = [r.getMessage() for r in caplog.records if r.name == "prm_distill.backbones"]
    assert len(warned) == 1 and "missing (newly initialised)" in warned[0] and f"model.layers.{cfg['num_hidden_layers'] - 1}." in warned[0]
    assert "score." not in warned[0]


def test_deepspeeds_cpu_note_is_dropped_and_nothing_else():
    ds = logging.getLogger("DeepSpeed")  # the filter is installed when prm_distill.backbones is imported
    note = logging.LogRecord("DeepSpeed", logging.WARNING, __file__, 1, "Setting accelerator to CPU. If you have GPU or other "
                             "accelerator, we were unable to detect it.", None, None)
    other = logging.LogRecord("DeepSpeed", logging.WARNING, __file__, 1, "something DeepSpeed really wants to say", None, None)
    assert not ds.filter(note) and ds.filter(other)
